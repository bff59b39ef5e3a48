"""The published contract suite on the reference backend, ``memory://``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.memory import MemoryStorage
from queue_core.storage import Storage, SupportsJobScan, SupportsWakeup
from queue_core.testing import StorageContract


class TestMemoryStorage(StorageContract):
    @pytest.fixture
    def storage(self) -> Iterator[Storage]:
        storage = MemoryStorage()
        yield storage
        storage.close()


class TestMemoryStorageFromUrl(StorageContract):
    """The same suite on a storage built through its URL, as users build it."""

    retention_ms = 2 * 3_600_000

    @pytest.fixture
    def storage(self) -> Iterator[Storage]:
        storage = MemoryStorage.from_url("memory://?retention=2h")
        yield storage
        storage.close()


def test_memory_storage_declares_its_abilities() -> None:
    storage = MemoryStorage()
    assert isinstance(storage, Storage)
    assert isinstance(storage, SupportsWakeup)
    assert isinstance(storage, SupportsJobScan)
