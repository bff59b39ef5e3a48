"""Connection loss and server restarts: library errors, scripts reloaded by themselves."""

from __future__ import annotations

import pytest
import redis

from backends.redis import RedisStorage
from queue_core.records.errors import StorageUnavailable
from queue_core.records.jobs import JobState, NewJob
from queue_core.testing import LEASE, T0
from tests.servers.redis import start_redis_server, stop_redis_server


def _job(job_id: str) -> NewJob:
    return NewJob(id=job_id, task_name="t", queue="q", payload=b"{}")


def test_script_cache_flush_is_survived(storage: RedisStorage, raw: redis.Redis[bytes]) -> None:
    assert storage.enqueue([_job("a")], now=T0) == [JobState.QUEUED]
    raw.script_flush()
    assert [c.id for c in storage.claim("w", ["q"], 1, LEASE, now=T0)] == ["a"]


def test_server_down_raises_unavailable_then_recovers_after_restart() -> None:
    server = start_redis_server()
    s = RedisStorage.from_url(server.url(prefix="restart"))
    try:
        assert s.enqueue([_job("a")], now=T0) == [JobState.QUEUED]
        stop_redis_server(server)
        with pytest.raises(StorageUnavailable) as info:
            s.claim("w", ["q"], 1, LEASE, now=T0)
        assert isinstance(info.value.__cause__, redis.ConnectionError)
        with pytest.raises(StorageUnavailable):
            s.get_job("a")
        # same port, empty memory and script cache (no persistence)
        server = start_redis_server(port=server.port)
        assert s.enqueue([_job("b")], now=T0) == [JobState.QUEUED]
        assert [c.id for c in s.claim("w", ["q"], 5, LEASE, now=T0)] == ["b"]
    finally:
        s.close()
        stop_redis_server(server)


def test_a_storage_built_while_the_server_is_down_works_once_it_is_up() -> None:
    """A worker started while Redis is down builds its storage and waits: calls are
    ``StorageUnavailable`` until the server is up, then the same storage works (its
    scripts load on the first call that reaches the server)."""
    server = start_redis_server()
    stop_redis_server(server)
    s = RedisStorage.from_url(server.url(prefix="built-down"))
    try:
        with pytest.raises(StorageUnavailable):
            s.enqueue([_job("a")], now=T0)
        with pytest.raises(StorageUnavailable):
            s.claim("w", ["q"], 1, LEASE, now=T0)
        server = start_redis_server(port=server.port)
        assert s.enqueue([_job("b")], now=T0) == [JobState.QUEUED]
        assert [c.id for c in s.claim("w", ["q"], 5, LEASE, now=T0)] == ["b"]
    finally:
        s.close()
        stop_redis_server(server)


def test_closed_storage_refuses_calls(storage: RedisStorage) -> None:
    storage.close()
    storage.close()
    with pytest.raises(Exception, match="closed"):
        storage.enqueue([_job("a")])
