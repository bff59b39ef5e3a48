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
and an idle worker polls (:data:`backends.sql.wakeup.PGBOUNCER_POLL_S`) instead of
listening.

psycopg is imported here with its two version look-ups answered from the dist-info
directories (:func:`installed_version`): ``psycopg.version`` and ``psycopg_binary.version``
each set only ``__version__`` from ``importlib.metadata``, whose import and ``sys.path``
scan are about a tenth of the CPU of ``import psycopg`` (bench/startup.py).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from types import MappingProxyType, ModuleType
from typing import Any

from backends.sql.queries import DialectName, load, queues_filter
from backends.sql.records import JOB_COLUMNS, EndRow, Order, TemplateRows
from backends.sql.url import SQLURL, check_pg_query, session_options
from backends.sql.watchdog import Watchdog
from queue_core.records.jobs import ClaimedJob, JobState, LeaseRef, NewJob, RenewResult
from queue_core.storage.urls import mask_url

__all__ = [
    "CONNECT_TIMEOUT_S", "ENQUEUE_ARRAYS", "FINISH_ROW", "FINISH_SIZES", "PostgreSQL",
    "installed_version",
]  # fmt: skip

_PACKAGES = (("psycopg", "psycopg"), ("psycopg_binary", "psycopg_binary"))
"""(package, distribution name as a wheel's dist-info directory spells it)."""


def installed_version(package: str, dist: str) -> str | None:
    """The version in the name of the one ``<dist>-<version>.dist-info`` directory beside
    the top-level ``package`` (not imported), or ``None`` when there is not exactly one
    (an editable or unusual install: then psycopg looks its version up itself)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    parent = os.path.dirname(list(spec.submodule_search_locations)[0])
    try:
        names = os.listdir(parent)
    except OSError:
        return None
    prefix, suffix = f"{dist}-", ".dist-info"
    found = [
        n[len(prefix) : -len(suffix)] for n in names if n.startswith(prefix) and n.endswith(suffix)
    ]
    return found[0] if len(found) == 1 and found[0] and "-" not in found[0] else None


def _preset_versions() -> list[str]:
    """Register, not yet imported, the ``<package>.version`` modules psycopg would build
    with importlib.metadata; their names."""
    registered = []
    for package, dist in _PACKAGES:
        name = f"{package}.version"
        version = None if name in sys.modules else installed_version(package, dist)
        if version is not None:
            module = ModuleType(name, f"{dist} distribution version (from its dist-info)")
            module.__version__ = version  # type: ignore[attr-defined]
            sys.modules[name] = module
            registered.append(name)
    return registered


def _settle(registered: list[str]) -> None:
    """After ``import psycopg``: set the attribute the import system sets on a package for
    each module :func:`_preset_versions` registered."""
    for name in registered:
        package, _, attr = name.rpartition(".")
        if package in sys.modules:
            setattr(sys.modules[package], attr, sys.modules[name])
        else:  # psycopg used another libpq wrapper: leave no trace of this one
            del sys.modules[name]


_PRESET = _preset_versions() if "psycopg" not in sys.modules else []

import psycopg  # noqa: E402 - after its versions are preset
from psycopg.rows import dict_row  # noqa: E402

from backends.sql import pg_hot, pgcopy  # noqa: E402 - they import psycopg

_settle(_PRESET)

CONNECT_TIMEOUT_S = 10
"""libpq ``connect_timeout`` when the URL sets none."""

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
    ("dead_id", "text"), ("refund", "boolean"), ("started_ago", "bigint"),
)  # fmt: skip
"""The typed values of one end in ``finish``'s ``VALUES`` rows, in order."""

FINISH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
"""The ``VALUES`` row counts of ``finish`` statements: a batch is padded with ``NULL``
rows (which match no job) up to the next size, and cut into statements of the largest
(21 values a row; PostgreSQL allows 65,535 parameters). So a worker sends at most ten
statement texts, each built once and prepared on its first use (values as text:
:func:`~backends.sql.pg_hot.finish_params`): one text per batch size made the server
parse and plan most large finishes anew (a drain's batch sizes vary), and the client
build their text each time."""

