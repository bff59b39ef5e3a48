"""Tables, indexes and versioned migrations of the SQL backend.

The schema version lives in ``qc_meta`` (``key = 'schema_version'``). :func:`migrate`
applies the steps in :data:`MIGRATIONS` in order inside one transaction that holds the
migration lock (``BEGIN IMMEDIATE`` on SQLite, an advisory transaction lock on
PostgreSQL), so concurrent migrations are safe and each step runs once. A database whose
version is newer than :data:`SCHEMA_VERSION` raises
:class:`~queue_core.errors.SchemaMismatch` and is left untouched.

Index design (what each query relies on):

* ``ix_qc_jobs_ready``: partial on ``state = 'queued'``; the claim scan. Its size is the
  number of queued jobs only, so claim cost does not grow with finished jobs.
* ``ix_qc_jobs_sts``: queued jobs with a schedule-to-start deadline (``expires_at``).
* ``ix_qc_jobs_lease`` / ``_deadline`` / ``_heartbeat``: partial on ``state = 'running'``;
  the reaper's scans.
* ``ix_qc_jobs_ckey``: active jobs per concurrency key (slot counting).
* ``ix_qc_jobs_finished``: finished jobs by ``finished_at``; the retention prune and
  the throughput counts.
* ``ix_qc_jobs_enqueued``: jobs by ``enqueued_at``; the throughput counts.
* ``ix_qc_dead_at`` / ``ix_qc_dead_task``: dead-letter pages, newest first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    inspect,
    select,
    text,
)

from backends.sql.version import SCHEMA_VERSION, check_version

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "attempts",
    "dead",
    "jobs",
    "meta",
    "metadata",
    "migrate",
    "rates",
    "read_version",
    "unique_keys",
    "workers",
]

MIGRATION_LOCK = (815_001, 1)
"""PostgreSQL advisory lock (classid, objid) held while migrating."""

# SQLite only auto-assigns INTEGER PRIMARY KEY (the rowid alias), not BIGINT.
_SeqType = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData()

meta = Table(
    "qc_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

jobs = Table(
    "qc_jobs",
    metadata,
    Column("seq", _SeqType, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("task_name", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("reason", Text),
    Column("enqueued_at", BigInteger, nullable=False),
    Column("run_at", BigInteger, nullable=False),
    # schedule-to-start deadline while queued: run_at + schedule_to_start_ms
    Column("expires_at", BigInteger),
    Column("max_attempts", Integer, nullable=False),
    # as enqueued (the dead-letter spec); a RETRY decision's delay goes to the next column
    Column("lost_delay_ms", BigInteger, nullable=False),
    Column("timeout_ms", BigInteger),
    Column("heartbeat_ms", BigInteger),
    Column("schedule_to_start_ms", BigInteger),
    Column("concurrency_key", Text),
    Column("concurrency_limit", Integer),
    Column("concurrency_skip", Boolean(create_constraint=False), nullable=False),
    Column("options", Text),
    Column("replay_of", Text),
    Column("attempt", Integer, nullable=False),
    Column("worker_id", Text),
    Column("lease_token", String(32)),
    Column("lease_expires_at", BigInteger),
    Column("deadline", BigInteger),
    Column("heartbeat_expires_at", BigInteger),
    Column("started_at", BigInteger),
    Column("finished_at", BigInteger),
    Column("cancel_requested", Boolean(create_constraint=False), nullable=False),
    Column("result", LargeBinary),
    Column("error_class", Text),
    Column("error_type", Text),
    Column("error_message", Text),
    Column("error_traceback", Text),
    Column("dead_id", String(64)),
    # version 2: the reap delay set by the last RETRY decision; NULL = lost_delay_ms
    Column("retry_lost_delay_ms", BigInteger),
    # version 3 (flows): the execution and step of a step job; the execution's deadline
    Column("execution_id", String(64)),
    Column("step_id", Text),
    Column("flow_deadline_at", BigInteger),
    # version 5: the rate key of a rate-limited job (its rate is in qc_rates); NULL = none
    Column("rate_key", Text),
)

_QUEUED = text("state = 'queued'")
_RUNNING = text("state = 'running'")
_FINISHED = text("state NOT IN ('queued', 'running')")


def _partial(name: str, where: Any, *cols: Any) -> Index:
    return Index(name, *cols, sqlite_where=where, postgresql_where=where)


_partial(
    "ix_qc_jobs_ready",
    _QUEUED,
    jobs.c.queue,
    jobs.c.priority.desc(),
    jobs.c.run_at,
    jobs.c.seq,
)
_partial(
    "ix_qc_jobs_sts", text("state = 'queued' AND expires_at IS NOT NULL"), jobs.c.expires_at
)
_partial("ix_qc_jobs_lease", _RUNNING, jobs.c.lease_expires_at)
_partial(
    "ix_qc_jobs_deadline", text("state = 'running' AND deadline IS NOT NULL"), jobs.c.deadline
)
_partial(
    "ix_qc_jobs_heartbeat",
    text("state = 'running' AND heartbeat_expires_at IS NOT NULL"),
    jobs.c.heartbeat_expires_at,
)
_partial(
    "ix_qc_jobs_ckey",
    text("concurrency_key IS NOT NULL AND state IN ('queued', 'running')"),
    jobs.c.concurrency_key,
    jobs.c.state,
)
_partial("ix_qc_jobs_finished", _FINISHED, jobs.c.finished_at)
_RATED = _partial(
    "ix_qc_jobs_rated", text("rate_key IS NOT NULL AND state = 'queued'"), jobs.c.run_at
)
# Created by version 1, dropped by version 7 (written on every claim and finish, read by
# no query).
Index("ix_qc_jobs_state_seq", jobs.c.state, jobs.c.seq)
ix_jobs_execution = _partial(
    "ix_qc_jobs_execution",
    text("execution_id IS NOT NULL AND state IN ('queued', 'running')"),
    jobs.c.execution_id,
    jobs.c.id,
)
Index("ix_qc_jobs_queue_seq", jobs.c.queue, jobs.c.seq)
ix_jobs_enqueued = Index("ix_qc_jobs_enqueued", jobs.c.enqueued_at)
"""Version 9: throughput counts (``enqueued_at`` never changes, so updates stay HOT)."""

attempts = Table(
    "qc_attempts",
    metadata,
    Column("job_id", String(64), nullable=False),
    Column("number", Integer, nullable=False),
    Column("worker_id", Text),
    Column("started_at", BigInteger),
    Column("finished_at", BigInteger),
    Column("outcome", String(16)),
    Column("reason", Text),
    Column("error_class", Text),
    Column("error_type", Text),
    Column("message", Text),
    Column("traceback", Text),
    Column("mode", String(16)),
    PrimaryKeyConstraint("job_id", "number", name="pk_qc_attempts"),
)

dead = Table(
    "qc_dead",
    metadata,
    Column("seq", _SeqType, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("job_id", String(64), nullable=False),
    Column("task_name", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("error", Text),
    Column("error_class", Text),
    Column("reason", Text, nullable=False),
    Column("attempts", Text, nullable=False),  # JSON list of attempt records (epoch ms)
    Column("dead_at", BigInteger, nullable=False),
    Column("replay_of", Text),
    Column("spec", Text, nullable=False),  # JSON of the job's enqueue options (retry_dead)
)
Index("ix_qc_dead_at", dead.c.dead_at, dead.c.seq)
Index("ix_qc_dead_task", dead.c.task_name, dead.c.dead_at, dead.c.seq)

workers = Table(
    "qc_workers",  # schema v6: the worker registry (backends/sql/workers.py)
    metadata,
    Column("id", String(255), primary_key=True),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("queues", Text, nullable=False),  # JSON list of queue names
    Column("slots", Integer, nullable=False),
    Column("busy", Integer, nullable=False),
    Column("stuck", Integer, nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("last_seen", BigInteger, nullable=False),
    Column("ttl_ms", BigInteger, nullable=False),
)


schedule_ticks = Table(  # version 4: the last tick enqueued per periodic schedule
    "qc_schedule_ticks",
    metadata,
    Column("name", Text, primary_key=True),
    Column("last_tick", BigInteger, nullable=False),
)


# --------------------------------------------------------------------------- migrations


def _v1(conn: Connection) -> None:
    """Version 1: the initial schema.

    Later versions must add explicit steps (``ALTER TABLE`` ...) rather than edit the
    tables above in a way ``create_all`` of version 1 would not reproduce.
    """
    metadata.create_all(conn, checkfirst=True)


def _v2(conn: Connection) -> None:
    """Version 2: ``qc_jobs.retry_lost_delay_ms``, so that ``lost_delay_ms`` keeps the
    value the job was enqueued with (what a dead-letter entry replays). A database
    created at version 2 already has it (``create_all`` of the tables above)."""
    columns = {c["name"] for c in inspect(conn).get_columns(jobs.name)}
    if "retry_lost_delay_ms" not in columns:
        conn.execute(text("ALTER TABLE qc_jobs ADD COLUMN retry_lost_delay_ms BIGINT"))


def _v3(conn: Connection) -> None:
    """Version 3 (flows): ``qc_jobs.execution_id`` / ``step_id`` / ``flow_deadline_at``,
    the tables of :mod:`backends.sql.flow_schema` (executions, steps, specs by hash)."""
    columns = {c["name"] for c in inspect(conn).get_columns(jobs.name)}
    for name, kind in (("execution_id", "VARCHAR(64)"), ("step_id", "TEXT"),
                       ("flow_deadline_at", "BIGINT")):
        if name not in columns:
            conn.execute(text(f"ALTER TABLE qc_jobs ADD COLUMN {name} {kind}"))
    ix_jobs_execution.create(conn, checkfirst=True)
    from backends.sql import flow_schema

    metadata.create_all(conn, tables=list(flow_schema.TABLES), checkfirst=True)


def _v6(conn: Connection) -> None:
    """Version 6: ``qc_workers``, the worker registry (a database created at version 6
    already has it)."""
    workers.create(conn, checkfirst=True)


def _v4(conn: Connection) -> None:
    """Version 4: ``qc_schedule_ticks``, one row per periodic schedule (its last tick)."""
    schedule_ticks.create(conn, checkfirst=True)


def _v7(conn: Connection) -> None:
    """Version 7: drop ``ix_qc_jobs_state_seq`` and ``ix_qc_jobs_queue_seq``.

    No query reads them (``list_jobs`` sorts by ``enqueued_at``; the claim, the reaper,
    the prune and ``count_pending`` use the partial indexes), yet every claim and every
    finish changes ``state``, so neither update can be HOT and each wrote one entry into
    both of them: 4 of the 15 index entries a job cost on PostgreSQL
    (bench/pg_drain_profile.py)."""
    conn.execute(text("DROP INDEX IF EXISTS ix_qc_jobs_state_seq"))
    conn.execute(text("DROP INDEX IF EXISTS ix_qc_jobs_queue_seq"))


unique_keys = Table(
    "qc_unique",
    metadata,
    Column("key", Text, primary_key=True),
    Column("job_id", String(64), nullable=False),
    Column("enqueued_at", BigInteger, nullable=False),
    Column("unique_for_ms", BigInteger),
)
"""Version 5: the last job stored with each unique key (SPEC §11)."""
Index("ix_qc_unique_job", unique_keys.c.job_id)

rates = Table(
    "qc_rates",
    metadata,
    Column("key", Text, primary_key=True),
    Column("rate_limit", Integer, nullable=False),
    Column("window_ms", BigInteger, nullable=False),
    Column("stamps", Text, nullable=False),
)
"""Version 5: per rate key, its rate and its kept claim times (a JSON list of epoch ms)."""


def _v5(conn: Connection) -> None:
    """Version 5: unique jobs and rate limits: ``qc_unique``, ``qc_rates``,
    ``qc_jobs.rate_key`` and its index (``create_all`` of a new database has them)."""
    if "rate_key" not in {c["name"] for c in inspect(conn).get_columns(jobs.name)}:
        conn.execute(text("ALTER TABLE qc_jobs ADD COLUMN rate_key TEXT"))
    unique_keys.create(conn, checkfirst=True)
    rates.create(conn, checkfirst=True)
    _RATED.create(conn, checkfirst=True)


def _v8(conn: Connection) -> None:
    """Version 8: a running attempt is no longer stored in ``qc_attempts`` (it lives on its
    job row; the record is written once, when the attempt ends): drop the open records of
    running jobs, which the reads now synthesise from the job row."""
    conn.execute(
        text(
            "DELETE FROM qc_attempts WHERE finished_at IS NULL AND EXISTS (SELECT 1 FROM qc_jobs"
            " j WHERE j.id = qc_attempts.job_id AND j.attempt = qc_attempts.number"
            " AND j.state = 'running')"
        )
    )


def _v9(conn: Connection) -> None:
    """Version 9: ``ix_qc_jobs_enqueued`` for the throughput counts (SupportsThroughput)."""
    ix_jobs_enqueued.create(conn, checkfirst=True)


def _v10(conn: Connection) -> None:
    """Version 10: the counters of the fast flow step end (``backends/sql/flow_fast.py``):
    ``qc_executions.n_succeeded`` / ``n_bad``, ``qc_flow_steps.unmet``. Executions started
    before keep NULL counters and are always decided on the full view."""
    added = (("qc_executions", ("n_succeeded", "n_bad")), ("qc_flow_steps", ("unmet",)))
    for table, names in added:
        columns = {c["name"] for c in inspect(conn).get_columns(table)}
        for name in names:
            if name not in columns:
                conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} INTEGER"))


MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    1: _v1, 2: _v2, 3: _v3, 4: _v4, 5: _v5, 6: _v6, 7: _v7, 8: _v8, 9: _v9, 10: _v10
}  # fmt: skip
"""Version -> step that upgrades a database from ``version - 1``."""


def read_version(conn: Connection) -> int:
    """The stored schema version; 0 when the database has no queue-core schema."""
    if not inspect(conn).has_table(meta.name):
        return 0
    value = conn.execute(
        select(meta.c.value).where(meta.c.key == "schema_version")
    ).scalar_one_or_none()
    return int(value) if value is not None else 0


def migrate(conn: Connection, *, where: str) -> int:
    """Bring the schema up to :data:`SCHEMA_VERSION` inside the caller's transaction.

    The caller holds the migration lock. Returns the version found before migrating.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:a, :b)"),
            {"a": MIGRATION_LOCK[0], "b": MIGRATION_LOCK[1]},
        )
    found = read_version(conn)
    check_version(found, where)
    # Step numbers may have gaps (branches reserve numbers; the integrator renumbers).
    for version in sorted(v for v in MIGRATIONS if found < v <= SCHEMA_VERSION):
        MIGRATIONS[version](conn)
        if version == 1 and found == 0:
            conn.execute(meta.insert().values(key="schema_version", value=str(version)))
        else:
            conn.execute(
                meta.update().where(meta.c.key == "schema_version").values(value=str(version))
            )
    return found
