"""The published contract suite on the Redis backend, against a real redis-server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.redis import RedisStorage
from queue_core.testing import StorageContract


class TestRedisStorage(StorageContract):
    @pytest.fixture
    def storage(self, redis_url: str) -> Iterator[RedisStorage]:
        s = RedisStorage.from_url(redis_url)
        try:
            yield s
        finally:
            s.close()
