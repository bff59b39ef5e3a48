"""Idle workers' wake-ups on the SQL backend (``SupportsWakeup``).

* SQLite (:class:`SQLiteWakeup`): polls ``PRAGMA data_version`` on a dedicated connection;
  it changes when any other connection (in any process) commits, and a cheap indexed
  probe then decides whether a job is ready. On Linux a write to the database's files
  ends a poll's pause at once (:mod:`backends.sql.sqlite_watch`).
* PostgreSQL (:class:`PostgresWakeup`): waits on ``LISTEN qc_jobs`` on a dedicated
  connection (enqueue, retry, reap and cancel send ``NOTIFY`` in their transaction);
  behind PgBouncer (no session for ``LISTEN``) it polls every ``PGBOUNCER_POLL_S``.

A delayed job stored earlier falls due with no commit and no ``NOTIFY``: both waits end
by the earliest ready time after now of the queues' queued jobs (``next_due``, an index
skip scan, :func:`due_in`), as the memory and Redis waits do, so an idle worker starts
it within its pick-up latency, not at the end of the caller's timeout.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from backends.sql.errors import translate_errors
from backends.sql.pauses import Pauses
from backends.sql.store import Store

__all__ = [
    "PGBOUNCER_POLL_S",
    "PostgresWakeup",
    "SQLiteWakeup",
    "due_in",
    "poll_interval",
    "wakeup_of",
]

PGBOUNCER_POLL_S = 0.2
"""How often an idle worker looks for ready jobs behind PgBouncer (no ``LISTEN``)."""

_INTERRUPT_CHECK_S = 0.1
"""How often a PostgreSQL waiter on ``LISTEN`` looks whether :meth:`interrupt_waits` was
called (the wait on the socket cannot be woken from another thread)."""

_RECHECK_S = 0.0002
"""How soon an idle SQLite waiter looks again when a write to the database's files woke
it but no new commit was visible yet (the ``-wal`` frames are written before the commit
is published in the WAL index)."""


def poll_interval(quiet: float) -> float:
    """Seconds between two ``PRAGMA data_version`` checks of an idle waiter, after
    ``quiet`` seconds without a commit: 1 ms while busy, 2 ms after 0.1 s, 4 ms after
    1 s (about 1% of a core idle; pick-up latency stays a few ms)."""
    if quiet < 0.1:
        return 0.001
    if quiet < 1.0:
        return 0.002
    return 0.004


def wakeup_of(store: Store, pauses: Pauses) -> SQLiteWakeup | PostgresWakeup:
    """The wake-up part of ``store``'s dialect (closed with the store)."""
    part: SQLiteWakeup | PostgresWakeup
    if store.dialect.name == "sqlite":
        part = SQLiteWakeup(store, pauses)
    else:
        part = PostgresWakeup(store, pauses)
    store.closing.append(part.close)
    return part


def due_in(due: Any, now_ms: Any) -> float | None:
    """Seconds from ``now_ms`` until ``due`` (``next_due``'s two columns), ``None`` when
    no queued job is delayed (or, on SQLite, the earliest ready time stored is not a
    number: a corrupt row, which the reaper dead-letters)."""
    if not isinstance(due, int) or isinstance(due, bool):
        return None
    return max(due - int(now_ms), 0) / 1000.0


def probe(
    pauses: Pauses, queues: Sequence[str], *, fresh: bool = False
) -> tuple[str, dict[str, Any]] | None:
    """The ready probe for ``queues`` and its parameters but ``now``, leaving out what is
    paused (read now when ``fresh``); ``None`` when every one of ``queues`` is paused."""
    store = pauses.store
    paused = pauses.current(fresh=fresh)
    if paused is None:
        return store.q["ready_probe"], {"queues": store.array(list(queues))}
    qs = [q for q in queues if q not in paused.queues]
    if not qs:
        return None
    params: dict[str, Any] = {"queues": store.array(qs)}
    if not paused.jobs:
        return store.q["ready_probe"], params
    params.update(paused.params(store))
    return store.q["ready_probe_unpaused"], params


