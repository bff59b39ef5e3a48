"""Progress of the SQL backend (``SupportsProgress``): each job's latest report.

Kept on the job's row (``qc_jobs.progress`` / ``progress_message`` / ``progress_at``,
schema version 11), so it lives as long as the job and is pruned with it. A report is
fenced like a heartbeat (job id, attempt and lease token of the running attempt);
``finish`` stores an end's report in its own transaction, only for the ends it took
(:meth:`Progress.record`).
"""

from __future__ import annotations

from typing import Any

from backends.sql.store import Store
from queue_core.records.control import Progress, ProgressUpdate
from queue_core.records.jobs import LeaseRef, dt_from_ms

__all__ = ["Progresses"]


class Progresses:
    """:class:`~queue_core.storage.control.SupportsProgress` on ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def set_progress(
        self, ref: LeaseRef, update: ProgressUpdate, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.storage.control.SupportsProgress.set_progress`."""
        params = {"id": ref.job_id, "attempt": ref.attempt, "token": ref.lease_token,
                  "fraction": float(update.fraction), "message": update.message,
                  "now": self.store.now(now)}  # fmt: skip
        with self.store.stmt() as cur:
            return cur.execute(self.store.q["progress_set"], params).fetchone() is not None

    def get_progress(self, job_id: str) -> Progress | None:
        """See :meth:`queue_core.storage.control.SupportsProgress.get_progress`."""
        rows = self.store.fetch("progress_get", {"id": job_id})
        if not rows or rows[0]["progress_at"] is None:
            return None
        r = rows[0]
        at = dt_from_ms(int(r["progress_at"]))
        assert at is not None
        return Progress(fraction=float(r["progress"]), message=r["progress_message"], at=at)

    def record(self, cur: Any, ends: list[tuple[str, ProgressUpdate]], now: int | None) -> None:
        """Store the reports of ends just taken in ``cur``'s transaction (``(job id,
        update)``; the end's fence has already been checked)."""
        rows = [{"id": job_id, "fraction": float(u.fraction), "message": u.message,
                 "now": now} for job_id, u in ends]  # fmt: skip
        if rows:
            cur.executemany(self.store.q["progress_record"], rows)
