"""The PostgreSQL dialect of the SQL backend (``postgresql+psycopg://``).

Connections (psycopg 3, one per thread) run in autocommit mode, so each hot operation
(enqueue, claim, renew, heartbeat, finish) is a single statement and a single round
trip; operations of several statements open a transaction. Hot statements are prepared
by psycopg (after 5 uses) and planned once (``plan_cache_mode = force_generic_plan``:
they are parameterised lookups on fixed indexes, and re-planning the claim CTE costs
more than running it). ``LISTEN/NOTIFY`` on channel ``qc_jobs`` wakes idle workers.

Behind PgBouncer in transaction pooling mode (URL option ``?pgbouncer=true``) none of
that session state survives: each transaction may run on another server connection. So
psycopg prepares nothing (``prepare_threshold=None``), the session ``SET`` is left out,
and an idle worker polls (:data:`PGBOUNCER_POLL_S`) instead of listening.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from backends.sql import pg_hot, pgcopy, queries
from backends.sql.base import Order
from backends.sql.errors import translate_errors
from backends.sql.pg_template import PostgresTemplateEnqueue
from backends.sql.records import EndRow
from backends.sql.storage import SQLStorage
from backends.sql.watchdog import Watchdog
from queue_core.errors import ConfigError
from queue_core.model import ClaimedJob, JobState, LeaseRef, NewJob, RenewResult

__all__ = [
    "CONNECT_TIMEOUT_S", "ENQUEUE_ARRAYS", "FINISH_ROW", "FINISH_SIZES", "PGBOUNCER_POLL_S",
    "SOCKET_TIMEOUT_S", "PostgresStorage",
]

PGBOUNCER_POLL_S = 0.2
"""How often an idle worker looks for ready jobs behind PgBouncer (no ``LISTEN``)."""

SOCKET_TIMEOUT_S = 30.0
"""Default bound on one call (``?socket_timeout=<seconds>``; ``0`` = none): a call
still waiting after it has its connection cut (:mod:`backends.sql.watchdog`) and fails
with ``StorageUnavailable``."""

CONNECT_TIMEOUT_S = 10
"""libpq ``connect_timeout`` when the URL sets none."""

_FLAGS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _flag(raw: str | None, where: str) -> bool:
    flag = _FLAGS.get((raw or "false").lower())
    if flag is None:
        raise ConfigError(
            f"pgbouncer={raw!r} in {where!r}: use pgbouncer=true or pgbouncer=false",
            code="invalid_option", field="pgbouncer", value=raw,
        )
    return flag


def _seconds(raw: str | None, where: str) -> float:
    if raw is None:
        return SOCKET_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigError(
            f"socket_timeout={raw!r} in {where!r}: use a number of seconds >= 0 "
            "(0 = no bound)",
            code="invalid_option", field="socket_timeout", value=raw,
        )
    return value

ENQUEUE_ARRAYS = (
    "id", "task_name", "queue", "payload", "priority", "run_at", "delay_ms", "sts",
    "max_attempts", "lost_delay_ms", "timeout_ms", "heartbeat_ms", "ckey", "climit", "cskip",
    "options", "replay_of", "state", "reason",
)  # fmt: skip
"""The per-job arrays of ``insert_jobs``."""

FINISH_ROW = (
    ("now", "bigint"), ("id", "text"), ("attempt", "int"), ("token", "text"),
    ("state", "text"), ("reason", "text"), ("requeue", "boolean"), ("delay_ms", "bigint"),
    ("lost_delay_ms", "bigint"), ("result", "bytea"), ("has_error", "boolean"),
    ("error_class", "text"), ("error_type", "text"), ("message", "text"),
    ("traceback", "text"), ("outcome", "text"), ("a_reason", "text"), ("mode", "text"),
    ("dead_id", "text"),
)  # fmt: skip
"""The typed values of one end in ``finish``'s ``VALUES`` rows, in order."""

FINISH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
"""The ``VALUES`` row counts of ``finish`` statements: a batch is padded with ``NULL``
rows (which match no job) up to the next size, and cut into statements of the largest
(19 values a row; PostgreSQL allows 65,535 parameters). So a worker sends at most ten
statement texts, each built once and prepared on its first use (values as text:
:func:`~backends.sql.pg_hot.finish_params`): one text per batch size made the server
parse and plan most large finishes anew (a drain's batch sizes vary), and the client
build their text each time."""

_NULL_END = (None,) * len(FINISH_ROW)


def _job_params(j: NewJob) -> dict[str, Any]:
    """The parameters of ``insert_job`` (one queued job)."""
    return {
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
    }


