"""The published contract suite on SQLite: a fresh database file per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.sql import SQLStorage
from queue_core.testing import StorageContract, StorageWithRetention, TemplateEnqueueContract


class TestSQLiteStorage(StorageContract, TemplateEnqueueContract):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Iterator[SQLStorage]:
        storage = SQLStorage.from_url(f"sqlite:///{tmp_path / 'queue.db'}")
        yield storage
        storage.close()

    @pytest.fixture
    def storage_with_retention(self, tmp_path: Path) -> Iterator[StorageWithRetention]:
        built: list[SQLStorage] = []

        def build(retention: str) -> SQLStorage:
            path = tmp_path / f"retention{len(built)}.db"
            built.append(SQLStorage.from_url(f"sqlite:///{path}?retention={retention}"))
            return built[-1]

        yield build
        for storage in built:
            storage.close()

    @pytest.fixture
    def unreachable_storage(self, tmp_path: Path) -> Iterator[SQLStorage]:
        """SQLite has no server: its "down" is a database file whose directory is not there
        (a volume not mounted yet)."""
        storage = SQLStorage.from_url(f"sqlite:///{tmp_path / 'not-mounted' / 'queue.db'}")
        yield storage
        storage.close()
