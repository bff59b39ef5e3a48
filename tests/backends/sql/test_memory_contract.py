"""The published contract suite on an in-memory SQLite database (``sqlite://``): one
connection shared by every thread of the process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.sql import SQLStorage
from queue_core.testing import StorageContract


class TestInMemorySQLiteStorage(StorageContract):
    @pytest.fixture
    def storage(self) -> Iterator[SQLStorage]:
        storage = SQLStorage.from_url("sqlite://")
        yield storage
        storage.close()
