"""``cancel_in_progress`` and ``latest`` on the SQL backend (``SupportsSupersede``).

In the enqueue's transaction, with the job's concurrency key locked (SQLite: the write
lock; PostgreSQL: a transaction advisory lock ``sup:<key>``, taken with the unique keys
in sorted order), :meth:`Supersedes.end_older` reads the key's queued and running jobs in
enqueue order (``ix_qc_jobs_ckey``), asks :func:`queue_core.rules.control.supersede` which
to end and ends each as :func:`~queue_core.rules.control.superseded_end` says; a running
one's attempt ends ``cancelled`` at once (its record written from the job row, as the
reaper writes one) and its lease token is cleared, so its worker's ``finish`` is refused
and ``renew`` reports it lost. Then the new job is stored. At claim these jobs behave as
``queue`` (the keyed claim).
"""

from __future__ import annotations

from typing import Any

from backends.sql.store import Store
from queue_core.records.jobs import JobState, NewJob, Outcome
from queue_core.rules.control import Active, supersede, superseded_end

__all__ = ["SUPERSEDING", "Supersedes"]

SUPERSEDING = ("cancel_in_progress", "latest")
"""The ``concurrency_behavior`` values a new job supersedes older ones by."""


class Supersedes:
    """The ends a superseding job makes on arriving (called by the enqueue transaction of
    :class:`~backends.sql.limits.Limits`)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def end_older(self, cur: Any, job: NewJob, t: int) -> tuple[str, ...]:
        """End the jobs ``job`` supersedes at ``t``; their ids, oldest first."""
        assert job.concurrency_key is not None
        q = self.store.q
        rows = cur.execute(q["supersede_active"], {"key": job.concurrency_key}).fetchall()
        active = [Active(r["id"], JobState(r["state"]), int(r["seq"])) for r in rows]
        victims = supersede(job.concurrency_behavior, active, job.concurrency_limit or 1)
        if not victims:
            return ()
        state, reason = superseded_end(job.concurrency_behavior)
        running = {a.id for a in active if a.state is JobState.RUNNING}
        for victim in victims:
            if victim in running:
                ended = {"job_id": victim, "number": _attempt(rows, victim), "now": t,
                         "outcome": Outcome.CANCELLED.value, "reason": reason}  # fmt: skip
                cur.execute(q["end_attempt"], ended)
            params = {"id": victim, "state": state.value, "reason": reason, "now": t}
            cur.execute(q["supersede_end"], params)
        self.store.notify(cur)  # a freed place
        return tuple(victims)


def _attempt(rows: list[Any], job_id: str) -> int:
    return int(next(r["attempt"] for r in rows if r["id"] == job_id))
