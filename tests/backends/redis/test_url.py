"""``redis://`` URLs: backend options, redis-py options, masked credentials."""

from __future__ import annotations

import pytest

from backends.redis import RedisStorage
from queue_core.app.config import open_storage
from queue_core.records.errors import ConfigError, StorageUnavailable
from queue_core.rules.outcomes import DEFAULT_RETENTION_MS
from tests.servers.redis import RedisServer


def test_defaults_and_registry(redis_server: RedisServer) -> None:
    s = open_storage(redis_server.url(2))
    try:
        assert isinstance(s, RedisStorage)
        assert s.prefix == "qc"
        assert s.retention_ms == DEFAULT_RETENTION_MS
        assert s.stats() == [] or all(q.queue for q in s.stats())
    finally:
        s.close()


@pytest.mark.parametrize(
    ("text", "ms"),
    [("7d", 7 * 86_400_000), ("12h", 43_200_000), ("1h30m", 5_400_000), ("90", 90_000), ("0", 0)],
)
def test_retention_durations(redis_server: RedisServer, text: str, ms: int) -> None:
    s = RedisStorage.from_url(redis_server.url(prefix="p1", retention=text))
    try:
        assert (s.prefix, s.retention_ms) == ("p1", ms)
    finally:
        s.close()


@pytest.mark.parametrize("text", ["soon", "-5", "7x"])
def test_bad_retention_is_a_config_error(redis_server: RedisServer, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        RedisStorage.from_url(redis_server.url(retention=text))
    assert info.value.code == "invalid_duration"
    assert text in str(info.value)


def test_password_never_shows(redis_server: RedisServer) -> None:
    url = f"redis://user:s3cret-pw@127.0.0.1:{redis_server.port}/0?socket_timeout=2"
    s = RedisStorage.from_url(url)
    try:
        assert "s3cret-pw" not in repr(s)
        with pytest.raises(StorageUnavailable) as info:
            s.enqueue([])  # nothing to send: no round trip
            s.get_job("x")  # the server has no such user: refused
        assert "s3cret-pw" not in str(info.value)
    finally:
        s.close()


def test_rediss_scheme_selects_tls() -> None:
    s = RedisStorage.from_url("rediss://127.0.0.1:1/0?prefix=tls")
    try:
        assert "SSL" in s.store.client.connection_pool.connection_class.__name__
    finally:
        s.close()


def test_other_schemes_are_refused() -> None:
    with pytest.raises(ConfigError) as info:
        RedisStorage.from_url("memory://")
    assert info.value.code == "invalid_url"


@pytest.mark.parametrize("db", ["abc", "-1", "1x", "٣"])
def test_a_database_that_is_not_a_number_is_refused(db: str) -> None:
    """redis-py ignores such a path and uses database 0: another application's data."""
    with pytest.raises(ConfigError) as info:
        RedisStorage.from_url(f"redis://127.0.0.1:1/{db}?prefix=x")
    assert (info.value.code, info.value.value) == ("invalid_url", db)
    assert f"its database {db!r} is not a number" in str(info.value)


def test_a_numbered_database_is_used(redis_server: RedisServer) -> None:
    s = RedisStorage.from_url(redis_server.url(3))
    try:
        assert s.store.client.connection_pool.connection_kwargs["db"] == 3
    finally:
        s.close()
