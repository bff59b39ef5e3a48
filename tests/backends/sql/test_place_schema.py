"""Schema version 15 (a reaped job keeps its place in line): a version-13 database
migrates, keeps its jobs, and orders claims by the place a reap keeps.

The SQLite case starts from the genuine version-13 schema (``data/sqlite_schema_v13.sql``,
the script the previous release created new databases from); the PostgreSQL case puts a
current schema back to version 13 (no ``place_at``, the old claim index) and migrates it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import create_engine, text

from backends.sql import SQLStorage
from backends.sql.records import JOB_COLUMNS, job_row
from backends.sql.schema import SCHEMA_VERSION
from queue_core.records.jobs import JobState
from queue_core.testing import LEASE, SEC, T0, new_job
from tests.backends.sql.old_schemas import sqlite_at_version

_OLD_INDEX = (
    "CREATE INDEX ix_qc_jobs_ready ON qc_jobs (queue, priority DESC, run_at, seq) "
    "WHERE state = 'queued'"
)


def _check_migrated(storage: SQLStorage, first: str, second: str, done: str) -> None:
    """The jobs stored at version 13 are kept; ``first`` (enqueued before ``second``) is
    claimed, its worker dies, and once its backoff has passed it comes back first."""
    record = storage.get_job(done)  # the first operation migrates
    assert storage.schema_version() == SCHEMA_VERSION >= 15
    assert record is not None and record.state is JobState.SUCCEEDED
    got = storage.claim("w", ["default"], 1, LEASE, now=T0 + SEC)
    assert [j.id for j in got] == [first]
    reaped_at = T0 + SEC + LEASE
    assert [r.job_id for r in storage.reap(now=reaped_at)] == [first]
    now = reaped_at + 5 * SEC  # first's backoff: 5 s
    order = [(j.id, j.attempt) for j in storage.claim("w", ["default"], 2, LEASE, now=now)]
    assert order == [(first, 2), (second, 1)], order


def test_a_version_13_sqlite_database_migrates_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    sqlite_at_version(path, 13)
    first = new_job(max_attempts=3, lost_delay_ms=5 * SEC)
    second, done = new_job(max_attempts=3), new_job()
    db = sqlite3.connect(path)
    insert = f"INSERT INTO qc_jobs ({', '.join(JOB_COLUMNS)}) VALUES ({', '.join('?' * 23)})"
    for job in (first, second):
        db.execute(insert, job_row(job, T0))
    db.execute(insert, job_row(done, T0, JobState.SUCCEEDED))
    db.commit()
    version = db.execute("SELECT value FROM qc_meta WHERE key = 'schema_version'").fetchone()
    assert "place_at" not in {r[1] for r in db.execute("PRAGMA table_info(qc_jobs)")}
    db.close()
    assert version == ("13",)
    storage = SQLStorage(f"sqlite:///{path}")
    try:
        _check_migrated(storage, first.id, second.id, done.id)
    finally:
        storage.close()
    db = sqlite3.connect(path)
    (index,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'ix_qc_jobs_ready'")
    db.close()
    assert "coalesce(place_at, run_at)" in index[0], index


def test_a_postgres_database_of_version_13_migrates_and_keeps_its_jobs(
    postgres_url: str,
) -> None:
    storage = SQLStorage(postgres_url)
    first = new_job(max_attempts=3, lost_delay_ms=5 * SEC)
    second, done = new_job(max_attempts=3), new_job()
    try:
        storage.enqueue([first, second, done], now=T0)
    finally:
        storage.close()
    engine = create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_qc_jobs_ready"))
        conn.execute(text("ALTER TABLE qc_jobs DROP COLUMN place_at"))
        conn.execute(text("DROP INDEX ix_qc_jobs_held"))  # version 14's
        conn.execute(text("ALTER TABLE qc_jobs DROP COLUMN held"))
        conn.execute(text(_OLD_INDEX))
        conn.execute(text("UPDATE qc_jobs SET state = 'succeeded' WHERE id = :id"), {"id": done.id})
        conn.execute(text("UPDATE qc_meta SET value = '13' WHERE key = 'schema_version'"))
    engine.dispose()
    storage = SQLStorage(postgres_url)
    try:
        _check_migrated(storage, first.id, second.id, done.id)
    finally:
        storage.close()
    engine = create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        index = conn.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_qc_jobs_ready'")
        ).scalar_one()
    engine.dispose()
    assert "COALESCE(place_at, run_at)" in index, index
