"""Schema version, migrations and the newer-schema refusal (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from backends.sql import SQLStorage
from backends.sql.schema import SCHEMA_VERSION
from queue_core.records.errors import SchemaMismatch
from queue_core.testing import T0, new_job
from tests.servers.postgres import PostgresServer


def test_sqlite_schema_is_created_on_first_use(tmp_path: Path) -> None:
    storage = SQLStorage(f"sqlite:///{tmp_path / 'q.db'}")
    try:
        assert storage.schema_version() == 0
        storage.enqueue([new_job()], now=T0)
        assert storage.schema_version() == SCHEMA_VERSION
    finally:
        storage.close()


def test_migrate_is_idempotent_and_keeps_data(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    storage = SQLStorage(url)
    try:
        storage.migrate()
        storage.enqueue([job := new_job()], now=T0)
        storage.migrate()
        assert storage.schema_version() == SCHEMA_VERSION
        assert storage.get_job(job.id) is not None
    finally:
        storage.close()


def _bump_version(url: str) -> None:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(text("UPDATE qc_meta SET value = '999' WHERE key = 'schema_version'"))
    engine.dispose()


def test_newer_sqlite_schema_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    first = SQLStorage(url)
    first.migrate()
    first.close()
    _bump_version(url)
    second = SQLStorage(url)
    try:
        with pytest.raises(SchemaMismatch, match="999"):
            second.enqueue([new_job()], now=T0)
        with pytest.raises(SchemaMismatch):
            second.migrate()
    finally:
        second.close()


def test_newer_postgres_schema_is_refused(postgres_url: str) -> None:
    _bump_version(postgres_url)
    storage = SQLStorage(postgres_url)
    try:
        with pytest.raises(SchemaMismatch):
            storage.claim("w", ["default"], 1, 1000, now=T0)
    finally:
        storage.close()


def test_concurrent_migrations_on_an_empty_postgres_database(
    postgres_server: PostgresServer,
) -> None:
    name = f"qc_empty_{uuid.uuid4().hex[:8]}"
    postgres_server.create_database(name)
    storages = [SQLStorage(postgres_server.url(name), pool_size=1) for _ in range(4)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(storages))

    def run(s: SQLStorage) -> None:
        barrier.wait()
        try:
            s.migrate()
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in storages]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        assert all(s.schema_version() == SCHEMA_VERSION for s in storages)
        storages[0].enqueue([new_job()], now=T0)
        assert len(storages[1].claim("w", ["default"], 5, 1000, now=T0)) == 1
    finally:
        for s in storages:
            s.close()
        postgres_server.drop_database(name)
