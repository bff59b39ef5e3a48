"""``sqlite:///`` and ``postgresql+psycopg://``: the SQL backend on SQLAlchemy Core.

One class serves both dialects. Each protocol operation is one transaction:

* SQLite: WAL journal, ``synchronous=NORMAL``, a busy timeout, and ``BEGIN IMMEDIATE``
  for every write transaction, so concurrent threads and processes queue for the write
  lock instead of failing with "database is locked".
* PostgreSQL: ``READ COMMITTED`` with row locks: ``FOR UPDATE SKIP LOCKED`` for claim
  and reap (any number of workers), ``FOR UPDATE`` in id order for renew and finish
  (fencing re-checked on the locked row), advisory transaction locks per concurrency
  key. ``LISTEN/NOTIFY`` on channel ``qc_jobs`` wakes idle workers.

Batches (enqueue, claim, renew, finish) cost a fixed number of statements. The hot
operations run pre-built SQL on a DBAPI connection held per thread (see
:mod:`backends.sql.hot`); on PostgreSQL each is a single autocommit statement.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, Row, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import NullPool, StaticPool
from typing_extensions import Self

from backends.sql import schema
from backends.sql.errors import _is_unavailable, translate_errors
from backends.sql.hot import HotSQL, ThreadConnections
from backends.sql.queries import MANY, Statements
from queue_core.errors import ConfigError, LeaseLost, NotFound, StorageError
from queue_core.model import (
    Action,
    AttemptEnd,
    AttemptRecord,
    ClaimedJob,
    DeadJob,
    ErrorInfo,
    JobRecord,
    JobState,
    LeaseRef,
    NewJob,
    Outcome,
    QueueStats,
    ReapedJob,
    Reason,
    RenewResult,
    dt_from_ms,
)
from queue_core.policy.outcomes import (
    DEFAULT_RETENTION_MS,
    end_state,
    parse_retention,
    reap_verdict,
    replay_job,
)
from queue_core.registry import mask_url
from queue_core.storage import Storage

__all__ = ["DEFAULT_RETENTION_MS", "SQLStorage"]

_CHUNK = 500
"""Ends per finish statement (18 values each; SQLite allows 32,766 parameters,
PostgreSQL 65,535)."""
_PG_DRIVERS = {"postgresql", "postgres", "postgresql+psycopg"}
_SQLITE_DRIVERS = {"sqlite", "sqlite+pysqlite"}


def _local_ms() -> int:
    return time.time_ns() // 1_000_000


def _split_url(url: str) -> tuple[URL, int | None]:
    """Parse ``url``; strip and parse ``?retention=``; map PostgreSQL to psycopg."""
    try:
        sa_url = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(
            f"invalid SQL storage URL {mask_url(url)!r}: {exc}",
            code="invalid_url",
            field="url",
            value=mask_url(url),
        ) from None
    retention: int | None = None
    raw = sa_url.query.get("retention")
    if raw is not None:
        retention = parse_retention(raw if isinstance(raw, str) else raw[-1])
        sa_url = sa_url.difference_update_query(["retention"])
    driver = sa_url.drivername.lower()
    if driver in _PG_DRIVERS:
        sa_url = sa_url.set(drivername="postgresql+psycopg")
    elif driver not in _SQLITE_DRIVERS:
        raise ConfigError(
            f"unsupported SQL URL scheme {driver!r} in {mask_url(url)!r}: use sqlite:///path.db "
            "or postgresql+psycopg://user:password@host/db",
            code="unknown_scheme",
            field="url",
            value=driver,
        )
    return sa_url, retention


def _attempt_from_row(r: Any) -> AttemptRecord:
    return AttemptRecord(
        number=r.number,
        outcome=Outcome(r.outcome) if r.outcome is not None else None,
        reason=r.reason,
        error_class=r.error_class,
        error_type=r.error_type,
        message=r.message,
        traceback=r.traceback,
        worker_id=r.worker_id,
        started_at=dt_from_ms(r.started_at),
        finished_at=dt_from_ms(r.finished_at),
        mode=r.mode,
    )


def _attempt_json(r: Any) -> dict[str, Any]:
    return {
        "number": r.number,
        "outcome": r.outcome,
        "reason": r.reason,
        "error_class": r.error_class,
        "error_type": r.error_type,
        "message": r.message,
        "traceback": r.traceback,
        "worker_id": r.worker_id,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "mode": r.mode,
    }


def _attempt_from_json(d: Mapping[str, Any]) -> AttemptRecord:
    return AttemptRecord(
        number=d["number"],
        outcome=Outcome(d["outcome"]) if d.get("outcome") is not None else None,
        reason=d.get("reason"),
        error_class=d.get("error_class"),
        error_type=d.get("error_type"),
        message=d.get("message"),
        traceback=d.get("traceback"),
        worker_id=d.get("worker_id"),
        started_at=dt_from_ms(d.get("started_at")),
        finished_at=dt_from_ms(d.get("finished_at")),
        mode=d.get("mode"),
    )


def _dead_from_row(r: Any) -> DeadJob:
    return DeadJob.build(
        id=r.id,
        job_id=r.job_id,
        task_name=r.task_name,
        queue=r.queue,
        payload=bytes(r.payload),
        error=r.error,
        error_class=r.error_class,
        reason=r.reason,
        attempts=[_attempt_from_json(a) for a in json.loads(r.attempts)],
        dead_at_ms=r.dead_at,
        replay_of=r.replay_of,
    )


def _job_from_row(r: Any) -> JobRecord:
    error = None
    if r.error_class is not None:
        error = ErrorInfo(
            error_class=r.error_class,
            error_type=r.error_type or r.error_class,
            message=r.error_message or "",
            traceback=r.error_traceback,
        )
    return JobRecord(
        id=r.id,
        task_name=r.task_name,
        queue=r.queue,
        state=JobState(r.state),
        reason=r.reason,
        payload=bytes(r.payload),
        result=bytes(r.result) if r.result is not None else None,
        error=error,
        attempts=r.attempt,
        max_attempts=r.max_attempts,
        priority=r.priority,
        enqueued_at=r.enqueued_at,
        run_at=r.run_at,
        started_at=r.started_at,
        finished_at=r.finished_at,
        options=r.options,
        replay_of=r.replay_of,
        dead_id=r.dead_id,
        cancel_requested=bool(r.cancel_requested),
    )


def _poll_interval(quiet: float) -> float:
    """Seconds between two ``PRAGMA data_version`` checks of an idle SQLite waiter,
    after ``quiet`` seconds without a commit: 1 ms while busy, 2 ms after 0.1 s, 4 ms
    after 1 s (about 1% of a core idle; pick-up latency stays a few ms)."""
    if quiet < 0.1:
        return 0.001
    if quiet < 1.0:
        return 0.002
    return 0.004


_SPEC_FIELDS = (
    "priority",
    "max_attempts",
    "lost_delay_ms",
    "timeout_ms",
    "heartbeat_ms",
    "schedule_to_start_ms",
    "concurrency_key",
    "concurrency_limit",
    "concurrency_skip",
    "options",
)
"""The enqueue options a dead-letter entry's ``spec`` JSON carries (the rest of the
:class:`NewJob` is in the entry's columns)."""


