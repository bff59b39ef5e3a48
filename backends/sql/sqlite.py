"""The SQLite dialect of the SQL backend (``sqlite:///path.db``, ``sqlite://`` in memory).

Every connection runs in autocommit mode (``isolation_level=None``) with WAL,
``synchronous=NORMAL`` and a busy timeout; a write transaction is ``BEGIN IMMEDIATE`` ...
``COMMIT``. The writers of one process take turns on one lock instead of in SQLite's busy
handler (which sleeps 1, 2, 5, 10 ms between tries); other processes still meet the busy
timeout. An in-memory database lives on one connection shared by every thread, behind
the same lock.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from typing import Any

from backends.sql import queries
from backends.sql.base import _Scope, local_ms
from backends.sql.errors import translate_errors
from backends.sql.records import EndRow, Row, job_row
from backends.sql.sqlite_watch import DirWatch
from backends.sql.storage import SQLStorage
from backends.sql.template import SQLiteTemplateEnqueue
from queue_core.model import JobState, LeaseRef, NewJob, RenewResult

__all__ = ["FINISH_ROW", "SQLiteStorage"]

FINISH_ROW = ("now", *EndRow._fields)
"""The values of one end in ``finish_attempts`` / ``finish_jobs``, in ``VALUES`` order."""

_CHUNK = 500
"""Ends per finish statement (19 values each; SQLite allows 32,766 parameters)."""


def _poll_interval(quiet: float) -> float:
    """Seconds between two ``PRAGMA data_version`` checks of an idle waiter, after
    ``quiet`` seconds without a commit: 1 ms while busy, 2 ms after 0.1 s, 4 ms after
    1 s (about 1% of a core idle; pick-up latency stays a few ms)."""
    if quiet < 0.1:
        return 0.001
    if quiet < 1.0:
        return 0.002
    return 0.004


_RECHECK_S = 0.0002
"""How soon an idle waiter looks again when a write to the database's files woke it
but no new commit was visible yet (the ``-wal`` frames are written before the commit is
published in the WAL index)."""


class SQLiteStorage(SQLiteTemplateEnqueue, SQLStorage):
    """:class:`~backends.sql.SQLStorage` on SQLite."""

    dialect = "sqlite"
    _queries = queries.SQLITE

    def _prepare(self) -> None:
        self._write_lock = threading.RLock()
        self._memory = self._url.database in (None, "", ":memory:")
        self._conns.shared = self._memory
        self._shared: sqlite3.Connection | None = None
        self._last_change = time.monotonic()  # wait_for_jobs: last commit seen
        self._files: DirWatch | None = None  # wait_for_jobs: writes to the database's files
        self._claim_sql: dict[int, str] = {}
        self._finish_sql: dict[int, tuple[str, str]] = {}

    def _make_engine(self, pool_size: int, max_overflow: int, echo: bool) -> Any:
        from sqlalchemy import Connection, create_engine, event
        from sqlalchemy.pool import StaticPool

        if self._memory:
            engine = create_engine(
                "sqlite://", poolclass=StaticPool, creator=self._connect, echo=echo
            )
        else:
            engine = create_engine(
                self._url.render(hide_password=False), pool_size=pool_size,
                max_overflow=max_overflow, echo=echo,
                connect_args={"check_same_thread": False,
                              "timeout": self._busy_timeout_ms / 1000.0},
            )

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn: Any, _record: Any) -> None:
                self._configure(dbapi_conn)

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine

    def _create_fresh(self) -> bool:
        from backends.sql.sqlite_fresh import create_fresh

        with translate_errors(self._masked, secret=self._secret):
            conn = self._conns.get()
        with _Scope(self, conn, True) as cur:
            return create_fresh(cur)

    def _configure(self, conn: Any) -> None:
        # The driver must not open transactions itself: we issue BEGIN IMMEDIATE.
        conn.isolation_level = None
        if not self._memory:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")

    def _connect(self) -> Any:
        if not self._memory:
            conn = sqlite3.connect(
                self._url.database or "", check_same_thread=False, isolation_level=None,
                timeout=self._busy_timeout_ms / 1000.0,
            )
            self._configure(conn)
            return conn
        with self._write_lock:
            if self._shared is None:
                self._shared = sqlite3.connect(":memory:", check_same_thread=False)
                self._configure(self._shared)
            return self._shared

    def _enter(self, conn: Any, write: bool) -> Any:
        self._write_lock.acquire()
        try:
            if write:
                conn.execute("BEGIN IMMEDIATE")
            cur = conn.cursor()
        except BaseException:
            self._write_lock.release()
            raise
        cur.row_factory = sqlite3.Row
        return cur

    def _leave(self, conn: Any, write: bool) -> None:
        try:
            if write:
                conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise
        finally:
            self._write_lock.release()

    def _abort(self, conn: Any, write: bool) -> bool:
        try:
            return self._rollback(conn)
        finally:
            self._write_lock.release()

    def _abort_quietly(self, conn: Any) -> bool:
        return self._memory or not conn.in_transaction

    def _rollback(self, conn: Any) -> bool:
        """Roll back an open transaction; whether the connection stays usable (an
        in-memory database lives on its connection: it is never dropped)."""
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return True
        except Exception:  # noqa: BLE001 - the connection is discarded instead
            return self._memory

    def _clock(self, now: int | None) -> int:
        return now if now is not None else local_ms()

    def _server_now(self, cur: Any) -> int:
        return local_ms()

    def _list(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))

    # ------------------------------------------------------------------ batches

    def _insert(
        self, cur: Any, jobs: Sequence[NewJob], states: Sequence[JobState] | None,
        reasons: Sequence[str | None] | None, now: int | None,
    ) -> None:
        t = self._clock(now)
        if states is None or reasons is None:
            rows = [job_row(j, t) for j in jobs]
        else:
            rows = [job_row(j, t, s, r) for j, s, r in zip(jobs, states, reasons, strict=True)]
        if len(rows) == 1:
            cur.execute(self._q["insert_job"], rows[0])
        else:
            cur.executemany(self._q["insert_job"], rows)

    def _claim_unkeyed(
        self, worker_id: str, qs: list[str], limit: int, lease_ms: int, now: int | None
    ) -> tuple[list[Row], bool]:
        t = self._clock(now)
        sql = self._claim_sql.get(len(qs))
        if sql is None:
            sql = self._q["claim"].replace("{queues}", queries.queues_filter("sqlite", len(qs)))
            self._claim_sql[len(qs)] = sql
        params: dict[str, Any] = {"worker": worker_id, "now": t, "lease_ms": lease_ms,
                                  "limit": limit}
        for i, q in enumerate(qs):
            params[f"q{i}"] = q
        with self._tx() as cur:
            # No attempt records here: each is written once, when its attempt ends.
            started: list[Row] = cur.execute(sql, params).fetchall()
            keyed = (
                len(started) < limit
                and cur.execute(self._q["keyed_ready"], {"now": t}).fetchone() is not None
            )
        return started, keyed

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.Storage.renew`: one fenced ``UPDATE`` per ref
        (in-process, so no round trips), rows taken in job id order."""
        if not refs:
            return RenewResult()
        t = self._clock(now)
        rows: dict[int, Any] = {}
        with self._tx() as cur:
            for i in sorted(range(len(refs)), key=lambda i: refs[i].job_id):
                ref = refs[i]
                params = {"id": ref.job_id, "attempt": ref.attempt, "token": ref.lease_token,
                          "lease_ms": lease_ms, "now": t}
                rows[i] = cur.execute(self._q["renew"], params).fetchone()
        return RenewResult.of(
            refs,
            [None if rows[i] is None else bool(rows[i]["cancel_requested"])
             for i in range(len(refs))],
        )

    def _finish_batch(
        self, cur: Any, ends: list[EndRow], now: int | None
    ) -> dict[str, str | None]:
        done: dict[str, str | None] = {}
        for k in range(0, len(ends), _CHUNK):
            chunk = ends[k : k + _CHUNK]
            flat = [v for e in chunk for v in (now, *e)]
            attempts_sql, jobs_sql = self._finish_statements(len(chunk))
            cur.execute(attempts_sql, flat)
            for r in cur.execute(jobs_sql, flat).fetchall():
                done[r["id"]] = r["concurrency_key"]
        return done

    def _finish_statements(self, n: int) -> tuple[str, str]:
        pair = self._finish_sql.get(n)
        if pair is None:
            row = "(" + ", ".join("?" * len(FINISH_ROW)) + ")"
            rows = ", ".join([row] * n)
            pair = (
                self._q["finish_attempts"].replace("{rows}", rows),
                self._q["finish_jobs"].replace("{rows}", rows),
            )
            if n <= 64:
                self._finish_sql[n] = pair
        return pair

    # ------------------------------------------------------------------ wake-ups

    def close(self) -> None:
        """See :meth:`~backends.sql.base.SQLBase.close`; also stops the waiter's watch."""
        super().close()
        with self._wait_lock:
            watch, self._files = self._files, None
        if watch is not None:
            watch.close()

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a job may be ready in ``queues``.

        Polls ``PRAGMA data_version`` on a dedicated connection, every millisecond after
        a recent commit and backing off to 2 ms, then 4 ms while the database stays
        quiet; a change means another connection committed, and a cheap indexed check
        decides whether a job is ready. On Linux a write to the database's files ends a
        poll's pause at once (:mod:`backends.sql.sqlite_watch`). Returns ``True`` at once
        when a job is ready now.
        """
        if self._closed:
            return False
        if self._memory:
            time.sleep(min(timeout, 0.01))
            return True
        self._ensure_schema()
        qs = self._list(list(queues))
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._wait_lock, translate_errors(self._masked, secret=self._secret):
            if self._waiter is None:
                path = os.path.abspath(self._url.database or "")
                self._files = DirWatch.open(os.path.dirname(path))
                self._waiter = sqlite3.connect(
                    self._url.database or "", check_same_thread=False, isolation_level=None,
                    timeout=1.0,
                )
            conn: sqlite3.Connection = self._waiter
            pause = time.sleep if self._files is None else self._files.wait

            def ready() -> bool:
                probe = conn.execute(self._q["ready_probe"], {"queues": qs, "now": local_ms()})
                return probe.fetchone() is not None

            if queues and ready():
                self._last_change = time.monotonic()
                return True
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            written = False
            while True:
                clock = time.monotonic()
                left = deadline - clock
                if left <= 0:
                    return False
                if written:  # a write seen before its commit was visible: look again soon
                    time.sleep(min(_RECHECK_S, left))
                    written = False
                else:
                    written = bool(pause(min(_poll_interval(clock - self._last_change), left)))
                current = conn.execute("PRAGMA data_version").fetchone()[0]
                if current != version:
                    version = current
                    self._last_change = time.monotonic()
                    if not queues or ready():
                        return True
