"""The published queue-core contract suite on ``shelf://``: what a backend author runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from shelf_queue import ShelfStorage

from queue_core.testing import StorageContract


class TestShelfStorage(StorageContract):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Iterator[ShelfStorage]:
        storage = ShelfStorage(tmp_path / "queue.json")  # fresh and empty for every test
        yield storage
        storage.close()

    @pytest.fixture
    def storage_with_retention(self, tmp_path: Path) -> Iterator[Callable[[str], ShelfStorage]]:
        built: list[ShelfStorage] = []

        def build(retention: str) -> ShelfStorage:
            path = tmp_path / f"retention-{len(built)}.json"
            built.append(ShelfStorage.from_url(f"shelf://{path}?retention={retention}"))
            return built[-1]

        yield build
        for storage in built:
            storage.close()

    @pytest.fixture
    def unreachable_storage(self, tmp_path: Path) -> Iterator[ShelfStorage]:
        """A file store has no server: its "down" is a directory that is not there (a
        volume not mounted yet). A server backend builds on a closed port instead."""
        storage = ShelfStorage.from_url(f"shelf://{tmp_path / 'not-mounted' / 'queue.json'}")
        yield storage
        storage.close()
