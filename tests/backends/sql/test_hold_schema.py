"""Schema version 14 (jobs of a paused task or flow set aside, ``qc_jobs.held``): a
database of version 13 migrates and keeps its jobs and its pauses.

The SQLite case starts from the genuine version-13 schema (``data/sqlite_schema_v13.sql``,
the script the previous release created new databases from); the PostgreSQL case undoes
what version 14 changed in a current schema and migrates it back. In both, a task paused
before the upgrade keeps its jobs unclaimed: the first claim sets them aside.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import create_engine, text

from backends.sql import SQLStorage
from backends.sql.records import JOB_COLUMNS, job_row
from backends.sql.schema import SCHEMA_VERSION
from queue_core.records.control import PauseKind
from queue_core.records.jobs import JobState, NewJob
from queue_core.testing import LEASE, SEC, T0, claim_one, complete_end, new_job
from tests.backends.sql.old_schemas import sqlite_at_version

_TASK = "tests.paused_before"


def _check_kept(storage: SQLStorage, paused: NewJob, queued: NewJob, done: str) -> None:
    record = storage.get_job(done)  # the first operation migrates
    assert storage.schema_version() == SCHEMA_VERSION
    assert record is not None and record.state is JobState.SUCCEEDED
    assert [(p.kind, p.name) for p in storage.list_paused()] == [(PauseKind.TASK, _TASK)]
    assert claim_one(storage, now=T0 + SEC).id == queued.id
    assert storage.claim("w", ["default"], 5, LEASE, now=T0 + SEC) == []
    with storage.store.stmt() as cur:
        held = cur.execute("SELECT held FROM qc_jobs WHERE id = '" + paused.id + "'").fetchone()
    assert held["held"] == f"task:{_TASK}"  # met by the claims: set aside
    paused_record = storage.get_job(paused.id)
    assert paused_record is not None and paused_record.state is JobState.QUEUED
    assert storage.resume(PauseKind.TASK, _TASK) is True
    assert claim_one(storage, now=T0 + 2 * SEC).id == paused.id


def test_a_version_13_sqlite_database_migrates_and_keeps_its_jobs_and_pauses(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    sqlite_at_version(path, 13)
    paused, queued, done = new_job(task_name=_TASK, priority=9), new_job(), new_job()
    db = sqlite3.connect(path)
    insert = f"INSERT INTO qc_jobs ({', '.join(JOB_COLUMNS)}) VALUES ({', '.join('?' * 23)})"
    db.execute(insert, job_row(paused, T0))
    db.execute(insert, job_row(queued, T0))
    db.execute(insert, job_row(done, T0, JobState.SUCCEEDED))
    db.execute("INSERT INTO qc_pauses (kind, name, since) VALUES ('task', ?, ?)", (_TASK, T0))
    db.execute("INSERT INTO qc_meta (key, value) VALUES ('pauses_version', '1')")
    db.commit()
    version = db.execute("SELECT value FROM qc_meta WHERE key = 'schema_version'").fetchone()
    db.close()
    assert version == ("13",)
    storage = SQLStorage(f"sqlite:///{path}")
    try:
        _check_kept(storage, paused, queued, done.id)
    finally:
        storage.close()


def test_a_postgres_database_without_version_14_migrates_and_keeps_its_jobs(
    postgres_url: str,
) -> None:
    storage = SQLStorage(postgres_url)
    paused, queued, done = new_job(task_name=_TASK, priority=9), new_job(), new_job()
    try:
        storage.enqueue([done], now=T0)
        storage.finish([complete_end(claim_one(storage, now=T0).ref)], now=T0)
        storage.enqueue([paused, queued], now=T0)
    finally:
        storage.close()
    engine = create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_qc_jobs_ready"))
        conn.execute(text("DROP INDEX ix_qc_jobs_held"))
        conn.execute(text("ALTER TABLE qc_jobs DROP COLUMN held"))
        conn.execute(text("ALTER TABLE qc_jobs DROP COLUMN place_at"))  # version 15's
        conn.execute(
            text(
                "CREATE INDEX ix_qc_jobs_ready ON qc_jobs (queue, priority DESC, run_at, seq)"
                " WHERE state = 'queued'"
            )
        )
        conn.execute(
            text("INSERT INTO qc_pauses (kind, name, since) VALUES ('task', :n, :t)"),
            {"n": _TASK, "t": T0},
        )
        conn.execute(text("INSERT INTO qc_meta (key, value) VALUES ('pauses_version', '1')"))
        conn.execute(text("UPDATE qc_meta SET value = '13' WHERE key = 'schema_version'"))
    engine.dispose()
    storage = SQLStorage(postgres_url)
    try:
        _check_kept(storage, paused, queued, done.id)
        with storage.store.stmt() as cur:
            ready = cur.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_qc_jobs_ready'"
            ).fetchone()
        assert "held IS NULL" in ready["indexdef"]
    finally:
        storage.close()
