"""Rate limits by body start (SPEC §13): a rate-limited job whose body cannot start by its
``start_by`` is given back instead of started.

Storage counts each claim of a rate key at the latest time its body may start
(:attr:`~queue_core.records.jobs.ClaimedJob.start_by`, :func:`queue_core.rules.limits.rate_grant`);
the worker keeps its side of that bound here, just before it hands the body to its thread,
process or task. The judgement is :func:`queue_core.rules.limits.start_late`.

The bound is counted on the storage's wall clock, so the worker reads the machine's
clocks for it, through its pacing clock (:attr:`~queue_core.worker.timing.Timing.pacing`,
the system's), never a manual test clock that storage does not follow.
"""

from __future__ import annotations

from queue_core.app.clock import Clock
from queue_core.records.jobs import ClaimedJob
from queue_core.rules.limits import start_late

__all__ = ["started_late"]


def started_late(job: ClaimedJob, claim_began: float, clock: Clock) -> bool:
    """Whether ``job`` (claimed by a call that began at ``claim_began``, monotonic
    seconds of ``clock``, the system's) can no longer start its body within its
    ``start_by``. ``False`` for a job without one."""
    if job.start_by is None:
        return False
    since = (clock.monotonic() - claim_began) * 1000
    return start_late(
        job.start_by,
        job.started_at,
        returned_wall_ms=clock.now_ms(),
        call_ms=since,
        since_return_ms=0,
    )
