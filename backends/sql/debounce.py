"""Debounce of the SQL backend (``SupportsDebounce``): many calls, one job, last wins.

``qc_debounce`` (schema version 11) holds the last job stored with each debounce key. In
the enqueue's transaction, with the key locked (SQLite: the write lock; PostgreSQL: a
transaction advisory lock ``debounce:<key>``, taken with the unique keys in sorted order),
:meth:`Debounces.merge` reads the holder's row (``FOR UPDATE``: a claim of it either
committed before, and the holder is no longer queued, or waits) and, when it is still
queued, gives it the call's payload and the run time of
:func:`queue_core.rules.control.debounce_ready_at` -- its ``seq`` (its place among jobs
of equal ready time) stays. Otherwise the new job is stored and :meth:`Debounces.hold`
makes it the key's holder. Prune deletes the keys of the jobs it deletes.
"""

from __future__ import annotations

from typing import Any

from backends.sql.store import Store
from queue_core.records.jobs import Enqueued, JobState, NewJob
from queue_core.rules.control import debounce_ready_at
from queue_core.rules.leases import queued_expiry

__all__ = ["Debounces"]


class Debounces:
    """The debounce keys' holders on ``store`` (called by the enqueue transaction of
    :class:`~backends.sql.limits.Limits`)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def merge(self, cur: Any, job: NewJob, t: int) -> Enqueued | None:
        """Merge ``job`` (a call with a ``debounce_key``) into its key's queued holder at
        ``t``: the answer, or ``None`` when there is no queued holder (store ``job``)."""
        assert job.debounce_key is not None
        assert job.debounce_ms is not None and job.debounce_max_ms is not None
        q = self.store.q
        row = cur.execute(q["debounce_holder"], {"key": job.debounce_key}).fetchone()
        if row is None or row["state"] != JobState.QUEUED.value:
            return None
        ready = debounce_ready_at(int(row["enqueued_at"]), t, job.debounce_ms, job.debounce_max_ms)
        params = {"seq": row["seq"], "payload": job.payload, "run_at": ready,
                  "expires_at": queued_expiry(ready, row["schedule_to_start_ms"])}  # fmt: skip
        if cur.execute(q["debounce_merge"], params).fetchone() is None:
            return None
        return Enqueued(row["id"], JobState.QUEUED, existing=True)

    def hold(self, cur: Any, job: NewJob) -> None:
        """``job``, just stored, is its debounce key's holder."""
        cur.execute(self.store.q["debounce_set"], {"key": job.debounce_key, "job_id": job.id})