def _spec_of_dead(row: Any) -> NewJob:
    """The job as it was enqueued, from a dead-letter row (older entries may lack keys:
    the :class:`NewJob` defaults fill them)."""
    spec = json.loads(row.spec)
    return NewJob(
        id=row.job_id,
        task_name=row.task_name,
        queue=row.queue,
        payload=bytes(row.payload),
        replay_of=row.replay_of,
        **{k: spec[k] for k in _SPEC_FIELDS if k in spec},
    )


def _job_row(
    j: NewJob,
    t: int,
    state: JobState = JobState.QUEUED,
    reason: str | None = None,
) -> dict[str, Any]:
    """The ``qc_jobs`` row of a new job enqueued at ``t`` (``SKIPPED`` ends at once)."""
    ready = (j.run_at if j.run_at is not None else t) + j.delay_ms
    queued = state is JobState.QUEUED
    return {
        "id": j.id,
        "task_name": j.task_name,
        "queue": j.queue,
        "payload": j.payload,
        "priority": j.priority,
        "state": state.value,
        "reason": reason,
        "enqueued_at": t,
        "run_at": ready,
        "expires_at": _sts_deadline(ready, j.schedule_to_start_ms) if queued else None,
        "max_attempts": j.max_attempts,
        "lost_delay_ms": j.lost_delay_ms,
        "timeout_ms": j.timeout_ms,
        "heartbeat_ms": j.heartbeat_ms,
        "schedule_to_start_ms": j.schedule_to_start_ms,
        "concurrency_key": j.concurrency_key,
        "concurrency_limit": j.concurrency_limit,
        "concurrency_skip": j.concurrency_skip,
        "options": j.options,
        "replay_of": j.replay_of,
        "attempt": 0,
        "finished_at": None if queued else t,
        "cancel_requested": False,
    }


def _reap_delay(r: Any) -> int:
    """The delay before the retry when the current attempt is reaped: the one the core
    set with the last ``RETRY`` decision, else the job's as enqueued."""
    return int(r.retry_lost_delay_ms if r.retry_lost_delay_ms is not None else r.lost_delay_ms)


def _sts_deadline(run_at: int, sts_ms: int | None) -> int | None:
    return run_at + sts_ms if sts_ms is not None else None