_NULL_END = (None,) * len(FINISH_ROW)
MANY_MIN = 16
"""From this many rows, :meth:`PostgreSQL.many` sends one statement over arrays."""
FLOW_INSERT_ARRAYS = (
    f"INSERT INTO qc_jobs ({', '.join(JOB_COLUMNS)}, execution_id, step_id, flow_deadline_at)\n"
    "SELECT * FROM unnest("
    + ", ".join(
        f"CAST(%(c{i})b AS {t}[])"
        for i, t in enumerate((*pgcopy.COPY_TYPES, "text", "text", "int8"))
    )
    + ")\nON CONFLICT (id) DO NOTHING"
)
"""``flow_insert_job_arrays``: ``flow_insert_job`` for a batch of released steps' jobs
(:meth:`PostgreSQL.many`), one array per column (:data:`~backends.sql.records.JOB_COLUMNS`
typed as the binary ``COPY`` sends them, then ``execution_id``, ``step_id``,
``flow_deadline_at``)."""


@functools.cache
def statements() -> Mapping[str, str]:
    """Every named statement the dialect runs: its files' (:func:`~backends.sql.queries.load`)
    and :data:`FLOW_INSERT_ARRAYS`; built once per process."""
    return MappingProxyType({**load("postgresql"), "flow_insert_job_arrays": FLOW_INSERT_ARRAYS})


_COPY_TEMPLATE = f"COPY qc_jobs ({', '.join(pgcopy.TEMPLATE_COLUMNS)}) FROM STDIN (FORMAT BINARY)"


def _job_params(j: NewJob) -> dict[str, Any]:
    """The parameters of ``insert_job`` (one queued job)."""
    return {
        "id": j.id, "task_name": j.task_name, "queue": j.queue, "payload": j.payload,
        "priority": j.priority, "run_at": j.run_at, "delay_ms": j.delay_ms,
        "sts": j.schedule_to_start_ms, "max_attempts": j.max_attempts,
        "lost_delay_ms": j.lost_delay_ms, "timeout_ms": j.timeout_ms,
        "heartbeat_ms": j.heartbeat_ms, "ckey": j.concurrency_key,
        "climit": j.concurrency_limit, "cskip": j.concurrency_skip, "options": j.options,
        "replay_of": j.replay_of,
    }  # fmt: skip


def _job_arrays(
    jobs: Sequence[NewJob], states: Sequence[JobState], reasons: Sequence[str | None]
) -> dict[str, Any]:
    """The per-job arrays of ``insert_jobs``, in :data:`ENQUEUE_ARRAYS` order."""
    rows = [_job_params(j) for j in jobs]
    arrays = {name: [r[name] for r in rows] for name in ENQUEUE_ARRAYS[:-2]}
    arrays["state"] = [s.value for s in states]
    arrays["reason"] = list(reasons)
    return arrays


@functools.cache
def _libpq_keywords() -> frozenset[str]:
    """The connection parameters this libpq takes (``sslmode``, ``connect_timeout``...)."""
    return frozenset(o.keyword.decode() for o in psycopg.pq.Conninfo.get_defaults())


