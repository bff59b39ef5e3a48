"""The published contract suite on the Redis backend, against a real redis-server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.redis import RedisStorage
from queue_core.testing import (
    StorageContract,
    StorageWithRetention,
    TemplateEnqueueContract,
    WaitClaimContract,
)
from tests.contract.urls import with_option


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
