"""Fixtures of the SQL-specific tests: one database per test, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.sql import SQLStorage


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new SQLite file, or a fresh migrated PostgreSQL database (``postgres_url``)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'q.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def storage(url: str) -> Iterator[SQLStorage]:
    """A storage on ``url`` with the default retention, closed after the test."""
    s = SQLStorage(url)
    yield s
    s.close()