class SQLStorage(Storage):
    """Storage on SQLite (embedded, the default) or PostgreSQL, through SQLAlchemy Core.

    Also implements :class:`~queue_core.storage.SupportsMigrate`,
    :class:`~queue_core.storage.SupportsJobScan` and
    :class:`~queue_core.storage.SupportsWakeup` (PostgreSQL ``LISTEN/NOTIFY``; on SQLite
    a 1-4 ms poll of ``PRAGMA data_version`` that sees commits from any process).

    The schema is created (or upgraded) on first use; :meth:`migrate` does it explicitly.

    Args:
        url: a SQLAlchemy URL: ``sqlite:///relative.db``, ``sqlite:////abs/path.db``,
            ``postgresql+psycopg://user:password@host:5432/db`` (``postgresql://`` means
            psycopg too). A ``retention=<duration>`` query parameter (``7d``, ``12h``,
            ``3600``) sets ``retention_ms`` and is removed before the URL reaches
            SQLAlchemy.
        retention_ms: how long finished jobs are kept before :meth:`prune` deletes them;
            overrides the URL's ``retention``; default 7 days.
        pool_size: connections kept open per process (PostgreSQL and file SQLite).
        max_overflow: extra connections allowed beyond ``pool_size`` under load.
        busy_timeout_ms: SQLite only: how long a writer waits for the write lock before
            the operation fails with :class:`~queue_core.errors.StorageUnavailable`.
        echo: log every statement (SQLAlchemy's ``echo``).

    Raises:
        ConfigError: a malformed URL, an unsupported scheme or a bad retention.
    """

    def __init__(
        self,
        url: str,
        *,
        retention_ms: int | None = None,
        pool_size: int = 5,
        max_overflow: int = 10,
        busy_timeout_ms: int = 30_000,
        echo: bool = False,
    ) -> None:
        sa_url, url_retention = _split_url(url)
        retention = retention_ms if retention_ms is not None else url_retention
        if retention is None:
            retention = DEFAULT_RETENTION_MS
        if isinstance(retention, bool) or not isinstance(retention, int) or retention < 0:
            raise ConfigError(
                f"retention_ms must be an int >= 0 (0 keeps no finished job), got {retention!r}",
                code="invalid_option",
                field="retention_ms",
                value=retention,
            )
        self.retention_ms = retention
        self._url = sa_url
        self._masked = sa_url.render_as_string(hide_password=True)
        self._secret = sa_url.password if isinstance(sa_url.password, str) else None
        self._postgres = sa_url.get_backend_name() == "postgresql"
        self._q = Statements(self._postgres)
        self._busy_timeout_ms = busy_timeout_ms
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._wait_lock = threading.Lock()
        # SQLite: this process's writers take turns here instead of in SQLite's busy
        # handler, which sleeps 1, 2, 5, 10 ms between tries (a worker's claim and
        # finish threads write concurrently); other processes still meet the busy timeout.
        self._write_lock = threading.RLock()
        self._waiter: Any = None
        self._closed = False
        self._memory = not self._postgres and sa_url.database in (None, "", ":memory:")
        with translate_errors(self._masked, secret=self._secret):
            self._engine = self._make_engine(pool_size, max_overflow, echo)
            # hot paths: one connection per thread, held until close() (not pooled)
            self._hot_engine = (
                self._engine if self._memory else self._make_engine(0, 0, echo, hot=True)
            )
        self._h = HotSQL(self._postgres)
        self._conns = ThreadConnections(self._open_hot)
        self._last_change = time.monotonic()  # SQLite wait: last commit seen
        self._many_sql: dict[str, tuple[str, tuple[str, ...] | None]] = {}
        for name in MANY:
            compiled = getattr(self._q, name).compile(dialect=self._engine.dialect)
            order = compiled.positiontup
            self._many_sql[name] = (str(compiled), tuple(order) if order else None)

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Build from a URL (see the class docstring for the accepted forms)."""
        return cls(url)

    def __repr__(self) -> str:
        return f"SQLStorage({self._masked!r})"

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return "postgresql" if self._postgres else "sqlite"

    # ------------------------------------------------------------------ plumbing

    def _make_engine(
        self, pool_size: int, max_overflow: int, echo: bool, hot: bool = False
    ) -> Engine:
        pooling: dict[str, Any] = (
            {"poolclass": NullPool}
            if hot
            else {"pool_size": pool_size, "max_overflow": max_overflow}
        )
        if self._postgres:
            return create_engine(self._url, echo=echo, **pooling)
        if self._memory:
            engine = create_engine(
                self._url,
                poolclass=StaticPool,
                connect_args={"check_same_thread": False},
                echo=echo,
            )
        else:
            engine = create_engine(
                self._url,
                **pooling,
                connect_args={
                    "check_same_thread": False,
                    "timeout": self._busy_timeout_ms / 1000.0,
                },
                echo=echo,
            )
        busy = self._busy_timeout_ms
        memory = self._memory

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # The driver must not open transactions itself: we issue BEGIN [IMMEDIATE].
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            if not memory:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute(f"PRAGMA busy_timeout={int(busy)}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("qc_write", True)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        with self._schema_lock:
            if self._schema_ready:
                return
            with translate_errors(self._masked, secret=self._secret):
                with self._engine.connect() as conn:
                    with conn.begin():
                        version = schema.read_version(conn)
                    schema.check_version(version, self._masked)
                    if version < schema.SCHEMA_VERSION:
                        with conn.begin():
                            schema.migrate(conn, where=self._masked)
            self._schema_ready = True

    @contextmanager
    def _tx(self, write: bool = True) -> Iterator[Connection]:
        if self._closed:
            from queue_core.errors import StorageError

            raise StorageError(f"{self!r} is closed")
        self._ensure_schema()
        with translate_errors(self._masked, secret=self._secret):
            with self._engine.connect() as conn:
                if not write and not self._postgres:
                    conn.execution_options(qc_write=False)
                with conn.begin():
                    yield conn

    def _now(self, now: int | None) -> int | None:
        """The ``now`` parameter: SQLite always gets the local clock; PostgreSQL may get
        ``None`` (the statement then reads the server clock)."""
        if now is not None or self._postgres:
            return now
        return _local_ms()

    def _resolve_now(self, conn: Connection, now: int | None, notify: bool = False) -> int:
        """A concrete ``now``: given, local (SQLite), or one server round trip."""
        if now is not None and not (notify and self._postgres):
            return now
        if not self._postgres:
            return _local_ms() if now is None else now
        stmt = self._q.server_now_notify if notify else self._q.server_now
        value = int(conn.execute(stmt).scalar_one())
        return now if now is not None else value

    def _many(self, conn: Connection, name: str, rows: list[dict[str, Any]]) -> None:
        """Run a :data:`MANY` statement over ``rows`` straight through the driver."""
        sql, order = self._many_sql[name]
        if order is None:
            conn.exec_driver_sql(sql, rows)
        else:
            conn.exec_driver_sql(sql, [tuple(r[k] for k in order) for r in rows])

    def _notify(self, conn: Connection) -> None:
        if self._postgres:
            conn.execute(self._q.notify)

    def _open_hot(self) -> Any:
        """A new hot-path connection. PostgreSQL: the hot statements are prepared by
        psycopg (after 5 uses) and planned once (generic plans: they are parameterised
        lookups on fixed indexes, and re-planning the claim CTE costs more than running
        it)."""
        fairy = self._hot_engine.raw_connection()
        if self._postgres:
            conn: Any = fairy.driver_connection
            conn.autocommit = True
            conn.execute("SET plan_cache_mode = force_generic_plan")
        return fairy

    @contextmanager
    def _hot(self) -> Iterator[Any]:
        """One transaction on this thread's own DBAPI connection (the hot paths).

        SQLite: ``BEGIN IMMEDIATE`` ... ``COMMIT``. PostgreSQL: autocommit, because
        every hot operation is a single statement (atomic on its own), so it costs one
        round trip; wake-ups (``pg_notify``) ride in the same statement or follow it.
        On an error the SQLite transaction is rolled back; a connection that failed (or
        whose rollback failed) is closed and forgotten, so the thread's next call
        reconnects.
        """
        if self._closed:
            raise StorageError(f"{self!r} is closed")
        self._ensure_schema()
        conns = self._conns
        with translate_errors(self._masked, secret=self._secret):
            fairy = conns.get()
            conn = fairy.driver_connection
            try:
                if self._postgres:
                    yield conn  # autocommit: every hot operation is one statement
                else:
                    with self._write_lock:
                        conn.execute("BEGIN IMMEDIATE")
                        yield conn
                        conn.execute("COMMIT")
            except BaseException as exc:
                if _is_unavailable(exc) or not self._rollback(conn):
                    conns.discard(fairy)
                raise

    def _one(self, sql: str, params: Any) -> Any:
        """Run one statement in autocommit mode on this thread's connection and return
        its first row. A single statement is a transaction of its own on both
        databases (SQLite takes the write lock for it as ``BEGIN IMMEDIATE`` would,
        waiting up to the busy timeout), so this skips ``BEGIN``/``COMMIT`` round trips
        and the context managers of :meth:`_hot`."""
        if self._closed or not self._schema_ready:
            with self._hot() as conn:
                return conn.execute(sql, params).fetchone()
        fairy = self._conns.get()
        try:
            if self._postgres:
                return fairy.driver_connection.execute(sql, params).fetchone()
            with self._write_lock:
                return fairy.driver_connection.execute(sql, params).fetchone()
        except BaseException as exc:
            if _is_unavailable(exc) or not self._rollback(fairy.driver_connection):
                self._conns.discard(fairy)
            with translate_errors(self._masked, secret=self._secret):
                raise

    def _rollback(self, conn: Any) -> bool:
        try:
            if self._postgres:
                return not conn.closed
            elif conn.in_transaction:
                conn.execute("ROLLBACK")
            return True
        except Exception:  # noqa: BLE001 - the connection is discarded instead
            return False

    def _t(self, now: int | None) -> int | None:
        """``now`` for the hot statements: SQLite gets the local clock when ``None``."""
        if now is None and not self._postgres:
            return _local_ms()
        return now

    # ------------------------------------------------------------------ hot paths

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.Storage.enqueue`. A batch is all-or-nothing."""
        if not jobs:
            return []
        if self._memory or any(
            j.concurrency_skip and j.concurrency_key is not None and j.concurrency_limit is not None
            for j in jobs
        ):
            return self._enqueue_slow(jobs, now)
        if self._postgres and len(jobs) == 1:
            j = jobs[0]
            self._one(
                self._h.insert_one_pg,
                {
                    "id": j.id,
                    "task_name": j.task_name,
                    "queue": j.queue,
                    "payload": j.payload,
                    "priority": j.priority,
                    "run_at": j.run_at,
                    "delay_ms": j.delay_ms,
                    "sts": j.schedule_to_start_ms,
                    "max_attempts": j.max_attempts,
                    "lost_delay_ms": j.lost_delay_ms,
                    "timeout_ms": j.timeout_ms,
                    "heartbeat_ms": j.heartbeat_ms,
                    "ckey": j.concurrency_key,
                    "climit": j.concurrency_limit,
                    "cskip": j.concurrency_skip,
                    "options": j.options,
                    "replay_of": j.replay_of,
                    "now": now,
                },
            )
            return [JobState.QUEUED]
        if self._postgres:
            arrays = {
                "id": [j.id for j in jobs],
                "task_name": [j.task_name for j in jobs],
                "queue": [j.queue for j in jobs],
                "payload": [j.payload for j in jobs],
                "priority": [j.priority for j in jobs],
                "run_at": [j.run_at for j in jobs],
                "delay_ms": [j.delay_ms for j in jobs],
                "sts": [j.schedule_to_start_ms for j in jobs],
                "max_attempts": [j.max_attempts for j in jobs],
                "lost_delay_ms": [j.lost_delay_ms for j in jobs],
                "timeout_ms": [j.timeout_ms for j in jobs],
                "heartbeat_ms": [j.heartbeat_ms for j in jobs],
                "ckey": [j.concurrency_key for j in jobs],
                "climit": [j.concurrency_limit for j in jobs],
                "cskip": [j.concurrency_skip for j in jobs],
                "options": [j.options for j in jobs],
                "replay_of": [j.replay_of for j in jobs],
                "now": now,
            }
            with self._hot() as conn:
                conn.execute(self._h.insert_job, arrays)
            return [JobState.QUEUED] * len(jobs)
        t = now if now is not None else _local_ms()
        rows = []
        for j in jobs:
            ready = (j.run_at if j.run_at is not None else t) + j.delay_ms
            sts = j.schedule_to_start_ms
            rows.append(
                (
                    j.id, j.task_name, j.queue, j.payload, j.priority, "queued", None, t,
                    ready, ready + sts if sts is not None else None, j.max_attempts,
                    j.lost_delay_ms, j.timeout_ms, j.heartbeat_ms, sts, j.concurrency_key,
                    j.concurrency_limit, j.concurrency_skip, j.options, j.replay_of, 0, None,
                    False,
                )
            )
        if len(rows) == 1:
            self._one(self._h.insert_job, rows[0])  # one statement: atomic on its own
            return [JobState.QUEUED]
        with self._hot() as conn:
            conn.executemany(self._h.insert_job, rows)
        return [JobState.QUEUED] * len(jobs)

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        """See :meth:`queue_core.storage.Storage.claim`.

        One statement picks the top ``limit`` ready jobs and starts those without a
        ``queue`` concurrency limit (PostgreSQL: one CTE that also writes the attempt
        rows; SQLite: one ``UPDATE ... RETURNING`` plus the attempt rows). Limited jobs
        met among them (rare) are claimed afterwards by the general path, which counts
        running jobs per key under a lock.
        """
        if limit <= 0 or not queues:
            return []
        qs = list(dict.fromkeys(queues))
        if self._memory:
            return [c for _, c in sorted(self._claim_slow(worker_id, qs, limit, lease_ms, now),
                                         key=lambda p: p[0])]
        h = self._h
        if self._postgres:
            with self._hot() as conn:
                rows = conn.execute(
                    h.claim_pg(len(qs)),
                    {"now": now, "queues": qs, "q0": qs[0], "limit": limit,
                     "worker": worker_id, "lease_ms": lease_ms},
                ).fetchall()
            started = [r for r in rows if not r[19]]
            keyed = len(started) < len(rows)
        else:
            t = now if now is not None else _local_ms()
            params: dict[str, Any] = {"worker": worker_id, "t": t, "lease_ms": lease_ms,
                                      "limit": limit}
            for i, q in enumerate(qs):
                params[f"q{i}"] = q
            with self._hot() as conn:
                started = conn.execute(h.claim_sqlite(len(qs)), params).fetchall()
                if started:
                    conn.executemany(
                        h.attempt_insert,
                        [{"job_id": r[1], "number": r[6], "worker": worker_id, "t": t}
                         for r in started],
                    )
                keyed = (
                    len(started) < limit
                    and conn.execute(h.keyed_ready_sqlite, {"t": t}).fetchone() is not None
                )
        pairs = [
            (
                (-r[5], r[17], r[0]),
                ClaimedJob(
                    id=r[1], task_name=r[2], queue=r[3], payload=bytes(r[4]), attempt=r[6],
                    lease_token=r[13], lease_expires_at=r[14], deadline=r[15],
                    max_attempts=r[7], priority=r[5], timeout_ms=r[8], heartbeat_ms=r[9],
                    options=r[10], enqueued_at=r[11], replay_of=r[12], started_at=r[16],
                ),
            )
            for r in started
        ]
        if keyed and len(pairs) < limit:
            pairs.extend(self._claim_slow(worker_id, qs, limit - len(pairs), lease_ms, now))
        if len(pairs) > 1:
            pairs.sort(key=lambda p: p[0])
        return [c for _, c in pairs]

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.Storage.renew`. PostgreSQL: one statement for
        the batch; SQLite: one fenced ``UPDATE`` per ref. Rows are taken in job id order."""
        if not refs:
            return RenewResult()
        if self._memory:
            return self._renew_slow(refs, lease_ms, now)
        result = RenewResult()
        if self._postgres:
            with self._hot() as conn:
                rows = conn.execute(
                    self._h.renew_pg,
                    {"ids": [r.job_id for r in refs], "attempts": [r.attempt for r in refs],
                     "tokens": [r.lease_token for r in refs], "lease_ms": lease_ms,
                     "now": now},
                ).fetchall()
            current = {(r[0], r[1], r[2]): r[3] for r in rows}
            for ref in refs:
                flag = current.get((ref.job_id, ref.attempt, ref.lease_token))
                if flag is None:
                    result.lost.append(ref)
                elif flag:
                    result.cancel_requested.append(ref)
            return result
        t = self._t(now)
        order = sorted(range(len(refs)), key=lambda i: refs[i].job_id)
        got = self._fenced(
            self._h.renew,
            [
                {"id": refs[i].job_id, "attempt": refs[i].attempt,
                 "token": refs[i].lease_token, "lease_ms": lease_ms, "now": t}
                for i in order
            ],
        )
        status: list[Any] = [None] * len(refs)
        for i, row in zip(order, got, strict=True):
            status[i] = row
        for ref, row in zip(refs, status, strict=True):
            if row is None:
                result.lost.append(ref)
            elif row[0]:
                result.cancel_requested.append(ref)
        return result

    def _fenced(self, sql: str, params: list[dict[str, Any]]) -> list[Any]:
        """Run a one-row ``UPDATE ... RETURNING`` per parameter set in one transaction;
        the returned row (or ``None``) per set."""
        with self._hot() as conn:
            return [conn.execute(sql, p).fetchone() for p in params]

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.Storage.heartbeat`."""
        if self._memory:
            return self._heartbeat_slow(ref, now)
        row = self._one(
            self._h.heartbeat,
            {
                "id": ref.job_id,
                "attempt": ref.attempt,
                "token": ref.lease_token,
                "now": self._t(now),
            },
        )
        if row is None:
            raise LeaseLost(f"attempt {ref.attempt} of job {ref.job_id} is not current")
        return bool(row[0])

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.Storage.finish`.

        The batch's fenced updates of jobs and attempt records run as one statement
        (PostgreSQL: a CTE over ``unnest`` arrays) or two (SQLite: ``UPDATE ... FROM
        (VALUES ...)`` for the attempt records, then for the jobs). A batch holding a
        ``DEAD`` decision, or one job twice, takes the general path, which writes the
        dead-letter entries.
        """
        if not ends:
            return []
        if (
            self._memory
            or any(e.decision.action is Action.DEAD for e in ends)
            or len({e.ref.job_id for e in ends}) < len(ends)
        ):
            return self._finish_slow(ends, now)
        t = self._t(now)
        rows: list[tuple[Any, ...]] = []
        wake = False
        for e in sorted(ends, key=lambda e: e.ref.job_id):  # lock order, as renew
            d = e.decision
            err = e.error
            action = d.action
            requeue = action is Action.RETRY
            wake = wake or requeue
            job_state, reason = end_state(d, e.reason)
            state = job_state.value
            ref = e.ref
            if err is None:
                rows.append(
                    (
                        t, ref.job_id, ref.attempt, ref.lease_token, state, reason, requeue,
                        d.delay_ms if requeue else None, d.lost_delay_ms if requeue else None,
                        e.result if action is Action.COMPLETE else None, False, None, None,
                        None, None, e.outcome.value, e.reason, e.mode,
                    )
                )  # fmt: skip
            else:
                rows.append(
                    (
                        t, ref.job_id, ref.attempt, ref.lease_token, state, reason, requeue,
                        d.delay_ms if requeue else None, d.lost_delay_ms if requeue else None,
                        e.result if action is Action.COMPLETE else None, True,
                        err.error_class, err.error_type, err.message, err.traceback,
                        e.outcome.value, e.reason, e.mode,
                    )
                )  # fmt: skip
        h = self._h
        if self._postgres:
            from psycopg import RawCursor
        with self._hot() as conn:
            done: dict[str, Any] = {}
            for k in range(0, len(rows), _CHUNK):
                chunk = rows[k : k + _CHUNK]
                flat = [v for r in chunk for v in r]
                if self._postgres:
                    cur = RawCursor(conn)
                    cur.execute(h.finish_pg(len(chunk)), flat)
                    done.update(cur.fetchall())
                else:
                    attempts_sql, jobs_sql = h.finish_sqlite(len(chunk))
                    conn.execute(attempts_sql, flat)
                    done.update(conn.execute(jobs_sql, flat).fetchall())
            if self._postgres and (wake or any(k is not None for k in done.values())):
                conn.execute(h.notify)
        if len(done) == len(ends):
            return [True] * len(ends)
        return [e.ref.job_id in done for e in ends]

    # ------------------------------------------------------------------ schema

    def migrate(self) -> None:
        """Create or upgrade the schema. Idempotent; safe to run concurrently.

        Raises:
            SchemaMismatch: the stored schema is newer than this code.
            StorageUnavailable: the database cannot be reached.
        """
        with translate_errors(self._masked, secret=self._secret):
            with self._engine.connect() as conn:
                with conn.begin():
                    schema.migrate(conn, where=self._masked)
        self._schema_ready = True

    def schema_version(self) -> int:
        """The schema version stored in the database (0 when there is none yet)."""
        with translate_errors(self._masked, secret=self._secret):
            with self._engine.connect() as conn:
                with conn.begin():
                    return schema.read_version(conn)

    # ------------------------------------------------------------------ enqueue

    def _enqueue_slow(self, jobs: Sequence[NewJob], now: int | None) -> list[JobState]:
        """Enqueue through SQLAlchemy: batches holding concurrency ``skip`` jobs."""
        with self._tx() as conn:
            t = self._resolve_now(conn, now, notify=True)
            skip_keys = sorted(
                {
                    j.concurrency_key
                    for j in jobs
                    if j.concurrency_skip
                    and j.concurrency_key is not None
                    and j.concurrency_limit is not None
                }
            )
            active: dict[str, int] = {}
            if skip_keys:
                if self._postgres:
                    for skip_key in skip_keys:  # sorted: no lock-order deadlocks
                        conn.execute(self._q.lock_key, {"k": skip_key})
                active = {
                    k: int(n) for k, n in conn.execute(self._q.count_active, {"keys": skip_keys})
                }
            states: list[JobState] = []
            rows: list[dict[str, Any]] = []
            for j in jobs:
                state, reason = JobState.QUEUED, None
                key = j.concurrency_key
                if key is not None:
                    if (
                        j.concurrency_skip
                        and j.concurrency_limit is not None
                        and active.get(key, 0) >= j.concurrency_limit
                    ):
                        state, reason = JobState.SKIPPED, Reason.CONCURRENCY_LIMIT.value
                    else:
                        active[key] = active.get(key, 0) + 1
                states.append(state)
                rows.append(_job_row(j, t, state, reason))
            conn.execute(self._q.insert_jobs, rows)
            return states

    # ------------------------------------------------------------------ claim / lease

    def _claim_slow(
        self, worker_id: str, qs: list[str], limit: int, lease_ms: int, now: int | None
    ) -> list[tuple[tuple[int, int, int], ClaimedJob]]:
        """Claim through SQLAlchemy, honouring ``queue`` concurrency limits; returns
        ``(order key, job)`` pairs."""
        with self._tx() as conn:
            params: dict[str, Any] = {"queues": qs, "now": self._now(now), "limit": limit}
            chosen: list[Row[Any]] = []
            excluded: list[int] = []
            running: dict[str, int] = {}
            locked: set[str] = set()
            for _ in range(16):
                if excluded:
                    params["excluded"] = excluded
                    rows = conn.execute(self._q.select_ready_excluding, params).all()
                else:
                    rows = conn.execute(self._q.select_ready, params).all()
                if not rows:
                    break
                params["now"] = rows[0].now_ms
                new_keys = sorted(
                    {
                        r.concurrency_key
                        for r in rows
                        if r.concurrency_key is not None
                        and r.concurrency_limit is not None
                        and not r.concurrency_skip
                        and r.concurrency_key not in running
                    }
                )
                if new_keys:
                    self._count_running(conn, new_keys, running, locked)
                blocked = False
                for r in rows:
                    key = r.concurrency_key
                    keyed = r.concurrency_limit is not None and not r.concurrency_skip
                    if key is not None and keyed:
                        if key not in locked or running[key] >= r.concurrency_limit:
                            excluded.append(r.seq)
                            blocked = True
                            continue
                        running[key] += 1
                    chosen.append(r)
                    excluded.append(r.seq)  # our own row locks do not hide it next round
                if not blocked or len(chosen) >= limit:
                    break
                params["limit"] = limit - len(chosen)
            if not chosen:
                return []
            t = int(chosen[0].now_ms)
            starts: list[dict[str, Any]] = []
            records: list[dict[str, Any]] = []
            claimed: list[tuple[tuple[int, int, int], ClaimedJob]] = []
            for r in chosen:
                token = os.urandom(12).hex()
                number = r.attempt + 1
                deadline = t + r.timeout_ms if r.timeout_ms is not None else None
                hb = t + r.heartbeat_ms if r.heartbeat_ms is not None else None
                starts.append(
                    {
                        "b_seq": r.seq,
                        "b_attempt": number,
                        "b_worker": worker_id,
                        "b_token": token,
                        "b_lease": t + lease_ms,
                        "b_deadline": deadline,
                        "b_hb": hb,
                        "b_started": t,
                    }
                )
                records.append(
                    {"b_job_id": r.id, "b_number": number, "b_worker": worker_id, "b_started": t}
                )
                claimed.append((
                    (-r.priority, r.run_at, r.seq),
                    ClaimedJob(
                        id=r.id,
                        task_name=r.task_name,
                        queue=r.queue,
                        payload=bytes(r.payload),
                        attempt=number,
                        lease_token=token,
                        lease_expires_at=t + lease_ms,
                        deadline=deadline,
                        max_attempts=r.max_attempts,
                        priority=r.priority,
                        timeout_ms=r.timeout_ms,
                        heartbeat_ms=r.heartbeat_ms,
                        options=r.options,
                        enqueued_at=r.enqueued_at,
                        replay_of=r.replay_of,
                        started_at=t,
                    ),
                ))
            self._many(conn, "start_jobs", starts)
            self._many(conn, "start_attempts", records)
            return claimed

    def _count_running(
        self, conn: Connection, keys: list[str], running: dict[str, int], locked: set[str]
    ) -> None:
        """Lock each key (PostgreSQL: try-lock, a busy key is skipped this round) and
        count its running jobs."""
        for key in keys:
            running[key] = 0
            if self._postgres and not conn.execute(self._q.try_lock_key, {"k": key}).scalar():
                continue
            locked.add(key)
        if locked:
            for key, n in conn.execute(self._q.count_running, {"keys": sorted(locked)}):
                running[key] = int(n)

    def _renew_slow(
        self, refs: Sequence[LeaseRef], lease_ms: int, now: int | None
    ) -> RenewResult:
        result = RenewResult()
        with self._tx() as conn:
            ids = sorted({r.job_id for r in refs})
            rows = {
                r.id: r
                for r in conn.execute(
                    self._q.select_current, {"ids": ids, "now": self._now(now)}
                )
            }
            updates: list[dict[str, Any]] = []
            for ref in refs:
                row = rows.get(ref.job_id)
                if row is None or row.attempt != ref.attempt or row.lease_token != ref.lease_token:
                    result.lost.append(ref)
                    continue
                updates.append({"b_seq": row.seq, "b_lease": int(row.now_ms) + lease_ms})
                if row.cancel_requested:
                    result.cancel_requested.append(ref)
            if updates:
                self._many(conn, "renew_leases", updates)
        return result

    def _heartbeat_slow(self, ref: LeaseRef, now: int | None) -> bool:
        with self._tx() as conn:
            row = conn.execute(
                self._q.heartbeat,
                {
                    "b_id": ref.job_id,
                    "b_attempt": ref.attempt,
                    "b_token": ref.lease_token,
                    "now": self._now(now),
                },
            ).first()
        if row is None:
            raise LeaseLost(f"attempt {ref.attempt} of job {ref.job_id} is not current")
        return bool(row[0])

    # ------------------------------------------------------------------ attempt end

    def _end_params(
        self,
        r: Any,
        *,
        state: JobState,
        reason: str | None,
        t: int,
        run_at: int | None = None,
        retry_lost_delay_ms: int | None = None,
        result: bytes | None = None,
        error: ErrorInfo | None = None,
        dead_id: str | None = None,
    ) -> dict[str, Any]:
        queued = state is JobState.QUEUED
        new_run_at = run_at if run_at is not None else r.run_at
        return {
            "b_seq": r.seq,
            "b_state": state.value,
            "b_reason": reason,
            "b_run_at": new_run_at,
            "b_expires_at": (
                _sts_deadline(new_run_at, r.schedule_to_start_ms) if queued else None
            ),
            "b_retry_lost_delay_ms": (
                retry_lost_delay_ms if retry_lost_delay_ms is not None else r.retry_lost_delay_ms
            ),
            "b_result": result,
            "b_finished_at": None if queued else t,
            "b_error_class": error.error_class if error else r.error_class,
            "b_error_type": error.error_type if error else r.error_type,
            "b_error_message": error.message if error else r.error_message,
            "b_error_traceback": error.traceback if error else r.error_traceback,
            "b_dead_id": dead_id,
        }

    def _bury(
        self,
        conn: Connection,
        graves: list[tuple[Any, str, str, ErrorInfo | None]],
        t: int,
    ) -> None:
        """Write dead-letter entries for ``(row, dead_id, reason, error)``; call after the
        attempt records are final."""
        if not graves:
            return
        by_job: dict[str, list[dict[str, Any]]] = {}
        for a in conn.execute(self._q.select_attempts_of, {"ids": [g[0].id for g in graves]}):
            by_job.setdefault(a.job_id, []).append(_attempt_json(a))
        entries = []
        for r, dead_id, reason, error in graves:
            spec = {f: getattr(r, f) for f in _SPEC_FIELDS}  # as enqueued (replay_job)
            spec["concurrency_skip"] = bool(r.concurrency_skip)
            entries.append(
                {
                    "id": dead_id,
                    "job_id": r.id,
                    "task_name": r.task_name,
                    "queue": r.queue,
                    "payload": r.payload,
                    "error": error.message if error else None,
                    "error_class": error.error_class if error else None,
                    "reason": reason,
                    "attempts": json.dumps(by_job.get(r.id, [])),
                    "dead_at": t,
                    "replay_of": r.replay_of,
                    "spec": json.dumps(spec),
                }
            )
        conn.execute(self._q.insert_dead, entries)

    def _finish_slow(self, ends: Sequence[AttemptEnd], now: int | None) -> list[bool]:
        """Finish through SQLAlchemy: batches holding a ``DEAD`` decision (dead-letter
        entries need the whole row and every attempt record)."""
        with self._tx() as conn:
            ids = sorted({e.ref.job_id for e in ends})
            rows = {
                r.id: r
                for r in conn.execute(
                    self._q.select_running_for_end, {"ids": ids, "now": self._now(now)}
                )
            }
            took: list[bool] = []
            job_updates: list[dict[str, Any]] = []
            attempt_updates: list[dict[str, Any]] = []
            graves: list[tuple[Any, str, str, ErrorInfo | None]] = []
            wake = False
            for e in ends:
                ref = e.ref
                r = rows.pop(ref.job_id, None)
                if r is None or r.attempt != ref.attempt or r.lease_token != ref.lease_token:
                    took.append(False)
                    continue
                t = int(r.now_ms)
                err = e.error
                attempt_updates.append(
                    {
                        "b_job_id": r.id,
                        "b_number": r.attempt,
                        "b_finished_at": t,
                        "b_outcome": e.outcome.value,
                        "b_reason": e.reason,
                        "b_error_class": err.error_class if err else None,
                        "b_error_type": err.error_type if err else None,
                        "b_message": err.message if err else None,
                        "b_traceback": err.traceback if err else None,
                        "b_mode": e.mode,
                    }
                )
                d = e.decision
                if r.concurrency_key is not None:
                    wake = True
                state, reason = end_state(d, e.reason)
                dead_id = uuid.uuid4().hex if state is JobState.DEAD else None
                if state is JobState.QUEUED:
                    wake = True
                params = self._end_params(
                    r,
                    state=state,
                    reason=reason,
                    t=t,
                    run_at=t + d.delay_ms if state is JobState.QUEUED else None,
                    retry_lost_delay_ms=d.lost_delay_ms if state is JobState.QUEUED else None,
                    result=e.result if state is JobState.SUCCEEDED else None,
                    error=err,
                    dead_id=dead_id,
                )
                if dead_id is not None:
                    graves.append((r, dead_id, reason or Reason.FATAL.value, err))
                job_updates.append(params)
                took.append(True)
            if job_updates:
                self._many(conn, "end_attempts", attempt_updates)
                self._many(conn, "end_jobs", job_updates)
                self._bury(conn, graves, int(job_updates[0]["b_finished_at"] or 0) or t)
                if wake:
                    self._notify(conn)
            return took

    # ------------------------------------------------------------------ reaper

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """See :meth:`queue_core.storage.Storage.reap`."""
        if limit <= 0:
            return []
        with self._tx() as conn:
            params = {"now": self._now(now), "limit": limit}
            stale = conn.execute(self._q.select_stale, params).all()
            reaped: list[ReapedJob] = []
            job_updates: list[dict[str, Any]] = []
            attempt_updates: list[dict[str, Any]] = []
            graves: list[tuple[Any, str, str, ErrorInfo | None]] = []
            wake = False
            t = 0
            for r in stale:
                t = int(r.now_ms)
                verdict = reap_verdict(
                    t,
                    lease_expires_at=r.lease_expires_at,
                    deadline=r.deadline,
                    heartbeat_expires_at=r.heartbeat_expires_at,
                    cancel_requested=bool(r.cancel_requested),
                    attempt=r.attempt,
                    max_attempts=r.max_attempts,
                    lost_delay_ms=_reap_delay(r),
                )
                if verdict is None:  # the row matched by another bound's clock skew
                    continue
                why, outcome, state = verdict.reason, verdict.outcome, verdict.state
                attempt_updates.append(
                    {
                        "b_job_id": r.id,
                        "b_number": r.attempt,
                        "b_finished_at": t,
                        "b_outcome": outcome.value,
                        "b_reason": why.value,
                        "b_error_class": None,
                        "b_error_type": None,
                        "b_message": None,
                        "b_traceback": None,
                        "b_mode": None,
                    }
                )
                dead_id = uuid.uuid4().hex if state is JobState.DEAD else None
                wake = wake or state is JobState.QUEUED
                job_updates.append(
                    self._end_params(
                        r, state=state, reason=verdict.job_reason, t=t,
                        run_at=verdict.ready_at, dead_id=dead_id,
                    )
                )
                if dead_id is not None:
                    graves.append((r, dead_id, verdict.job_reason or "", None))
                if r.concurrency_key is not None:
                    wake = True
                reaped.append(
                    ReapedJob(
                        job_id=r.id,
                        attempt=r.attempt,
                        outcome=outcome,
                        reason=why.value,
                        state=state,
                    )
                )
            if len(reaped) < limit:
                params["limit"] = limit - len(reaped)
                for r in conn.execute(self._q.select_sts_expired, params):
                    t = int(r.now_ms)
                    dead_id = uuid.uuid4().hex
                    reason = Reason.SCHEDULE_TO_START.value
                    job_updates.append(
                        self._end_params(r, state=JobState.DEAD, reason=reason, t=t,
                                         dead_id=dead_id)
                    )
                    graves.append((r, dead_id, reason, None))
                    reaped.append(
                        ReapedJob(
                            job_id=r.id,
                            attempt=0,
                            outcome=None,
                            reason=reason,
                            state=JobState.DEAD,
                        )
                    )
            if attempt_updates:
                self._many(conn, "end_attempts", attempt_updates)
            if job_updates:
                self._many(conn, "end_jobs", job_updates)
                self._bury(conn, graves, t)
            if wake:
                self._notify(conn)
            return reaped

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """See :meth:`queue_core.storage.Storage.prune`. Attempt records go with their job."""
        if limit <= 0:
            return 0
        with self._tx() as conn:
            t = self._resolve_now(conn, now)
            rows = conn.execute(
                self._q.select_prunable, {"cutoff": t - self.retention_ms, "limit": limit}
            ).all()
            if not rows:
                return 0
            conn.execute(self._q.delete_attempts_of, {"ids": [r.id for r in rows]})
            conn.execute(self._q.delete_jobs, {"seqs": [r.seq for r in rows]})
            return len(rows)

    # ------------------------------------------------------------------ control and reads

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """See :meth:`queue_core.storage.Storage.cancel`."""
        with self._tx() as conn:
            row = conn.execute(self._q.select_job_for_cancel, {"b_id": job_id}).first()
            if row is None:
                raise NotFound(f"no job with id {job_id!r}")
            state = JobState(row.state)
            if state is JobState.QUEUED:
                t = self._resolve_now(conn, now)
                conn.execute(self._q.cancel_queued, {"b_seq": row.seq, "b_now": t})
                self._notify(conn)  # may free a skip-concurrency slot
                return JobState.CANCELLED
            if state is JobState.RUNNING:
                conn.execute(self._q.request_cancel, {"b_seq": row.seq})
            return state

    def get_job(self, job_id: str) -> JobRecord | None:
        """See :meth:`queue_core.storage.Storage.get_job`."""
        with self._tx(write=False) as conn:
            row = conn.execute(self._q.get_job, {"b_id": job_id}).first()
        return _job_from_row(row) if row is not None else None

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """See :meth:`queue_core.storage.Storage.list_attempts`."""
        with self._tx(write=False) as conn:
            rows = conn.execute(self._q.list_attempts, {"b_id": job_id}).all()
        return [_attempt_from_row(r) for r in rows]

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.Storage.count_pending`."""
        if not queues:
            return 0
        with self._tx(write=False) as conn:
            t = self._resolve_now(conn, now)
            value = conn.execute(
                self._q.count_pending, {"queues": list(queues), "by": t + horizon_ms}
            ).scalar_one()
        return int(value)

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """See :meth:`queue_core.storage.Storage.stats`."""
        with self._tx(write=False) as conn:
            rows = conn.execute(self._q.stats, {"now": self._now(now)}).all()
        counts: dict[str, dict[str, int]] = {}
        for queue, kind, n in rows:
            counts.setdefault(queue, {})[kind] = int(n)
        return [QueueStats(queue=q, **counts[q]) for q in sorted(counts)]

    # ------------------------------------------------------------------ dead letters

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """See :meth:`queue_core.storage.Storage.list_dead`."""
        with self._tx(write=False) as conn:
            if task_name is None:
                rows = conn.execute(self._q.list_dead, {"limit": limit, "offset": offset}).all()
            else:
                rows = conn.execute(
                    self._q.list_dead_of_task,
                    {"limit": limit, "offset": offset, "b_task": task_name},
                ).all()
        return [_dead_from_row(r) for r in rows]

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """See :meth:`queue_core.storage.Storage.get_dead`."""
        with self._tx(write=False) as conn:
            row = conn.execute(self._q.get_dead, {"b_id": dead_id}).first()
        return _dead_from_row(row) if row is not None else None

    def retry_dead(
        self, dead_id: str, queue: str | None = None, *, now: int | None = None
    ) -> str:
        """See :meth:`queue_core.storage.Storage.retry_dead`."""
        with self._tx() as conn:
            row = conn.execute(self._q.take_dead, {"b_id": dead_id}).first()
            if row is None:
                raise NotFound(f"no dead-letter entry with id {dead_id!r}")
            t = self._resolve_now(conn, now, notify=True)
            conn.execute(self._q.delete_dead, {"b_seq": row.seq})
            job = replay_job(
                _spec_of_dead(row), dead_id=dead_id, new_id=uuid.uuid4().hex, queue=queue, now=t
            )
            conn.execute(self._q.insert_jobs, [_job_row(job, t)])
            return job.id

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """See :meth:`queue_core.storage.Storage.purge_dead`."""
        from sqlalchemy import delete

        stmt = delete(schema.dead)
        if task_name is not None:
            stmt = stmt.where(schema.dead.c.task_name == task_name)
        if before is not None:
            stmt = stmt.where(schema.dead.c.dead_at <= before)
        with self._tx() as conn:
            return int(conn.execute(stmt).rowcount)

    # ------------------------------------------------------------------ optional abilities

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """A page of jobs, newest (latest enqueued) first, optionally filtered."""
        from sqlalchemy import select

        j = schema.jobs.c
        stmt = select(schema.jobs)
        if state is not None:
            stmt = stmt.where(j.state == JobState(state).value)
        if queue is not None:
            stmt = stmt.where(j.queue == queue)
        stmt = stmt.order_by(j.enqueued_at.desc(), j.seq.desc()).limit(limit).offset(offset)
        with self._tx(write=False) as conn:
            rows = conn.execute(stmt).all()
        return [_job_from_row(r) for r in rows]

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a job may be ready in ``queues``.

        PostgreSQL: waits on ``LISTEN qc_jobs`` (a dedicated connection, kept open, so a
        notification sent between two waits is not lost). SQLite: polls
        ``PRAGMA data_version`` on a dedicated connection, every millisecond after a
        recent commit and backing off to 2 ms, then 4 ms while the database stays
        quiet; a change means another connection committed, and a cheap indexed check
        decides whether a job is ready. Returns ``True`` at once when a job is ready now.
        """
        if self._closed:
            return False
        if self._postgres:
            return self._wait_postgres(timeout)
        return self._wait_sqlite(list(queues), timeout)

    def _wait_postgres(self, timeout: float) -> bool:
        import psycopg

        with self._wait_lock, translate_errors(self._masked, secret=self._secret):
            if self._waiter is None:
                conninfo = self._url.set(drivername="postgresql").render_as_string(
                    hide_password=False
                )
                waiter = psycopg.connect(conninfo, autocommit=True)
                waiter.execute("LISTEN qc_jobs")
                self._waiter = waiter
                return True  # jobs may have arrived before we listened
            try:
                for _ in self._waiter.notifies(timeout=max(timeout, 0.0), stop_after=1):
                    return True
            except psycopg.OperationalError:
                self._waiter.close()
                self._waiter = None
                raise
            return False

    def _wait_sqlite(self, queues: list[str], timeout: float) -> bool:
        if self._memory:
            time.sleep(min(timeout, 0.01))
            return True
        self._ensure_schema()
        marks = ",".join("?" * len(queues))
        probe = (
            f"SELECT 1 FROM qc_jobs WHERE state = 'queued' AND queue IN ({marks}) "
            "AND run_at <= ? AND (expires_at IS NULL OR expires_at > ?) LIMIT 1"
        )
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._wait_lock, translate_errors(self._masked, secret=self._secret):
            if self._waiter is None:
                path = self._url.database or ""
                waiter = sqlite3.connect(
                    path, check_same_thread=False, isolation_level=None, timeout=1.0
                )
                self._waiter = waiter
            conn: sqlite3.Connection = self._waiter

            def ready() -> bool:
                t = _local_ms()
                return conn.execute(probe, [*queues, t, t]).fetchone() is not None

            if queues and ready():
                self._last_change = time.monotonic()
                return True
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            while True:
                clock = time.monotonic()
                left = deadline - clock
                if left <= 0:
                    return False
                time.sleep(min(_poll_interval(clock - self._last_change), left))
                current = conn.execute("PRAGMA data_version").fetchone()[0]
                if current != version:
                    version = current
                    self._last_change = time.monotonic()
                    if not queues or ready():
                        return True

    def close(self) -> None:
        """Release connections (pool, per-thread connections, listener). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._conns.close_all()
        if self._hot_engine is not self._engine:
            self._hot_engine.dispose()
        with self._wait_lock:
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            try:
                waiter.close()
            except Exception:  # noqa: BLE001 - closing a broken connection is best effort
                pass
        self._engine.dispose()
