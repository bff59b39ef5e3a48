"""Attempt ends of ``memory://``: ``finish`` records each fenced attempt end and moves its
job to the state the core's decision names (:func:`~queue_core.rules.outcomes.end_state`);
a flow step's job then ends its step, in the same locked step
(:meth:`MemoryFlows.step_ended`), and a workflow's suspended function step applies its
suspension (:meth:`MemoryFlows.suspended`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from backends.memory.progress import MemoryProgress
from backends.memory.records import Job
from backends.memory.store import MemoryStore
from queue_core.records.jobs import AttemptEnd, JobState
from queue_core.records.workflows import SuspendedEnd
from queue_core.rules.outcomes import end_state

if TYPE_CHECKING:
    from backends.memory.flows import MemoryFlows

__all__ = ["MemoryFinishing"]


class MemoryFinishing:
    """``finish``.

    Args:
        store: the store.
        progress: stores the progress an end carries.
        flows: the flows part (built on first use), told when a step's job changes state.
    """

    def __init__(
        self, store: MemoryStore, progress: MemoryProgress, flows: Callable[[], MemoryFlows]
    ) -> None:
        self.store = store
        self.progress = progress
        self.flows = flows

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.protocol.Storage.finish`."""
        store = self.store
        with store.cond:
            t = store.now(now)
            took: list[bool] = []
            for end in ends:
                job = store.current(end.ref)
                if job is None:
                    took.append(False)
                    continue
                if end.progress is not None:
                    self.progress.record(job.id, end.progress, t)
                _apply(store, job, end, t)
                if isinstance(end, SuspendedEnd):  # a workflow's function: a suspension
                    self.flows().suspended(job, end.suspension, t)
                elif job.spec.execution_id is not None:
                    self.flows().step_ended(job, t)
                took.append(True)
            if any(took):
                store.cond.notify_all()
            return took


def _apply(store: MemoryStore, job: Job, end: AttemptEnd, t: int) -> None:
    """Record ``end`` on ``job``'s last attempt and move the job where its decision says."""
    attempt = job.attempts[-1]
    attempt.outcome = end.outcome
    attempt.reason = end.reason
    attempt.error = end.error
    attempt.mode = end.mode
    attempt.finished_at = t
    if end.error is not None:
        job.error = end.error
    d = end.decision
    if not d.spends_attempt:  # the attempt spent none of the budget
        job.refund()
    state, reason = end_state(d, end.reason)
    if state is JobState.SUCCEEDED:
        job.result = end.result
        store.end(job, state, reason, t)
    elif state is JobState.QUEUED:
        if d.lost_delay_ms is not None:
            job.lost_delay_ms = d.lost_delay_ms
        job.ready_at = t + d.delay_ms
        job.reason = None
        store.enter(job, JobState.QUEUED)
    elif state is JobState.DEAD:
        assert reason is not None
        store.dead_letter(job, reason, end.error, t)
    else:
        store.end(job, state, reason, t)
