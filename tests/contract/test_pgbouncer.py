"""The published contract suite on PostgreSQL through PgBouncer (transaction pooling).

The storage URL carries ``?pgbouncer=true`` (no server-side prepared statements, no
session SET, polling instead of LISTEN). Same cases and pass count as test_postgres.py;
tables truncated before every test.
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


class TestPgBouncerStorage(StorageContract, TemplateEnqueueContract):
    @pytest.fixture
    def storage(self, pgbouncer_clean_url: str) -> Iterator[SQLStorage]:
        storage = SQLStorage.from_url(pgbouncer_clean_url)
        yield storage
        storage.close()

    @pytest.fixture
    def storage_with_retention(self, pgbouncer_clean_url: str) -> Iterator[StorageWithRetention]:
        built: list[SQLStorage] = []

        def build(retention: str) -> SQLStorage:
            built.append(
                SQLStorage.from_url(with_option(pgbouncer_clean_url, "retention", retention))
            )
            return built[-1]

        yield build
        for storage in built:
            storage.close()

    @pytest.fixture
    def unreachable_storage(self) -> Iterator[SQLStorage]:
        storage = SQLStorage.from_url(
            unreachable_postgres_url(UNREACHABLE_PASSWORD, "?pgbouncer=true")
        )
        yield storage
        storage.close()
