"""Fixtures of the Redis-specific tests: a storage on the session server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from backends.redis import RedisStorage
from tests.servers.redis import RedisServer


@pytest.fixture
def storage(redis_url: str) -> Iterator[RedisStorage]:
    """A storage with a fresh prefix and the default retention."""
    s = RedisStorage.from_url(redis_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis[bytes]]:
    """A plain client on db 0 of the session server, to look at keys."""
    client = redis.Redis.from_url(redis_server.url())
    try:
        yield client
    finally:
        client.close()
