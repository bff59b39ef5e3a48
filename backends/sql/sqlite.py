"""The SQLite dialect of the SQL backend (``sqlite:///path.db``, ``sqlite://`` in memory).

Every connection runs in autocommit mode (``isolation_level=None``) with WAL,
``synchronous=NORMAL`` and a busy timeout; a write transaction is ``BEGIN IMMEDIATE`` ...
``COMMIT``. The writers of one process take turns on one lock instead of in SQLite's busy
handler (which sleeps 1, 2, 5, 10 ms between tries); other processes still meet the busy
timeout. An in-memory database lives on one connection shared by every thread, behind
the same lock.

A new database gets its schema from ``sql/sqlite_schema.sql`` (:meth:`SQLite.create_fresh`),
not from SQLAlchemy: importing SQLAlchemy and building the schema's ``MetaData`` costs
about 0.3 s of CPU, half of a short-lived producer's run. The script is the
``sqlite_master`` text of a database the migrations brought to
:data:`~backends.sql.schema.SCHEMA_VERSION` (``python -m backends.sql.sqlite`` rewrites it;
a test fails until then, and a script of another version is never used).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from backends.sql.queries import DialectName, load, queues_filter
from backends.sql.records import (
    TEMPLATE_COLUMNS,
    EndRow,
    Order,
    Row,
    TemplateRows,
    claimed_from_row,
    job_row,
    order_of,
)
from backends.sql.schema import SCHEMA_VERSION
from backends.sql.url import SQLURL
from queue_core.records.jobs import ClaimedJob, JobState, LeaseRef, NewJob, RenewResult

__all__ = ["FINISH_ROW", "INSERT_TEMPLATE", "SCRIPT", "SQLite", "load_script", "local_ms"]

FINISH_ROW = ("now", *EndRow._fields)
"""The values of one end in ``finish_attempts`` / ``finish_jobs``, in ``VALUES`` order."""

_CHUNK = 500
"""Ends per finish statement (21 values each; SQLite allows 32,766 parameters)."""

INSERT_TEMPLATE = (
    f"INSERT INTO qc_jobs ({', '.join(TEMPLATE_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(TEMPLATE_COLUMNS))})"
)
"""A template's rows bound whole (when a value cannot be written as a literal)."""

SCRIPT = Path(__file__).with_name("sql") / "sqlite_schema.sql"
VERSION_TAG = "-- schema_version: "
_SEPARATOR = "\n;\n"
_ANY_QC_OBJECT = "SELECT 1 FROM sqlite_master WHERE tbl_name LIKE 'qc\\_%' ESCAPE '\\' LIMIT 1"


def local_ms() -> int:
    """This machine's clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000


@lru_cache(maxsize=1)
def load_script() -> tuple[int, tuple[str, ...]]:
    """(schema version :data:`SCRIPT` creates, its statements in order); (0, ()) when absent."""
    try:
        text = SCRIPT.read_text(encoding="utf-8")
    except OSError:
        return 0, ()
    version, body = 0, []
    for line in text.splitlines():
        if line.startswith(VERSION_TAG):
            version = int(line[len(VERSION_TAG) :])
        elif not line.startswith("--"):
            body.append(line)
    return version, tuple(s.strip() for s in "\n".join(body).split(_SEPARATOR) if s.strip())


def _literal(value: Any) -> str | None:
    """``value`` as an SQLite literal (what binding it stores), or ``None``."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"  # as sqlite3 binds a bool
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and "\x00" not in value:
        return "'" + value.replace("'", "''") + "'"
    return None


def literal_insert(rows: TemplateRows) -> str | None:
    """The ``INSERT`` of ``rows`` binding the per-job values and the clock-dependent ones,
    the others written as literals (``None`` when one cannot be). SQLite then knows the
    state, the concurrency key and the other constants when it prepares the statement,
    so it skips the partial indexes whose condition they make false instead of testing
    each per row: ``executemany`` of 1,000-row batches took about half the CPU per row of
    the all-bound statement (7 against 14 µs on this machine)."""
    maybe = [_literal(v) for v in rows.head + rows.tail]
    fixed = [f for f in maybe if f is not None]
    if len(fixed) != len(maybe):
        return None
    n = len(rows.head)
    values = ["?"] * 3 + fixed[:n] + ["?"] * len(rows.offsets) + fixed[n:]
    return f"INSERT INTO qc_jobs ({', '.join(TEMPLATE_COLUMNS)}) VALUES ({', '.join(values)})"


