"""The PostgreSQL jobs table vacuumed by the worker's reaper pass when dead rows pile up.

Autovacuum visits a database at most once per ``autovacuum_naptime`` (1 minute by
default): until it comes, a drain's claims walk the dead index entries of the jobs claimed
before it (issue 30, ``bench/history_cost.py``). After each reap :meth:`Vacuum.maybe`
reads the table's dead rows from ``pg_stat_user_tables``, asks
:func:`~queue_core.rules.vacuum.vacuum_due`, and runs ``VACUUM (INDEX_CLEANUP ON,
SKIP_LOCKED) qc_jobs`` on this thread's autocommit connection (never in a transaction).
``SKIP_LOCKED`` makes it one vacuum of the table at a time across every worker and
autovacuum: a vacuum that would wait for another's lock returns at once instead. SQLite
keeps no dead versions and has no such part.
"""

from __future__ import annotations

import logging
import threading
import time

from backends.sql.store import Store
from queue_core.records.errors import StorageError
from queue_core.rules.vacuum import VACUUM_DEAD_ROWS, vacuum_due

__all__ = ["Vacuum"]

log = logging.getLogger(__name__)


class Vacuum:
    """Vacuums ``qc_jobs`` when :func:`vacuum_due` says so (PostgreSQL only).

    Args:
        store: the PostgreSQL store.
        dead_rows_at: the dead rows from which a vacuum is due.
    """

    def __init__(self, store: Store, *, dead_rows_at: int = VACUUM_DEAD_ROWS) -> None:
        self.store = store
        self.dead_rows_at = dead_rows_at
        self.last_took_ms = 0
        """How long this process's last vacuum took (0: none yet)."""
        self.runs = 0
        """Vacuums this process ran (one skipped for another's lock counts too)."""
        self._busy = threading.Lock()

    def maybe(self) -> bool:
        """Vacuum the jobs table if it is due; whether it was. A storage error is logged
        and not raised: the reap it follows is done, and the next pass tries again."""
        if not self._busy.acquire(blocking=False):  # another thread of this process is at it
            return False
        try:
            return self._maybe()
        except StorageError as exc:
            log.warning("vacuum of qc_jobs failed (%s); the next reaper pass tries again", exc)
            return False
        finally:
            self._busy.release()

    def _maybe(self) -> bool:
        store = self.store
        with store.stmt() as cur:
            row = cur.execute(store.q["jobs_dead_rows"]).fetchone()
        if row is None or row["dead"] is None:
            return False
        since = row["since_ms"]
        due = vacuum_due(
            int(row["dead"]),
            None if since is None else int(since),
            self.last_took_ms,
            dead_rows_at=self.dead_rows_at,
        )
        if not due:
            return False
        started = time.monotonic()
        with store.stmt() as cur:
            cur.execute(store.q["vacuum_jobs"])
        self.last_took_ms = max(1, round((time.monotonic() - started) * 1000))
        self.runs += 1
        log.debug("vacuumed qc_jobs (%s dead rows) in %d ms", row["dead"], self.last_took_ms)
        return True