def _job_arrays(
    jobs: Sequence[NewJob], states: Sequence[JobState], reasons: Sequence[str | None]
) -> dict[str, Any]:
    """The per-job arrays of ``insert_jobs``, in :data:`ENQUEUE_ARRAYS` order."""
    return {
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
        "state": [s.value for s in states],
        "reason": list(reasons),
    }


class PostgresStorage(PostgresTemplateEnqueue, SQLStorage):
    """:class:`~backends.sql.SQLStorage` on PostgreSQL."""

    dialect = "postgresql"
    _queries = queries.POSTGRESQL
    _single_statement_batches = True

    def _prepare(self) -> None:
        self._claim_sql: dict[int, str] = {}
        self._finish_sql: dict[int, str] = {}
        self._hot_local = threading.local()  # this thread's cached cursors (pg_hot)
        self._claim_checked = False
        self.pgbouncer = _flag(self._url.get("pgbouncer"), self._masked)
        """Whether the URL said ``?pgbouncer=true`` (transaction pooling in between)."""
        bound = _seconds(self._url.get("socket_timeout"), self._masked)
        self._watch = Watchdog(bound) if bound > 0 else None
        self._connect_kw: dict[str, Any] = {"prepare_threshold": None} if self.pgbouncer else {}
        # the few finish texts are prepared at once (FINISH_SIZES), unless nothing may be
        self._prepare_now: bool | None = None if self.pgbouncer else True
        if self._url.get("connect_timeout") is None:
            self._connect_kw["connect_timeout"] = CONNECT_TIMEOUT_S
        self._url = self._url.without("pgbouncer").without("socket_timeout")

    def _make_engine(self, pool_size: int, max_overflow: int, echo: bool) -> Any:
        from sqlalchemy import create_engine

        args = {"prepare_threshold": None} if self.pgbouncer else {}
        return create_engine(
            self._url.render(hide_password=False), pool_size=pool_size,
            max_overflow=max_overflow, echo=echo, connect_args=args,
        )

    def _conninfo(self) -> str:
        return self._url.with_driver("postgresql").render(hide_password=False)

    def _connect(self) -> Any:
        conn = psycopg.connect(
            self._conninfo(), autocommit=True, row_factory=dict_row, **self._connect_kw
        )
        if not self.pgbouncer:
            conn.execute("SET plan_cache_mode = force_generic_plan")
        return conn

    def _enter(self, conn: Any, write: bool) -> Any:
        cur = conn.cursor()
        if write:
            cur.execute("BEGIN")
        return cur

    def _leave(self, conn: Any, write: bool) -> None:
        if write:
            conn.execute("COMMIT")

    def _abort(self, conn: Any, write: bool) -> bool:
        if conn.closed or conn.broken:
            return False
        try:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
            return True
        except Exception:  # noqa: BLE001 - the connection is discarded instead
            return False

    def _abort_quietly(self, conn: Any) -> bool:
        return self._abort(conn, True)

    def _clock(self, now: int | None) -> int | None:
        return now

    def _server_now(self, cur: Any) -> int:
        return int(cur.execute(self._q["server_now"], {"now": None}).fetchone()["now_ms"])

    def _list(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def _try_lock_key(self, cur: Any, key: str, *, wait: bool) -> bool:
        if wait:
            cur.execute(self._q["lock_key"], {"k": key})
            return True
        return bool(cur.execute(self._q["try_lock_key"], {"k": key}).fetchone()["locked"])

    def _notify(self, cur: Any) -> None:
        cur.execute(self._q["notify"])

    # ------------------------------------------------------------------ batches

    def _insert(
        self, cur: Any, jobs: Sequence[NewJob], states: Sequence[JobState] | None,
        reasons: Sequence[str | None] | None, now: int | None,
    ) -> None:
        if states is None or reasons is None:
            if len(jobs) == 1:
                params = _job_params(jobs[0])
                params["now"] = now
                cur.execute(self._q["insert_job"], params)
                return
            if len(jobs) >= pgcopy.COPY_MIN:
                pgcopy.copy_jobs(cur, jobs, now, self._server_now, self._notify)
                return
            states, reasons = [JobState.QUEUED] * len(jobs), [None] * len(jobs)
        arrays = _job_arrays(jobs, states, reasons)
        arrays["now"] = now
        cur.execute(self._q["insert_jobs"], arrays)

    def _claim_unkeyed(
        self, worker_id: str, qs: list[str], limit: int, lease_ms: int, now: int | None
    ) -> tuple[list[Any], bool]:
        sql = self._claim_sql.get(len(qs))
        if sql is None:
            sql = self._q["claim"].replace(
                "{queues}", queries.queues_filter("postgresql", len(qs))
            )
            self._claim_sql[len(qs)] = sql
        params = {"now": now, "queues": qs, "q0": qs[0], "limit": limit, "worker": worker_id,
                  "lease_ms": lease_ms}
        with self._hot() as cur:
            rows = cur.execute(sql, params).fetchall()
            if rows and not self._claim_checked:
                pg_hot.check_claim_columns(cur)
                self._claim_checked = True
        started = [r for r in rows if not r[-1]]  # r[-1]: keyed
        return started, len(started) < len(rows)

    def _claim_pairs(self, rows: list[Any]) -> list[tuple[Order, ClaimedJob]]:
        return pg_hot.claimed_pairs(rows)

    def _hot(self) -> pg_hot.HotScope:
        return pg_hot.HotScope(self, self._hot_local, self._conn())

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.Storage.renew`: one statement for the batch,
        rows locked in job id order."""
        if not refs:
            return RenewResult()
        params = {"ids": [r.job_id for r in refs], "attempts": [r.attempt for r in refs],
                  "tokens": [r.lease_token for r in refs], "lease_ms": lease_ms, "now": now}
        with self._stmt() as cur:
            rows = cur.execute(self._q["renew"], params).fetchall()
        current = {(r["id"], r["attempt"], r["lease_token"]): r["cancel_requested"] for r in rows}
        return RenewResult.of(
            refs, [current.get((r.job_id, r.attempt, r.lease_token)) for r in refs]
        )

    def _finish_batch(
        self, cur: Any, ends: list[EndRow], now: int | None
    ) -> dict[str, str | None]:
        done: dict[str, str | None] = {}
        raw = pg_hot.raw_cursor(self._hot_local, cur.connection)
        top = FINISH_SIZES[-1]
        for k in range(0, len(ends), top):
            chunk = ends[k : k + top]
            size = next(n for n in FINISH_SIZES if n >= len(chunk))
            flat = pg_hot.finish_params(chunk, now)  # text: the types never change
            flat.extend(_NULL_END * (size - len(chunk)))
            sql = self._finish_statement(size)
            done.update(raw.execute(sql, flat, prepare=self._prepare_now).fetchall())
        return done

    def _finish_statement(self, n: int) -> str:
        """The ``finish`` statement of ``n`` rows (one of :data:`FINISH_SIZES`)."""
        sql = self._finish_sql.get(n)
        if sql is None:
            width = len(FINISH_ROW)
            rows = ", ".join(
                "(" + ", ".join(f"CAST(${i * width + k + 1} AS {t})"
                                for k, (_, t) in enumerate(FINISH_ROW)) + ")"
                for i in range(n)
            )
            sql = self._finish_sql[n] = self._q["finish"].replace("{rows}", rows)
        return sql

    # ------------------------------------------------------------------ wake-ups

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a job may be ready in ``queues``.

        Waits on ``LISTEN qc_jobs`` on a dedicated connection, kept open so that a
        notification sent between two waits is not lost. The first call only starts
        listening and returns ``True`` (jobs may have arrived before).

        With ``?pgbouncer=true`` (``LISTEN`` needs a session): looks every
        :data:`PGBOUNCER_POLL_S` seconds for a ready job in ``queues`` instead.
        """
        if self._closed:
            return False
        if self.pgbouncer:
            return self._poll_for_jobs(queues, timeout)
        with self._wait_lock, translate_errors(self._masked, secret=self._secret):
            if self._waiter is None:
                waiter = psycopg.connect(self._conninfo(), autocommit=True, **self._connect_kw)
                waiter.execute("LISTEN qc_jobs")
                self._waiter = waiter
                return True
            try:
                for _ in self._waiter.notifies(timeout=max(timeout, 0.0), stop_after=1):
                    return True
            except psycopg.OperationalError:
                self._waiter.close()
                self._waiter = None
                raise
            return False

    def _poll_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """``wait_for_jobs`` without ``LISTEN``: sleep a poll interval, then ask."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while not self._closed:
            left = deadline - time.monotonic()
            time.sleep(max(min(PGBOUNCER_POLL_S, left), 0.0))
            with self._stmt() as cur:
                row = cur.execute(self._q["any_ready"], {"queues": list(queues), "now": None})
                if row.fetchone()["ready"]:
                    return True
            if left <= PGBOUNCER_POLL_S:
                return False
        return False
