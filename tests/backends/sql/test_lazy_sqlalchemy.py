"""The SQL backend runs jobs without importing SQLAlchemy (it costs more than the rest
of a worker's start-up); SQLAlchemy is imported to create or migrate the schema only."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from backends.sql import schema
from backends.sql.schema import SCHEMA_VERSION
from backends.sql.url import parse_sql_url
from queue_core.records.errors import ConfigError

URLS = [
    "sqlite://",
    "sqlite:///jobs.db",
    "sqlite:////tmp/abs path/jobs.db",
    "sqlite:///:memory:",
    "sqlite+pysqlite:///a%20b.db?x=1&x=2",
    "postgresql://localhost/db",
    "postgresql+psycopg://alice:s%40cret%2Fpw@127.0.0.1:5433/queue?sslmode=disable",
    "postgres://al%3Aice@[::1]:5432/db?application_name=qc&connect_timeout=3",
    "postgresql://u:p@host",
]


@pytest.mark.parametrize("url", URLS)
def test_urls_parse_and_render_as_sqlalchemy_does(url: str) -> None:
    ours, theirs = parse_sql_url(url), make_url(url)
    assert (ours.drivername, ours.username, ours.password, ours.host, ours.port) == (
        theirs.drivername,
        theirs.username,
        theirs.password,
        theirs.host,
        theirs.port,
    )
    assert ours.database == theirs.database
    for hide in (True, False):
        assert ours.render(hide_password=hide) == theirs.render_as_string(hide_password=hide)
    assert make_url(ours.render(hide_password=False)) == theirs


@pytest.mark.parametrize("url", ["not a url", "postgresql://u@host:port/db"])
def test_malformed_sql_urls_are_config_errors(url: str) -> None:
    from backends.sql import SQLStorage

    with pytest.raises(ConfigError) as info:
        SQLStorage(url)
    assert info.value.code == "invalid_url"


def test_schema_version_is_the_last_migration_step() -> None:
    assert SCHEMA_VERSION == max(schema.MIGRATIONS) == schema.SCHEMA_VERSION


_PROGRAM = """
import sys
from backends.sql import SQLStorage
from queue_core.testing import new_job
storage = SQLStorage({url!r})
storage.enqueue([new_job()])
claimed = storage.claim("w1", ["default"], 1, lease_ms=30_000)
assert len(claimed) == 1, claimed
storage.close()
print("sqlalchemy" in sys.modules)
"""


def _imports_sqlalchemy(url: str) -> bool:
    program = textwrap.dedent(_PROGRAM.format(url=url))
    out = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    return out.stdout.strip().splitlines()[-1] == "True"


def test_sqlite_imports_sqlalchemy_only_to_migrate_an_existing_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    # a new database: created from backends/sql/sql/sqlite_schema.sql (sqlite.py)
    assert not _imports_sqlalchemy(url)
    assert not _imports_sqlalchemy(url)  # up to date: plain sqlite3 only
    import sqlite3

    with sqlite3.connect(tmp_path / "q.db") as conn:
        conn.execute("UPDATE qc_meta SET value = '9' WHERE key = 'schema_version'")
    assert _imports_sqlalchemy(url)  # an older schema is migrated by schema.py


def test_an_older_schema_is_still_migrated(tmp_path: Path) -> None:
    from backends.sql import SQLStorage

    url = f"sqlite:///{tmp_path / 'q.db'}"
    SQLStorage(url).migrate()
    import sqlite3

    with sqlite3.connect(tmp_path / "q.db") as conn:
        conn.execute("UPDATE qc_meta SET value = '1' WHERE key = 'schema_version'")
    storage = SQLStorage(url)
    try:
        assert storage.schema_version() == 1
        storage.stats()
        assert storage.schema_version() == SCHEMA_VERSION
    finally:
        storage.close()


def _indexes(path: Path) -> set[str]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()
    return {r[0] for r in rows}


_UNREAD = {"ix_qc_jobs_state_seq", "ix_qc_jobs_queue_seq"}


def test_version_7_drops_the_indexes_no_query_reads(tmp_path: Path) -> None:
    from backends.sql import SQLStorage

    fresh = SQLStorage(f"sqlite:///{tmp_path / 'new.db'}")
    fresh.migrate()
    fresh.close()
    assert not _indexes(tmp_path / "new.db") & _UNREAD
    assert "ix_qc_jobs_ready" in _indexes(tmp_path / "new.db")

    import sqlite3

    old = tmp_path / "old.db"
    SQLStorage(f"sqlite:///{old}").migrate()
    with sqlite3.connect(old) as conn:  # what a version 2 database has
        conn.execute("CREATE INDEX ix_qc_jobs_state_seq ON qc_jobs (state, seq)")
        conn.execute("CREATE INDEX ix_qc_jobs_queue_seq ON qc_jobs (queue, seq)")
        conn.execute("UPDATE qc_meta SET value = '2' WHERE key = 'schema_version'")
    storage = SQLStorage(f"sqlite:///{old}")
    try:
        storage.stats()
        assert storage.schema_version() == SCHEMA_VERSION
    finally:
        storage.close()
    assert not _indexes(old) & _UNREAD
