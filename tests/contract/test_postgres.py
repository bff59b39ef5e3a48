"""The published contract suite on PostgreSQL, on a real server started for the session.

Each test gets an empty schema: one migrated database shared by the suite, its tables
truncated before every test (cloning a database per test costs ~0.5 s each).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.sql import SQLStorage
from queue_core.testing import (
    UNREACHABLE_PASSWORD,
    StorageContract,
    StorageWithRetention,
    TemplateEnqueueContract,
)
from tests.contract.urls import unreachable_postgres_url, with_option


class TestPostgresStorage(StorageContract, TemplateEnqueueContract):
    @pytest.fixture
    def storage(self, postgres_clean_url: str) -> Iterator[SQLStorage]:
        storage = SQLStorage.from_url(postgres_clean_url)
        yield storage
        storage.close()

    @pytest.fixture
    def storage_with_retention(self, postgres_clean_url: str) -> Iterator[StorageWithRetention]:
        built: list[SQLStorage] = []

        def build(retention: str) -> SQLStorage:
            built.append(
                SQLStorage.from_url(with_option(postgres_clean_url, "retention", retention))
            )
            return built[-1]

        yield build
        for storage in built:
            storage.close()

    @pytest.fixture
    def unreachable_storage(self) -> Iterator[SQLStorage]:
        storage = SQLStorage.from_url(unreachable_postgres_url(UNREACHABLE_PASSWORD))
        yield storage
        storage.close()
