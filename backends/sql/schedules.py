"""Periodic ticks on SQLite and PostgreSQL
(:class:`~queue_core.schedules.SupportsSchedules`).

``qc_schedule_ticks`` holds one row per schedule: its last tick. ``enqueue_tick`` moves
that row forward with one conditional upsert (``schedule_claim_tick``: inserted, or
updated only when the new tick is later) and inserts the tick's job in the same
transaction, so exactly one of any number of racing schedulers stores the tick's job
(SQLite: the write lock serialises them; PostgreSQL: the row lock of the upsert, which
re-checks its condition against the committed row).
"""

from __future__ import annotations

from typing import Any

from queue_core.model import JobState, NewJob, Reason

__all__ = ["SQLSchedules"]


class SQLSchedules:
    """Mixed into :class:`~backends.sql.SQLStorage` (whose transactions, queries and
    job insertion it uses)."""

    def enqueue_tick(
        self, schedule: str, tick_ms: int, job: NewJob, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.schedules.SupportsSchedules.enqueue_tick`."""
        me: Any = self
        with me._tx() as cur:
            cur.execute(me._q["schedule_claim_tick"], {"name": schedule, "tick": tick_ms})
            if cur.rowcount != 1:
                return False
            t = me._resolve_now(cur, now)
            state, reason = JobState.QUEUED, None
            key, limit = job.concurrency_key, job.concurrency_limit
            if job.concurrency_skip and key is not None and limit is not None:
                me._try_lock_key(cur, key, wait=True)
                cur.execute(me._q["count_active"], {"keys": me._list([key])})
                active = sum(int(r["n"]) for r in cur.fetchall())
                if active >= limit:
                    state, reason = JobState.SKIPPED, Reason.CONCURRENCY_LIMIT.value
            me._insert(cur, [job], [state], [reason], t)
        return True

    def schedule_ticks(self) -> dict[str, int]:
        """See :meth:`queue_core.schedules.SupportsSchedules.schedule_ticks`."""
        me: Any = self
        with me._stmt() as cur:
            cur.execute(me._q["schedule_ticks"], {})
            return {str(r["name"]): int(r["last_tick"]) for r in cur.fetchall()}