class PostgreSQL:
    """The PostgreSQL :class:`~backends.sql.dialect.Dialect`."""

    name: DialectName = "postgresql"
    locking = True
    single_statement_batches = True
    claim_in_tx = False
    shared_connection = False
    meta_exists = "SELECT 1 AS v WHERE to_regclass('qc_meta') IS NOT NULL"

    def __init__(self, url: SQLURL) -> None:
        self.q = statements()
        masked = mask_url(url.render(hide_password=False))
        self.url, self.pgbouncer, bound = session_options(url, masked)
        check_pg_query(self.url, masked, _libpq_keywords())
        """``pgbouncer``: whether the URL said ``?pgbouncer=true`` (transaction pooling)."""
        self.watch = Watchdog(bound) if bound > 0 else None
        self.connect_kw: dict[str, Any] = {"prepare_threshold": None} if self.pgbouncer else {}
        if self.url.get("connect_timeout") is None:
            self.connect_kw["connect_timeout"] = CONNECT_TIMEOUT_S
        # the few finish texts are prepared at once (FINISH_SIZES), unless nothing may be
        self._prepare_now: bool | None = None if self.pgbouncer else True
        self.hot = threading.local()
        """This thread's cached cursors (:func:`~backends.sql.pg_hot.cursors`)."""
        self._claim_sql: dict[int, str] = {}
        self._finish_sql: dict[tuple[int, bool], str] = {}
        self._claim_checked = False

    @property
    def conninfo(self) -> str:
        """The libpq connection string (the URL without the backend's own options)."""
        return self.url.with_driver("postgresql").render(hide_password=False)

    # ------------------------------------------------------------------ connections

    def connect(self) -> Any:
        """An autocommit connection with dict rows (generic plans unless pooled)."""
        conn = psycopg.connect(
            self.conninfo, autocommit=True, row_factory=dict_row, **self.connect_kw
        )
        if not self.pgbouncer:
            conn.execute("SET plan_cache_mode = force_generic_plan")
        return conn

    def connect_waiter(self) -> Any:
        """An autocommit connection for ``LISTEN qc_jobs``."""
        return psycopg.connect(self.conninfo, autocommit=True, **self.connect_kw)

    def pipeline(self, conn: Any) -> Any:
        """psycopg's pipeline mode (not behind PgBouncer, whose pooling the pipelined
        transactions were not tried with)."""
        if self.pgbouncer:
            return None
        pipe = conn.pipeline()
        pipe.__enter__()
        return pipe

    def pipelined(self, cur: Any) -> bool:
        """Whether ``cur``'s connection is in pipeline mode now."""
        return bool(cur.connection.pgconn.pipeline_status)

    def enter(self, conn: Any, write: bool) -> Any:
        """A cursor; ``BEGIN`` when ``write``."""
        cur = conn.cursor()
        if write:
            cur.execute("BEGIN")
        return cur

    def leave(self, conn: Any, write: bool) -> None:
        """``COMMIT`` when ``write``."""
        if write:
            conn.execute("COMMIT")

    def abort(self, conn: Any, write: bool) -> bool:
        """Roll back an open transaction; whether ``conn`` is usable."""
        if conn.closed or conn.broken:
            return False
        try:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
            return True
        except Exception:  # noqa: BLE001 - the connection is discarded instead
            return False

    def abort_quietly(self, conn: Any) -> bool:
        """As :meth:`abort`."""
        return self.abort(conn, True)

    def hot_cursor(self, conn: Any) -> Any:
        """This thread's cached tuple-row cursor on ``conn`` (:mod:`~backends.sql.pg_hot`)."""
        return pg_hot.cursors(self.hot, conn).cur

    def read_cursor(self, conn: Any) -> None:
        """Reads run in a plain scope (no lock to skip)."""
        return None

    def make_engine(self, pool_size: int, max_overflow: int, echo: bool) -> Any:
        """A SQLAlchemy engine (preparing nothing behind PgBouncer)."""
        from sqlalchemy import create_engine

        args = {"prepare_threshold": None} if self.pgbouncer else {}
        return create_engine(
            self.url.render(hide_password=False), pool_size=pool_size,
            max_overflow=max_overflow, echo=echo, connect_args=args,
        )  # fmt: skip

    def create_fresh(self, cur: Any) -> bool:
        """Never: the schema engine creates a PostgreSQL schema."""
        return False

    # ------------------------------------------------------------------ values

    def clock(self, now: int | None) -> int | None:
        """``now`` as given: ``None`` makes the statement read the server's clock."""
        return now

    def server_now(self, cur: Any) -> int:
        """The server's clock."""
        return int(cur.execute(self.q["server_now"], {"now": None}).fetchone()["now_ms"])

    def array(self, values: Sequence[Any]) -> list[Any]:
        """An array."""
        return list(values)

    def lock_key(self, cur: Any, key: str, *, wait: bool, flows: bool = False) -> bool:
        """A transaction advisory lock (``try`` when not ``wait``)."""
        if wait:
            cur.execute(self.q["flow_lock_key" if flows else "lock_key"], {"k": key})
            return True
        return bool(cur.execute(self.q["try_lock_key"], {"k": key}).fetchone()["locked"])

    def notify(self, cur: Any) -> None:
        """``NOTIFY qc_jobs``, sent at commit."""
        cur.execute(self.q["notify"])

    # ------------------------------------------------------------------ batch statements

    def many(self, cur: Any, name: str, rows: Sequence[Any]) -> None:
        """``executemany``, or for :data:`MANY_MIN` rows or more, statement
        ``<name>_arrays`` when there is one: the rows as one array per parameter
        (``c0``, ``c1``... for positional rows), one statement instead of a statement per
        row (a 998-step fan-out's release: 2 instead of 1,996)."""
        arrays = self.q.get(f"{name}_arrays")
        if arrays is None or len(rows) < MANY_MIN:
            cur.executemany(self.q[name], rows)
        elif isinstance(rows[0], Mapping):
            cur.execute(arrays, {k: [r[k] for r in rows] for k in rows[0]})
        else:
            cur.execute(arrays, {f"c{i}": list(c) for i, c in enumerate(zip(*rows, strict=True))})

    def insert(
        self,
        cur: Any,
        jobs: Sequence[NewJob],
        states: Sequence[JobState] | None,
        reasons: Sequence[str | None] | None,
        now: int | None,
    ) -> None:
        """``insert_job`` for one queued job, ``COPY`` for :data:`~backends.sql.pgcopy.COPY_MIN`
        or more, else the ``insert_jobs`` arrays (each with the wake-up)."""
        if states is None or reasons is None:
            if len(jobs) == 1:
                params = _job_params(jobs[0])
                params["now"] = now
                cur.execute(self.q["insert_job"], params)
                return
            if len(jobs) >= pgcopy.COPY_MIN:
                pgcopy.copy_jobs(cur, jobs, now, self.server_now, self.notify)
                return
            states, reasons = [JobState.QUEUED] * len(jobs), [None] * len(jobs)
        arrays = _job_arrays(jobs, states, reasons)
        arrays["now"] = now
        cur.execute(self.q["insert_jobs"], arrays)

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
        """One statement on the hot cursor; rows by position (:data:`pg_hot.CLAIM_COLUMNS`)."""
        sql = self._claim_sql.get(len(queues))
        if sql is None:
            sql = self.q["claim"].replace("{queues}", queues_filter("postgresql", len(queues)))
            self._claim_sql[len(queues)] = sql
        params = {"now": now, "queues": queues, "q0": queues[0], "limit": limit,
                  "worker": worker_id, "lease_ms": lease_ms, "pv": pauses_version,
                  "ahead": ahead}  # fmt: skip
        rows = cur.execute(sql, params).fetchall()
        if rows and not self._claim_checked:
            pg_hot.check_claim_columns(cur)
            self._claim_checked = True
        started = [r for r in rows if not r[-1]]  # r[-1]: keyed
        return started, len(started) < len(rows)

    def start_claimed(
        self, cur: Any, refs: Sequence[LeaseRef], ago_ms: list[int], now: Any
    ) -> list[bool]:
        """One statement for the batch, rows locked in job id order."""
        params = {"ids": [r.job_id for r in refs], "attempts": [r.attempt for r in refs],
                  "tokens": [r.lease_token for r in refs], "ago": ago_ms, "now": now}  # fmt: skip
        rows = cur.execute(self.q["start_claimed"], params).fetchall()
        current = {(r["id"], r["attempt"], r["lease_token"]) for r in rows}
        return [(r.job_id, r.attempt, r.lease_token) in current for r in refs]

    def claimed(self, rows: list[Any]) -> list[tuple[Order, ClaimedJob]]:
        """Rows by position."""
        return pg_hot.claimed_pairs(rows)

    def renew(
        self, cur: Any, refs: Sequence[LeaseRef], lease_ms: int, now: int | None
    ) -> RenewResult:
        """One statement for the batch, rows locked in job id order."""
        params = {
            "ids": [r.job_id for r in refs], "attempts": [r.attempt for r in refs],
            "tokens": [r.lease_token for r in refs], "lease_ms": lease_ms, "now": now,
        }  # fmt: skip
        rows = cur.execute(self.q["renew"], params).fetchall()
        current = {(r["id"], r["attempt"], r["lease_token"]): r["cancel_requested"] for r in rows}
        return RenewResult.of(
            refs, [current.get((r.job_id, r.attempt, r.lease_token)) for r in refs]
        )

    def finish_batch(
        self, cur: Any, ends: list[EndRow], now: int | None, *, steps: bool = False
    ) -> dict[str, str | None]:
        """Statements of :data:`FINISH_SIZES` rows on the raw cursor, values as text."""
        done: dict[str, str | None] = {}
        raw = pg_hot.raw_cursor(self.hot, cur.connection)
        top = FINISH_SIZES[-1]
        for k in range(0, len(ends), top):
            chunk = ends[k : k + top]
            size = next(n for n in FINISH_SIZES if n >= len(chunk))
            flat = pg_hot.finish_params(chunk, now)  # text: the types never change
            flat.extend(_NULL_END * (size - len(chunk)))
            sql = self._finish_statement(size, steps)
            done.update(raw.execute(sql, flat, prepare=self._prepare_now).fetchall())
        return done

    def _finish_statement(self, n: int, steps: bool) -> str:
        """The ``finish`` statement of ``n`` rows (one of :data:`FINISH_SIZES`)."""
        sql = self._finish_sql.get((n, steps))
        if sql is None:
            width = len(FINISH_ROW)
            rows = ", ".join(
                "(" + ", ".join(f"CAST(${i * width + k + 1} AS {t})"
                                for k, (_, t) in enumerate(FINISH_ROW)) + ")"
                for i in range(n)
            )  # fmt: skip
            sql = self.q["finish"].replace("{rows}", rows)
            sql = self._finish_sql[n, steps] = sql.replace("{steps}", "NOT " if steps else "")
        return sql

    def template_rows(self, n: int) -> bool:
        """One job (``delay()``: ``insert_job``), or a batch ``COPY`` takes."""
        return n == 1 or n >= pgcopy.COPY_MIN

    def insert_template(
        self, cur: Any, rows: TemplateRows, jobs: Sequence[tuple[str, bytes, int]], now: Any
    ) -> None:
        """One job: ``insert_job`` with the template's parameters (kept per template) and
        its own three; a batch: ``COPY`` of ``job + at(t)`` rows."""
        if len(jobs) == 1:
            if "postgresql" not in rows.extra:
                rows.extra["postgresql"] = _job_params(rows.template)
            params = {**rows.extra["postgresql"], "now": now}
            params["id"], params["payload"], params["lost_delay_ms"] = jobs[0]
            cur.execute(self.q["insert_job"], params)
            return

        def rows_at(t: int) -> list[tuple[Any, ...]]:
            values = rows.at(t)
            return [job + values for job in jobs]

        pgcopy.copy_rows(
            cur, _COPY_TEMPLATE, pgcopy.TEMPLATE_TYPES, rows_at, now, self.server_now, self.notify
        )
