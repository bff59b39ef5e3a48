"""Schema version 11 (flow control): a database of version 10 migrates and keeps its jobs.

The SQLite case starts from the genuine version-10 schema (``data/sqlite_schema_v10.sql``,
the script the previous release created new databases from); the PostgreSQL case drops
what version 11 added from a current schema and migrates it back.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import create_engine, text

from backends.sql import SQLStorage
from backends.sql.records import JOB_COLUMNS, job_row
from backends.sql.schema import SCHEMA_VERSION
from queue_core.records.control import ProgressUpdate
from queue_core.records.jobs import JobState
from queue_core.testing import LEASE, SEC, T0, claim_one, complete_end, new_job
from tests.backends.sql.old_schemas import sqlite_at_version

_ADDED_COLUMNS = (
    "progress", "progress_message", "progress_at", "concurrency_behavior",
    "concurrency_group", "debounce_key", "debounce_ms", "debounce_max_ms",
)  # fmt: skip


def _check_kept(storage: SQLStorage, queued: str, done: str) -> None:
    record = storage.get_job(done)  # the first operation migrates
    assert storage.schema_version() == SCHEMA_VERSION
    assert record is not None and record.state is JobState.SUCCEEDED
    claimed = claim_one(storage, now=T0 + SEC)
    assert claimed.id == queued
    assert storage.set_progress(claimed.ref, ProgressUpdate(0.5, "half"), now=T0 + 2 * SEC)
    got = storage.get_progress(queued)
    assert got is not None and (got.fraction, got.message) == (0.5, "half")
    assert storage.get_progress(done) is None


def test_a_version_10_sqlite_database_migrates_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    sqlite_at_version(path, 10)
    queued, done = new_job(), new_job()
    db = sqlite3.connect(path)
    insert = f"INSERT INTO qc_jobs ({', '.join(JOB_COLUMNS)}) VALUES ({', '.join('?' * 23)})"
    db.execute(insert, job_row(queued, T0))
    db.execute(insert, job_row(done, T0, JobState.SUCCEEDED))
    db.commit()
    version = db.execute("SELECT value FROM qc_meta WHERE key = 'schema_version'").fetchone()
    db.close()
    assert version == ("10",)
    storage = SQLStorage(f"sqlite:///{path}")
    try:
        _check_kept(storage, queued.id, done.id)
    finally:
        storage.close()


def test_a_postgres_database_without_version_11_migrates_and_keeps_its_jobs(
    postgres_url: str,
) -> None:
    storage = SQLStorage(postgres_url)
    queued, done = new_job(), new_job()
    try:
        storage.enqueue([queued, done], now=T0)
        (took,) = storage.claim("w", ["default"], 1, LEASE, now=T0)
        storage.finish([complete_end(took.ref)], now=T0)
    finally:
        storage.close()
    if took.id == queued.id:
        queued, done = done, queued
    engine = create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE qc_pauses, qc_debounce, qc_rr"))
        conn.execute(text("DROP INDEX ix_qc_jobs_rr"))
        for column in _ADDED_COLUMNS:
            conn.execute(text(f"ALTER TABLE qc_jobs DROP COLUMN {column}"))
        conn.execute(text("UPDATE qc_meta SET value = '10' WHERE key = 'schema_version'"))
    engine.dispose()
    storage = SQLStorage(postgres_url)
    try:
        _check_kept(storage, queued.id, done.id)
    finally:
        storage.close()
