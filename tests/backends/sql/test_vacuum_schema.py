"""Schema step 12: ``qc_jobs``'s vacuum settings on PostgreSQL; a no-op on SQLite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from backends.sql import SQLStorage
from backends.sql.schema import JOBS_VACUUM, SCHEMA_VERSION
from queue_core.testing import SEC, T0, complete_end, new_job


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _reloptions(url: str) -> dict[str, str]:
    with psycopg.connect(_dsn(url)) as conn:
        row = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'qc_jobs'").fetchone()
    assert row is not None
    return dict(o.split("=", 1) for o in row[0] or [])


def _a_finished_and_a_queued_job(storage: SQLStorage) -> tuple[str, str]:
    done, waiting = new_job(), new_job()
    storage.enqueue([done], now=T0)
    (claimed,) = storage.claim("w1", ["default"], 1, 30 * SEC, now=T0)
    assert storage.finish([complete_end(claimed.ref)], now=T0 + SEC) == [True]
    storage.enqueue([waiting], now=T0 + 2 * SEC)
    return done.id, waiting.id


def test_a_new_postgres_schema_has_the_vacuum_settings(postgres_url: str) -> None:
    storage = SQLStorage(postgres_url)
    try:
        storage.migrate()
        assert storage.schema_version() == SCHEMA_VERSION
    finally:
        storage.close()
    assert _reloptions(postgres_url) == JOBS_VACUUM


def test_a_version_11_postgres_database_gets_them_and_keeps_its_jobs(postgres_url: str) -> None:
    first = SQLStorage(postgres_url)
    try:
        first.migrate()
        done, waiting = _a_finished_and_a_queued_job(first)
    finally:
        first.close()
    with psycopg.connect(_dsn(postgres_url)) as conn:
        conn.execute(f"ALTER TABLE qc_jobs RESET ({', '.join(JOBS_VACUUM)})")
        conn.execute("UPDATE qc_meta SET value = '11' WHERE key = 'schema_version'")
    assert _reloptions(postgres_url) == {}
    storage = SQLStorage(postgres_url)
    try:
        storage.migrate()
        assert storage.schema_version() == SCHEMA_VERSION
        assert _reloptions(postgres_url) == JOBS_VACUUM
        finished = storage.get_job(done)
        assert finished is not None and finished.state.value == "succeeded"
        (claimed,) = storage.claim("w2", ["default"], 5, 30 * SEC, now=T0 + 3 * SEC)
        assert claimed.id == waiting
    finally:
        storage.close()


def test_a_version_11_sqlite_database_migrates_and_keeps_its_jobs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'v10.db'}"
    first = SQLStorage(url)
    try:
        first.migrate()
        done, waiting = _a_finished_and_a_queued_job(first)
    finally:
        first.close()
    raw = sqlite3.connect(tmp_path / "v10.db")
    raw.execute("UPDATE qc_meta SET value = '11' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()
    storage = SQLStorage(url)
    try:
        storage.migrate()
        assert storage.schema_version() == SCHEMA_VERSION
        finished = storage.get_job(done)
        assert finished is not None and finished.state.value == "succeeded"
        (claimed,) = storage.claim("w2", ["default"], 5, 30 * SEC, now=T0 + 3 * SEC)
        assert claimed.id == waiting
    finally:
        storage.close()
