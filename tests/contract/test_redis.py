"""The published contract suite on the Redis backend, against a real redis-server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.redis import RedisStorage
from queue_core.testing import (
    UNREACHABLE_PASSWORD,
    StorageContract,
    StorageWithRetention,
    TemplateEnqueueContract,
    WaitClaimContract,
)
from tests.contract.urls import with_option
from tests.servers.ports import free_port


class TestRedisStorage(StorageContract, WaitClaimContract, TemplateEnqueueContract):
    @pytest.fixture
    def storage(self, redis_url: str) -> Iterator[RedisStorage]:
        s = RedisStorage.from_url(redis_url)
        try:
            yield s
        finally:
            s.close()

    @pytest.fixture
    def storage_with_retention(self, redis_url: str) -> Iterator[StorageWithRetention]:
        built: list[RedisStorage] = []

        def build(retention: str) -> RedisStorage:
            built.append(RedisStorage.from_url(with_option(redis_url, "retention", retention)))
            return built[-1]

        yield build
        for storage in built:
            storage.close()

    @pytest.fixture
    def unreachable_storage(self) -> Iterator[RedisStorage]:
        s = RedisStorage.from_url(f"redis://:{UNREACHABLE_PASSWORD}@127.0.0.1:{free_port()}/0")
        try:
            yield s
        finally:
            s.close()