class SQLiteWakeup:
    """``wait_for_jobs`` on SQLite (paused jobs are not ready: ``pauses``)."""

    def __init__(self, store: Store, pauses: Pauses) -> None:
        self.store = store
        self.pauses = pauses
        self._lock = threading.Lock()
        self._conn: Any = None
        self._files: Any = None  # a DirWatch, or None where inotify is not available
        self._last_change = time.monotonic()  # the last commit seen
        self._interrupts = 0  # calls of interrupt_waits: a wait ends when it changes

    def interrupt_waits(self) -> None:
        """End the waits in progress: each sees the count change at its next look."""
        self._interrupts += 1

    def close(self) -> None:
        """Close the waiter's connection and its watch."""
        with self._lock:
            conn, files, self._conn, self._files = self._conn, self._files, None, None
        if conn is not None:
            conn.close()
        if files is not None:
            files.close()

    def _open(self) -> Any:
        from backends.sql.sqlite_watch import DirWatch

        database = self.store.dialect.url.database or ""
        self._files = DirWatch.open(os.path.dirname(os.path.abspath(database)))
        self._conn = self.store.dialect.connect_waiter()
        return self._conn

    def _ready(self, conn: Any, queues: Sequence[str], due_by: list[float], *, fresh: bool) -> bool:
        """Whether a job is ready now in ``queues``; else ``due_by`` holds the monotonic
        time the next delayed job falls due (empty when none is delayed)."""
        store = self.store
        due_by.clear()
        asked = probe(self.pauses, queues, fresh=fresh)
        if asked is None:  # every queue is paused
            return False
        asked[1]["now"] = now = store.now(None)
        if conn.execute(asked[0], asked[1]).fetchone() is not None:
            return True
        params = {"queues": asked[1]["queues"], "now": now}
        wait = due_in(*conn.execute(store.q["next_due"], params).fetchone())
        if wait is not None:
            due_by.append(time.monotonic() + wait)
        return False

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a job may be ready in ``queues``.

        Polls ``PRAGMA data_version`` every millisecond after a recent commit, backing off
        to 2 ms, then 4 ms while the database stays quiet (:func:`poll_interval`); a
        change means another connection committed, and ``ready_probe`` decides. Returns
        ``True`` at once when a job is ready now.
        """
        store = self.store
        if store.closed:
            return False
        if store.dialect.shared_connection:  # in memory: this process's commits only
            time.sleep(min(timeout, 0.01))
            return True
        store.ensure_schema()
        deadline = time.monotonic() + max(timeout, 0.0)
        interrupts = self._interrupts
        with self._lock, translate_errors(store.masked, secret=store.secret):
            conn = self._conn if self._conn is not None else self._open()
            pause = time.sleep if self._files is None else self._files.wait

            due_by: list[float] = []  # the monotonic time the next delayed job falls due

            def ready(fresh: bool = False) -> bool:
                return self._ready(conn, queues, due_by, fresh=fresh)

            if queues and ready():
                self._last_change = time.monotonic()
                return True
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            written = False
            while True:
                clock = time.monotonic()
                if due_by and due_by[0] <= min(clock, deadline):
                    return True  # a delayed job fell due (a spurious wake-up is allowed)
                left = min([deadline, *due_by]) - clock
                if left <= 0:
                    return False
                if written:  # a write seen before its commit was visible: look again soon
                    time.sleep(min(_RECHECK_S, left))
                    written = False
                else:
                    written = bool(pause(min(poll_interval(clock - self._last_change), left)))
                if self._interrupts != interrupts:
                    return True
                current = conn.execute("PRAGMA data_version").fetchone()[0]
                if current != version:
                    version = current
                    self._last_change = time.monotonic()
                    if not queues or ready(fresh=True):  # the commit may be a pause
                        return True  # (else ready() read the next due time again)


class PostgresWakeup:
    """``wait_for_jobs`` on PostgreSQL (paused jobs are not ready: ``pauses``)."""

    def __init__(self, store: Store, pauses: Pauses) -> None:
        self.store = store
        self.pauses = pauses
        self.pgbouncer = store.dialect.pgbouncer
        self._lock = threading.Lock()
        self._conn: Any = None
        self._interrupts = 0  # calls of interrupt_waits: a wait ends when it changes

    def interrupt_waits(self) -> None:
        """End the waits in progress within :data:`_INTERRUPT_CHECK_S` (behind PgBouncer,
        :data:`PGBOUNCER_POLL_S`)."""
        self._interrupts += 1

    def close(self) -> None:
        """Close the listening connection."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection is best effort
                pass

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a job may be ready in ``queues``.

        Waits on ``LISTEN qc_jobs`` on a dedicated connection, kept open so that a
        notification sent between two waits is not lost. The first call only starts
        listening and returns ``True`` (jobs may have arrived before). With
        ``?pgbouncer=true``: looks every :data:`PGBOUNCER_POLL_S` seconds for a ready job
        in ``queues`` instead.
        """
        store = self.store
        if store.closed:
            return False
        interrupts = self._interrupts
        if self.pgbouncer:
            return self._poll(queues, timeout, interrupts)
        with self._lock, translate_errors(store.masked, secret=store.secret):
            if self._conn is None:
                conn = store.dialect.connect_waiter()
                conn.execute("LISTEN qc_jobs")
                self._conn = conn
                return True
            due = self._due_in(queues)  # after LISTEN: a NOTIFY sent since is not lost
            if due is not None and due <= 0:
                return True
            wait = max(timeout, 0.0) if due is None else min(max(timeout, 0.0), due)
            end = time.monotonic() + wait
            try:
                # The commit may be a pause or a resume: the claim that follows checks
                # the pauses' version in its statement and reads them again when they
                # changed (``Claiming.claim``), so no read of its own here (a round
                # trip on every idle pick-up). A notification that arrives between two
                # looks waits on the connection for the next one.
                while True:
                    left = max(end - time.monotonic(), 0.0)
                    for _ in self._conn.notifies(
                        timeout=min(left, _INTERRUPT_CHECK_S), stop_after=1
                    ):
                        return True
                    if self._interrupts != interrupts:
                        return True
                    if left <= _INTERRUPT_CHECK_S:
                        break
            except Exception:
                self._conn.close()
                self._conn = None
                raise
            return due is not None and wait < timeout  # a delayed job fell due

    def _due_in(self, queues: Sequence[str]) -> float | None:
        """Seconds until the next delayed job of ``queues`` falls due (``next_due``) by
        the server's clock: 0 when one is ready now, ``None`` when none is delayed."""
        asked = probe(self.pauses, queues)
        if asked is None:
            return None
        with self.store.stmt() as cur:
            if cur.execute(asked[0], {**asked[1], "now": None}).fetchone() is not None:
                return 0.0
            row = cur.execute(self.store.q["next_due"], {"queues": asked[1]["queues"], "now": None})
            r = row.fetchone()
        return due_in(r["due"], r["now_ms"])

    def _poll(self, queues: Sequence[str], timeout: float, interrupts: int) -> bool:
        """``wait_for_jobs`` without ``LISTEN``: sleep a poll interval, then ask."""
        store = self.store
        deadline = time.monotonic() + max(timeout, 0.0)
        while not store.closed:
            left = deadline - time.monotonic()
            time.sleep(max(min(PGBOUNCER_POLL_S, left), 0.0))
            if self._interrupts != interrupts:
                return True
            asked = probe(self.pauses, queues, fresh=True)
            if asked is not None:
                with store.stmt() as cur:
                    if cur.execute(asked[0], {**asked[1], "now": None}).fetchone() is not None:
                        return True
            if left <= PGBOUNCER_POLL_S:
                return False
        return False