class SQLite:
    """The SQLite :class:`~backends.sql.dialect.Dialect`."""

    name: DialectName = "sqlite"
    pgbouncer = False
    locking = False
    single_statement_batches = False
    claim_in_tx = True
    watch = None
    meta_exists = "SELECT 1 AS v FROM sqlite_master WHERE type = 'table' AND name = 'qc_meta'"

    def __init__(self, url: SQLURL, busy_timeout_ms: int) -> None:
        self.q = load("sqlite")
        self.url = url
        self.busy_timeout_ms = busy_timeout_ms
        self.shared_connection = url.database in (None, "", ":memory:")
        self._write_lock = threading.RLock()
        self._shared: sqlite3.Connection | None = None
        self._claim_sql: dict[int, str] = {}
        self._finish_sql: dict[tuple[int, bool], tuple[str, str]] = {}

    # ------------------------------------------------------------------ connections

    def _configure(self, conn: Any) -> None:
        conn.isolation_level = None  # the driver opens no transaction: BEGIN IMMEDIATE does
        if not self.shared_connection:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_ms)}")

    def connect(self) -> Any:
        """This thread's new connection (in memory: the one shared connection)."""
        if not self.shared_connection:
            conn = sqlite3.connect(
                self.url.database or "", check_same_thread=False, isolation_level=None,
                timeout=self.busy_timeout_ms / 1000.0,
            )  # fmt: skip
            self._configure(conn)
            return conn
        with self._write_lock:
            if self._shared is None:
                self._shared = sqlite3.connect(":memory:", check_same_thread=False)
                self._configure(self._shared)
            return self._shared

    def connect_waiter(self) -> Any:
        """A connection of its own for ``wait_for_jobs`` (``PRAGMA data_version``)."""
        return sqlite3.connect(
            self.url.database or "", check_same_thread=False, isolation_level=None, timeout=1.0
        )

    def pipeline(self, conn: Any) -> None:
        """None: an embedded database has no round trips to spare."""
        return None

    def pipelined(self, cur: Any) -> bool:
        """Never (:meth:`pipeline`)."""
        return False

    def enter(self, conn: Any, write: bool) -> Any:
        """Take the process's write lock (and ``BEGIN IMMEDIATE`` when ``write``)."""
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

    def leave(self, conn: Any, write: bool) -> None:
        """Commit (when ``write``) and release the write lock."""
        try:
            if write:
                conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise
        finally:
            self._write_lock.release()

    def abort(self, conn: Any, write: bool) -> bool:
        """Roll back and release the write lock; whether ``conn`` is usable."""
        try:
            return self._rollback(conn)
        finally:
            self._write_lock.release()

    def abort_quietly(self, conn: Any) -> bool:
        """After a failed start or commit: usable unless a transaction is left open."""
        return self.shared_connection or not conn.in_transaction

    def _rollback(self, conn: Any) -> bool:
        """Roll back an open transaction; whether the connection stays usable (an
        in-memory database lives on its connection: it is never dropped)."""
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return True
        except Exception:  # noqa: BLE001 - the connection is discarded instead
            return self.shared_connection

    def hot_cursor(self, conn: Any) -> None:
        """No cached cursor: every scope takes the write lock."""
        return None

    def read_cursor(self, conn: Any) -> Any:
        """A file database's reads skip the process's write lock: in WAL mode a reader
        on this thread's own connection never waits for a writer (the one in-memory
        database shares a connection, so its reads take the lock)."""
        if self.shared_connection:
            return None
        cur = conn.cursor()
        cur.row_factory = sqlite3.Row
        return cur

    def make_engine(self, pool_size: int, max_overflow: int, echo: bool) -> Any:
        """A SQLAlchemy engine on the same file, ``BEGIN IMMEDIATE`` per transaction."""
        from sqlalchemy import Connection, create_engine, event
        from sqlalchemy.pool import StaticPool

        if self.shared_connection:
            engine = create_engine(
                "sqlite://", poolclass=StaticPool, creator=self.connect, echo=echo
            )
        else:
            engine = create_engine(
                self.url.render(hide_password=False), pool_size=pool_size,
                max_overflow=max_overflow, echo=echo,
                connect_args={"check_same_thread": False,
                              "timeout": self.busy_timeout_ms / 1000.0},
            )  # fmt: skip

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn: Any, _record: Any) -> None:
                self._configure(dbapi_conn)

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine

    def create_fresh(self, cur: Any) -> bool:
        """Replay :data:`SCRIPT` in the caller's ``BEGIN IMMEDIATE`` transaction on a
        database without any ``qc_`` object; ``False`` (nothing written) when the script
        is missing or of another version, or the database is not empty."""
        version, statements = load_script()
        if version != SCHEMA_VERSION or not statements:
            return False
        if cur.execute(_ANY_QC_OBJECT).fetchone() is not None:
            return False
        for statement in statements:
            cur.execute(statement)
        return True

    # ------------------------------------------------------------------ values

    def clock(self, now: int | None) -> int:
        """``now``, or this machine's clock (SQLite has no server clock)."""
        return now if now is not None else local_ms()

    def server_now(self, cur: Any) -> int:
        """This machine's clock."""
        return local_ms()

    def array(self, values: Sequence[Any]) -> str:
        """A JSON array (read with ``json_each``)."""
        return json.dumps(list(values))

    def lock_key(self, cur: Any, key: str, *, wait: bool, flows: bool = False) -> bool:
        """Nothing to take: the write transaction holds the database's write lock."""
        return True

    def notify(self, cur: Any) -> None:
        """Nothing to send: waiters see the commit (``PRAGMA data_version``)."""

    # ------------------------------------------------------------------ batch statements

    def many(self, cur: Any, name: str, rows: Sequence[Any]) -> None:
        """``executemany``: the rows run in-process, no round trip to save."""
        cur.executemany(self.q[name], rows)

    def insert(
        self,
        cur: Any,
        jobs: Sequence[NewJob],
        states: Sequence[JobState] | None,
        reasons: Sequence[str | None] | None,
        now: int | None,
    ) -> None:
        """``insert_job`` with :func:`~backends.sql.records.job_row` tuples."""
        t = self.clock(now)
        if states is None or reasons is None:
            rows = [job_row(j, t) for j in jobs]
        else:
            rows = [job_row(j, t, s, r) for j, s, r in zip(jobs, states, reasons, strict=True)]
        if len(rows) == 1:
            cur.execute(self.q["insert_job"], rows[0])
        else:
            cur.executemany(self.q["insert_job"], rows)

    def claim(
        self,
        cur: Any,
        worker_id: str,
        queues: list[str],
        limit: int,
        lease_ms: int,
        now: Any,
        pauses_version: str | None,
        ahead: bool = False,
    ) -> tuple[list[Any], bool]:
        """One ``UPDATE ... RETURNING`` (no attempt records: each is written once, when its
        attempt ends), then whether a keyed job is ready."""
        sql = self._claim_sql.get(len(queues))
        if sql is None:
            sql = self.q["claim"].replace("{queues}", queues_filter("sqlite", len(queues)))
            self._claim_sql[len(queues)] = sql
        params: dict[str, Any] = {"worker": worker_id, "now": now, "lease_ms": lease_ms,
                                  "limit": limit, "pv": pauses_version, "ahead": ahead}  # fmt: skip
        for i, queue in enumerate(queues):
            params[f"q{i}"] = queue
        started: list[Row] = cur.execute(sql, params).fetchall()
        keyed = (
            len(started) < limit
            and cur.execute(self.q["keyed_ready"], {"now": now}).fetchone() is not None
        )
        return started, keyed

    def start_claimed(
        self, cur: Any, refs: Sequence[LeaseRef], ago_ms: list[int], now: Any
    ) -> list[bool]:
        """One fenced ``UPDATE`` per chunk of refs."""
        current: set[tuple[str, int, str]] = set()
        for k in range(0, len(refs), _CHUNK):
            chunk = refs[k : k + _CHUNK]
            rows = ", ".join(["(?, ?, ?, ?)"] * len(chunk))
            flat = [v for r, ago in zip(chunk, ago_ms[k : k + _CHUNK], strict=True)
                    for v in (r.job_id, r.attempt, r.lease_token, now - ago)]  # fmt: skip
            sql = self.q["start_claimed"].replace("{rows}", rows)
            current.update(tuple(r) for r in cur.execute(sql, flat).fetchall())
        return [(r.job_id, r.attempt, r.lease_token) in current for r in refs]

    def claimed(self, rows: list[Any]) -> list[tuple[Order, ClaimedJob]]:
        """Rows by column name."""
        return [(order_of(r), claimed_from_row(r)) for r in rows]

    def renew(
        self, cur: Any, refs: Sequence[LeaseRef], lease_ms: int, now: int | None
    ) -> RenewResult:
        """One fenced ``UPDATE`` per ref (in-process: no round trips), in job id order."""
        flags: dict[int, bool | None] = {}
        for i in sorted(range(len(refs)), key=lambda i: refs[i].job_id):
            ref = refs[i]
            params = {"id": ref.job_id, "attempt": ref.attempt, "token": ref.lease_token,
                      "lease_ms": lease_ms, "now": now}  # fmt: skip
            row = cur.execute(self.q["renew"], params).fetchone()
            flags[i] = None if row is None else bool(row["cancel_requested"])
        return RenewResult.of(refs, [flags[i] for i in range(len(refs))])

    def finish_batch(
        self, cur: Any, ends: list[EndRow], now: int | None, *, steps: bool = False
    ) -> dict[str, str | None]:
        """The attempt records, then the jobs: two statements per chunk of ends."""
        done: dict[str, str | None] = {}
        for k in range(0, len(ends), _CHUNK):
            chunk = ends[k : k + _CHUNK]
            flat = [v for e in chunk for v in (now, *e)]
            attempts_sql, jobs_sql = self._finish_statements(len(chunk), steps)
            cur.execute(attempts_sql, flat)
            for r in cur.execute(jobs_sql, flat).fetchall():
                done[r["id"]] = r["concurrency_key"]
        return done

    def _finish_statements(self, n: int, steps: bool) -> tuple[str, str]:
        pair = self._finish_sql.get((n, steps))
        if pair is None:
            rows = ", ".join(["(" + ", ".join("?" * len(FINISH_ROW)) + ")"] * n)
            which = "NOT " if steps else ""
            pair = (
                self.q["finish_attempts"].replace("{rows}", rows).replace("{steps}", which),
                self.q["finish_jobs"].replace("{rows}", rows).replace("{steps}", which),
            )
            if n <= 64:
                self._finish_sql[n, steps] = pair
        return pair

    def template_rows(self, n: int) -> bool:
        """Every plain batch goes as template rows."""
        return True

    def insert_template(
        self, cur: Any, rows: TemplateRows, jobs: Sequence[tuple[str, bytes, int]], now: Any
    ) -> None:
        """``executemany`` of ``job + times(now)`` on the literal insert (or ``job + at(now)``
        on :data:`INSERT_TEMPLATE`); ``now`` is :meth:`clock`'s."""
        sql = rows.extra.get("sqlite", rows)
        if sql is rows:  # the first batch of this template
            sql = rows.extra["sqlite"] = literal_insert(rows)
        if sql is None:
            sql, values = INSERT_TEMPLATE, rows.at(now)
        else:
            values = rows.times(now)
        if len(jobs) == 1:
            cur.execute(sql, jobs[0] + values)
        else:
            cur.executemany(sql, [job + values for job in jobs])


if __name__ == "__main__":  # after a schema step: rewrite the script
    from backends.sql.schema import sqlite_script

    SCRIPT.write_text(sqlite_script(), encoding="utf-8")
    sys.stdout.write(f"wrote {SCRIPT}\n")
