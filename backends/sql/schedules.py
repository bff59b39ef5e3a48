"""Periodic ticks on the SQL backend (:class:`~queue_core.storage.abilities.SupportsSchedules`).

``qc_schedule_ticks`` holds one row per schedule: its last tick. ``enqueue_tick`` moves
that row forward with one conditional upsert (``schedule_claim_tick``: inserted, or
updated only when the new tick is later) and inserts the tick's job in the same
transaction, so exactly one of any number of racing schedulers stores the tick's job
(SQLite: the write lock serialises them; PostgreSQL: the row lock of the upsert, which
re-checks its condition against the committed row).
"""

from __future__ import annotations

from backends.sql.limits import Limits
from backends.sql.store import Store
from queue_core.records.jobs import NewJob

__all__ = ["Schedules"]


class Schedules:
    """``enqueue_tick`` and ``schedule_ticks`` on ``store`` (a concurrency ``skip`` job
    counted by ``limits``)."""

    def __init__(self, store: Store, limits: Limits) -> None:
        self.store = store
        self.limits = limits

    def enqueue_tick(
        self, schedule: str, tick_ms: int, job: NewJob, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.storage.abilities.SupportsSchedules.enqueue_tick`."""
        store = self.store
        with store.tx() as cur:
            cur.execute(store.q["schedule_claim_tick"], {"name": schedule, "tick": tick_ms})
            if cur.rowcount != 1:
                return False
            t = store.resolve_now(cur, now)
            states, reasons = self.limits.skip_states(cur, [job])
            store.dialect.insert(cur, [job], states, reasons, t)
        return True

    def schedule_ticks(self) -> dict[str, int]:
        """See :meth:`queue_core.storage.abilities.SupportsSchedules.schedule_ticks`."""
        rows = self.store.fetch("schedule_ticks", {})
        return {str(r["name"]): int(r["last_tick"]) for r in rows}
