"""The SQL backend's schema version and its versioned migrations.

The schema version lives in ``qc_meta`` (``key = 'schema_version'``). :func:`migrate`
applies the steps of :data:`MIGRATIONS` in order inside one transaction that holds the
migration lock (``BEGIN IMMEDIATE`` on SQLite, an advisory transaction lock on
PostgreSQL), so concurrent migrations are safe and each step runs once. A database whose
version is newer than :data:`SCHEMA_VERSION` raises
:class:`~queue_core.records.errors.SchemaMismatch` and is left untouched.

Importing this module costs nothing: the store checks the stored version on its first
operation with a plain DBAPI query; SQLAlchemy and the tables (:mod:`backends.sql.tables`)
are imported by :func:`migrate` and :func:`read_version` only, when a schema has to be
created or upgraded. :func:`sqlite_script` is the script a new SQLite database is created
from (``sql/sqlite_schema.sql``; ``python -m backends.sql.sqlite`` rewrites it).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queue_core.records.errors import SchemaMismatch

if TYPE_CHECKING:
    from sqlalchemy import Connection

__all__ = [
    "JOBS_VACUUM",
    "MIGRATIONS",
    "MIGRATION_LOCK",
    "SCHEMA_VERSION",
    "check_version",
    "migrate",
    "read_version",
    "sqlite_script",
]

SCHEMA_VERSION = 16
"""The schema version this code reads and writes (the last step of :data:`MIGRATIONS`)."""

_EXPRESSION_INDEX_WARNING = "Skipped unsupported reflection of expression-based index"

MIGRATION_LOCK = (815_001, 1)
"""PostgreSQL advisory lock (classid, objid) held while migrating."""


def check_version(version: int, where: str) -> None:
    """Raise :class:`SchemaMismatch` when ``version`` is newer than this code."""
    if version > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"the queue-core schema in {where} is version {version}, newer than version "
            f"{SCHEMA_VERSION} that this queue-core understands; upgrade queue-core"
        )


def _columns(conn: Connection, table: str) -> set[str]:
    from sqlalchemy import inspect

    return {c["name"] for c in inspect(conn).get_columns(table)}


def _add_columns(conn: Connection, table: str, columns: tuple[tuple[str, str], ...]) -> None:
    from sqlalchemy import text

    present = _columns(conn, table)
    for name, kind in columns:
        if name not in present:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {kind}"))


def _v1(conn: Connection, t: Any) -> None:
    """Version 1: the initial schema (``create_all`` of every table defined: later steps
    add explicit changes, which they skip where ``create_all`` already made them)."""
    t.metadata.create_all(conn, checkfirst=True)


def _v2(conn: Connection, t: Any) -> None:
    """Version 2: ``qc_jobs.retry_lost_delay_ms``, so that ``lost_delay_ms`` keeps the
    value the job was enqueued with (what a dead-letter entry replays)."""
    _add_columns(conn, "qc_jobs", (("retry_lost_delay_ms", "BIGINT"),))


def _v3(conn: Connection, t: Any) -> None:
    """Version 3 (flows): ``qc_jobs.execution_id`` / ``step_id`` / ``flow_deadline_at``,
    and the flow tables (executions, steps, specs by hash)."""
    _add_columns(
        conn,
        "qc_jobs",
        (("execution_id", "VARCHAR(64)"), ("step_id", "TEXT"), ("flow_deadline_at", "BIGINT")),
    )
    t.ix_jobs_execution.create(conn, checkfirst=True)
    t.metadata.create_all(conn, tables=list(t.FLOW_TABLES), checkfirst=True)


def _v4(conn: Connection, t: Any) -> None:
    """Version 4: ``qc_schedule_ticks``, one row per periodic schedule (its last tick)."""
    t.schedule_ticks.create(conn, checkfirst=True)


def _v5(conn: Connection, t: Any) -> None:
    """Version 5: unique jobs and rate limits: ``qc_unique``, ``qc_rates``,
    ``qc_jobs.rate_key`` and its index."""
    _add_columns(conn, "qc_jobs", (("rate_key", "TEXT"),))
    t.unique_keys.create(conn, checkfirst=True)
    t.rates.create(conn, checkfirst=True)
    t.rated.create(conn, checkfirst=True)


def _v6(conn: Connection, t: Any) -> None:
    """Version 6: ``qc_workers``, the worker registry."""
    t.workers.create(conn, checkfirst=True)


def _v7(conn: Connection, t: Any) -> None:
    """Version 7: drop ``ix_qc_jobs_state_seq`` and ``ix_qc_jobs_queue_seq``.

    No query reads them (``list_jobs`` sorts by ``enqueued_at``; the claim, the reaper,
    the prune and ``count_pending`` use the partial indexes), yet every claim and every
    finish changes ``state``, so neither update can be HOT and each wrote one entry into
    both of them: 4 of the 15 index entries a job cost on PostgreSQL
    (bench/pg_drain_profile.py)."""
    from sqlalchemy import text

    conn.execute(text("DROP INDEX IF EXISTS ix_qc_jobs_state_seq"))
    conn.execute(text("DROP INDEX IF EXISTS ix_qc_jobs_queue_seq"))


def _v8(conn: Connection, t: Any) -> None:
    """Version 8: a running attempt is no longer stored in ``qc_attempts`` (it lives on its
    job row; the record is written once, when the attempt ends): drop the open records of
    running jobs, which the reads now synthesise from the job row."""
    from sqlalchemy import text

    conn.execute(
        text(
            "DELETE FROM qc_attempts WHERE finished_at IS NULL AND EXISTS (SELECT 1 FROM qc_jobs"
            " j WHERE j.id = qc_attempts.job_id AND j.attempt = qc_attempts.number"
            " AND j.state = 'running')"
        )
    )


def _v9(conn: Connection, t: Any) -> None:
    """Version 9: ``ix_qc_jobs_enqueued`` for the throughput counts (SupportsThroughput)."""
    t.ix_jobs_enqueued.create(conn, checkfirst=True)


def _v10(conn: Connection, t: Any) -> None:
    """Version 10: the counters of the fast flow step end: ``qc_executions.n_succeeded``
    / ``n_bad``, ``qc_flow_steps.unmet``. Executions started before keep NULL counters
    and are always decided on the whole execution."""
    _add_columns(conn, "qc_executions", (("n_succeeded", "INTEGER"), ("n_bad", "INTEGER")))
    _add_columns(conn, "qc_flow_steps", (("unmet", "INTEGER"),))


def _v11(conn: Connection, t: Any) -> None:
    """Version 11 (durable workflows, SPEC §12): ``qc_executions.kind`` / ``parent_id`` /
    ``parent_idx`` / ``awaiting``; ``qc_memos``, ``qc_waits``, ``qc_events``; the partial
    indexes of active executions count ``waiting`` as active (dropped and made again).
    Existing executions are flows (``kind`` NULL); no row changes."""
    from sqlalchemy import text

    _add_columns(
        conn,
        "qc_executions",
        (("kind", "VARCHAR(16)"), ("parent_id", "VARCHAR(64)"), ("parent_idx", "INTEGER"),
         ("awaiting", "TEXT")),
    )  # fmt: skip
    for index in (t.ix_executions_deadline, t.ix_executions_conc, t.ix_executions_finished):
        conn.execute(text(f"DROP INDEX IF EXISTS {index.name}"))
        index.create(conn)
    t.metadata.create_all(conn, tables=list(t.WORKFLOW_TABLES), checkfirst=True)


JOBS_VACUUM = {
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "5000",
    "autovacuum_vacuum_cost_delay": "0",
    "vacuum_index_cleanup": "on",
}
"""Version 12: the storage parameters of ``qc_jobs`` on PostgreSQL (see :func:`_v12`)."""


def _v12(conn: Connection, t: Any) -> None:
    """Version 12 (PostgreSQL only; SQLite has nothing to change): vacuum ``qc_jobs``
    after a fixed number of dead rows, unthrottled, always with its index pass.

    Every claim and every finish changes ``state``, which every partial index names, so
    no job update is HOT (``pg_stat_user_tables``: 0 of 200,024 updates): each leaves a
    dead version and dead entries in the indexes, and the claim's index
    (``ix_qc_jobs_ready``) walks the dead entries of the jobs claimed since its last
    vacuum before it finds a queued one (``EXPLAIN (ANALYZE, BUFFERS)`` after 100,000
    kept jobs: 556 buffers to return 8 rows, 17 on a fresh store). With the default
    ``autovacuum_vacuum_scale_factor`` (0.2 of the live rows, i.e. of the kept
    history) the dead entries allowed before a vacuum grew with the history; from
    PostgreSQL 14 VACUUM also skips the index pass while under 2 % of the heap's pages
    hold dead rows, which a large history always does. A fixed threshold, no cost delay
    and ``vacuum_index_cleanup = on`` keep the claim's walk bounded by the recent churn,
    not the history (bench/history_cost.py). Storage parameters only: no data moves."""
    if conn.dialect.name != "postgresql":
        return
    from sqlalchemy import text

    options = ", ".join(f"{k} = {v}" for k, v in JOBS_VACUUM.items())
    conn.execute(text(f"ALTER TABLE qc_jobs SET ({options})"))


def _v13(conn: Connection, t: Any) -> None:
    """Version 13 (flow control, SPEC §13): ``qc_jobs.progress`` / ``progress_message`` /
    ``progress_at``, ``concurrency_behavior`` / ``concurrency_group``, ``debounce_key`` /
    ``debounce_ms`` / ``debounce_max_ms`` (NULL on the jobs stored before: none of it), the
    round-robin index, and ``qc_pauses``, ``qc_debounce``, ``qc_rr``. One step, so that it
    can be renumbered as a whole."""
    _add_columns(
        conn,
        "qc_jobs",
        (
            ("progress", "DOUBLE PRECISION"),
            ("progress_message", "TEXT"),
            ("progress_at", "BIGINT"),
            ("concurrency_behavior", "TEXT"),
            ("concurrency_group", "TEXT"),
            ("debounce_key", "TEXT"),
            ("debounce_ms", "BIGINT"),
            ("debounce_max_ms", "BIGINT"),
        ),
    )
    t.ix_jobs_rr.create(conn, checkfirst=True)
    t.metadata.create_all(conn, tables=list(t.CONTROL_TABLES), checkfirst=True)


def _v14(conn: Connection, t: Any) -> None:
    """Version 14: ``qc_jobs.held``, the pause a queued job of a paused task or flow was
    set aside for (NULL on every job stored before: none was), and ``ix_qc_jobs_held``.
    Version 15 makes ``ix_qc_jobs_ready`` again without the held jobs (``state = 'queued'
    AND held IS NULL``), so that a claim never reads past a paused task's jobs
    (:mod:`backends.sql.pauses`). The jobs of a task or flow paused before the upgrade
    stay in the ready index until a claim meets them (then they are set aside)."""
    _add_columns(conn, "qc_jobs", (("held", "TEXT"),))
    t.ix_jobs_held.create(conn, checkfirst=True)


def _v15(conn: Connection, t: Any) -> None:
    """Version 15: a reaped job keeps its place in line (``queue_core.rules.outcomes.
    reap_place_at``): ``qc_jobs.place_at`` (NULL on the jobs stored before: their place is
    their ``run_at``), and ``ix_qc_jobs_ready`` in the claim order that reads it
    (``tables.PLACE`` instead of ``run_at``) and without the held jobs (version 14)."""
    from sqlalchemy import text

    _add_columns(conn, "qc_jobs", (("place_at", "BIGINT"),))
    conn.execute(text(f"DROP INDEX IF EXISTS {t.ix_jobs_ready.name}"))
    t.ix_jobs_ready.create(conn)


def _v16(conn: Connection, t: Any) -> None:
    """Version 16: ``qc_jobs.ahead``, whether the running attempt is held ahead of a free
    slot (its body not started), so that a reap spends no attempt of it (SPEC §8), and
    ``ahead_refunds``, how many times a reap did so (bounded). NULL on the rows stored
    before: an attempt held across the upgrade is reaped as a running one."""
    _add_columns(conn, "qc_jobs", (("ahead", "BOOLEAN"), ("ahead_refunds", "INTEGER")))


MIGRATIONS: dict[int, Callable[[Connection, Any], None]] = {
    1: _v1, 2: _v2, 3: _v3, 4: _v4, 5: _v5, 6: _v6, 7: _v7, 8: _v8, 9: _v9, 10: _v10,
    11: _v11, 12: _v12, 13: _v13, 14: _v14, 15: _v15, 16: _v16,
}  # fmt: skip
"""Version -> step that upgrades a database from ``version - 1`` (given the connection
and :mod:`backends.sql.tables`)."""


def read_version(conn: Connection) -> int:
    """The stored schema version; 0 when the database has no queue-core schema."""
    from sqlalchemy import inspect, select

    from backends.sql import tables

    if not inspect(conn).has_table(tables.meta.name):
        return 0
    value = conn.execute(
        select(tables.meta.c.value).where(tables.meta.c.key == "schema_version")
    ).scalar_one_or_none()
    return int(value) if value is not None else 0


def migrate(conn: Connection, *, where: str) -> int:
    """Bring the schema up to :data:`SCHEMA_VERSION` inside the caller's transaction.

    The caller holds the migration lock. Returns the version found before migrating.
    """
    from sqlalchemy import text

    from backends.sql import tables

    if conn.dialect.name == "postgresql":
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:a, :b)"),
            {"a": MIGRATION_LOCK[0], "b": MIGRATION_LOCK[1]},
        )
    found = read_version(conn)
    check_version(found, where)
    meta = tables.meta
    # Step numbers may have gaps (branches reserve numbers; the integrator renumbers).
    with warnings.catch_warnings():
        # `checkfirst` reflects the indexes; SQLAlchemy cannot reflect the expression in
        # ix_qc_jobs_ready (version 15) and says so for every step that checks
        warnings.filterwarnings("ignore", _EXPRESSION_INDEX_WARNING)
        for version in sorted(v for v in MIGRATIONS if found < v <= SCHEMA_VERSION):
            MIGRATIONS[version](conn, tables)
            if version == 1 and found == 0:
                conn.execute(meta.insert().values(key="schema_version", value=str(version)))
            else:
                conn.execute(
                    meta.update().where(meta.c.key == "schema_version").values(value=str(version))
                )
    return found


# --------------------------------------------------------------------------- SQLite script

_SCRIPT_HEAD = (
    "-- The schema of a new SQLite database, replayed by backends/sql/sqlite.py.\n"
    "-- Generated by `python -m backends.sql.sqlite` from a database migrated by\n"
    "-- backends/sql/schema.py: do not edit by hand.\n"
)


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def sqlite_script() -> str:
    """The text of ``sql/sqlite_schema.sql``: the ``sqlite_master`` statements of a SQLite
    database :func:`migrate` brought to :data:`SCHEMA_VERSION` (tables, then indexes, each
    by name: ``create_all`` creates indexes in no fixed order), and its ``qc_meta`` rows."""
    import sqlite3

    from sqlalchemy import create_engine

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "schema.db")
        engine = create_engine(f"sqlite:///{path}")
        try:
            with engine.begin() as conn:
                migrate(conn, where=path)
        finally:
            engine.dispose()
        db = sqlite3.connect(path)
        try:
            version = db.execute("SELECT value FROM qc_meta WHERE key = 'schema_version'")
            tag = int(version.fetchone()[0])
            ddl = [
                row[0]
                for row in db.execute(
                    "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND tbl_name LIKE"
                    " 'qc\\_%' ESCAPE '\\' ORDER BY type = 'index', name"
                )
            ]
            meta = [
                f"INSERT INTO qc_meta (key, value) VALUES ({_literal(k)}, {_literal(v)})"
                for k, v in db.execute("SELECT key, value FROM qc_meta ORDER BY key")
            ]
        finally:
            db.close()
    return f"{_SCRIPT_HEAD}-- schema_version: {tag}\n" + "\n;\n".join(ddl + meta) + "\n"
