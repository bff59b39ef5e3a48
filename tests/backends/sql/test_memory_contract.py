"""The published contract suite on an in-memory SQLite database (``sqlite://``): one
connection shared by every thread of the process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.sql import SQLStorage
from queue_core.testing import StorageContract, StorageWithRetention


class TestInMemorySQLiteStorage(StorageContract):
    @pytest.fixture
    def storage(self) -> Iterator[SQLStorage]:
        storage = SQLStorage.from_url("sqlite://")
        yield storage
        storage.close()

    @pytest.fixture
    def storage_with_retention(self) -> Iterator[StorageWithRetention]:
        built: list[SQLStorage] = []

        def build(retention: str) -> SQLStorage:
            built.append(SQLStorage.from_url(f"sqlite://?retention={retention}"))
            return built[-1]

        yield build
        for storage in built:
            storage.close()
