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


@pytest.mark.parametrize("built", ["while up", "while down"])
def test_server_down_raises_unavailable_then_recovers_after_restart(built: str) -> None:
    """Calls while Redis is down are ``StorageUnavailable``; once it is up again the same
    storage works (its scripts load again on the first call that reaches the server). A
    storage built while it is down (a worker started during the outage) waits the same."""
    server = start_redis_server()
    if built == "while down":
        stop_redis_server(server)
    s = RedisStorage.from_url(server.url(prefix="restart"))
    try:
        if built == "while up":
            assert s.enqueue([_job("a")], now=T0) == [JobState.QUEUED]
            stop_redis_server(server)
        with pytest.raises(StorageUnavailable) as info:
            s.claim("w", ["q"], 1, LEASE, now=T0)
        assert isinstance(info.value.__cause__, redis.ConnectionError)
        with pytest.raises(StorageUnavailable):
            s.enqueue([_job("a")], now=T0)
        # same port, empty memory and script cache (no persistence)
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
