"""A new SQLite database gets its schema from ``backends/sql/sql/sqlite_schema.sql``
(:meth:`backends.sql.sqlite.SQLite.create_fresh`) instead of SQLAlchemy: the same schema,
a few ms instead of ~0.3 s of imports on a producer's first call."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from backends.sql import SQLStorage, schema, sqlite
from backends.sql.schema import SCHEMA_VERSION
from backends.sql.url import parse_sql_url
from queue_core.testing import new_job


def _schema(path: Path) -> dict[str, Any]:
    with sqlite3.connect(path) as conn:
        master = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        columns = {
            name: conn.execute(f"PRAGMA table_info({name})").fetchall()
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        meta = conn.execute("SELECT key, value FROM qc_meta ORDER BY key").fetchall()
    return {"master": master, "columns": columns, "meta": meta}


def test_the_stored_script_is_what_the_migrations_create() -> None:
    """Fails when a schema step changes the SQLite schema and the script was not
    regenerated (``python -m backends.sql.sqlite``)."""
    assert sqlite.load_script()[0] == SCHEMA_VERSION
    assert sqlite.SCRIPT.read_text(encoding="utf-8") == schema.sqlite_script()


def test_a_new_database_gets_the_schema_the_migrations_give(tmp_path: Path) -> None:
    fresh = SQLStorage(f"sqlite:///{tmp_path / 'fresh.db'}")
    migrated = SQLStorage(f"sqlite:///{tmp_path / 'migrated.db'}")
    try:
        fresh.enqueue([new_job(id="j1")])  # the first call creates the schema
        migrated.migrate()
        assert fresh.schema_version() == SCHEMA_VERSION
        assert fresh.get_job("j1") is not None
    finally:
        fresh.close()
        migrated.close()
    assert _schema(tmp_path / "fresh.db") == _schema(tmp_path / "migrated.db")


def _create_fresh(path: Path) -> bool:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        done = sqlite.SQLite(parse_sql_url(f"sqlite:///{path}"), 1000).create_fresh(conn.cursor())
        conn.execute("COMMIT")
        return done
    finally:
        conn.close()


def test_only_an_empty_database_takes_the_script(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    assert _create_fresh(path)
    assert not _create_fresh(path)  # a second creator (another process) finds the schema
    partial = tmp_path / "partial.db"
    with sqlite3.connect(partial) as conn:  # a queue-core object but no qc_meta
        conn.execute("CREATE TABLE qc_jobs (seq INTEGER PRIMARY KEY)")
    assert not _create_fresh(partial)
    with sqlite3.connect(partial) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
    assert names == ["qc_jobs"]


def test_a_script_of_another_version_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    path = tmp_path / "q.db"
    assert not _create_fresh(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
