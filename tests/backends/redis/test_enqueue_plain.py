"""The lean enqueue scripts (``enqueue_plain.lua``, and ``enqueue_one.lua`` for a batch
of one job) store what ``enqueue.lua`` stores.

Plain jobs (no unique, rate or concurrency key, no replay, heartbeat, schedule-to-start
or per-call options) go through a script with 10 arguments per job; these tests store
the same jobs through both scripts and compare every key the storage writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

import backends.redis.enqueue as enqueue
from backends.redis import RedisStorage
from queue_core.records.errors import StorageError
from queue_core.records.jobs import JobState, NewJob
from queue_core.testing import LEASE
from tests.servers.redis import RedisServer

NOW = 1_700_000_000_000


def _jobs() -> list[NewJob]:
    return [
        NewJob(id="a", task_name="t", queue="q", payload=b'{"x":1}', timeout_ms=300_000),
        NewJob(
            id="b",
            task_name="t",
            queue="q",
            payload=b"{}",
            priority=5,
            max_attempts=3,
            lost_delay_ms=917,
        ),
        NewJob(id="c", task_name="u", queue="r", payload=b"{}", run_at=NOW + 5_000, delay_ms=100),
    ]


def _dump(raw: redis.Redis[bytes], prefix: str) -> dict[str, object]:
    """Every key under ``prefix`` (minus the prefix) with its content."""
    out: dict[str, object] = {}
    for key in raw.scan_iter(f"{prefix}:*"):
        name = key.decode()[len(prefix) :]
        kind = raw.type(key).decode()
        if kind == "hash":
            out[name] = raw.hgetall(key)
        elif kind == "zset":
            out[name] = raw.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            out[name] = raw.lrange(key, 0, -1)
        elif kind == "set":
            out[name] = raw.smembers(key)
        else:
            out[name] = raw.get(key)
    return out


@pytest.fixture
def pair(redis_server: RedisServer) -> Iterator[tuple[RedisStorage, RedisStorage]]:
    """Two storages with key prefixes of their own on the session server."""
    tag = uuid.uuid4().hex[:12]
    plain = RedisStorage.from_url(redis_server.url(prefix=f"p{tag}"))
    full = RedisStorage.from_url(redis_server.url(prefix=f"f{tag}"))
    try:
        yield plain, full
    finally:
        plain.close()
        full.close()


def test_plain_jobs_are_stored_as_the_full_script_stores_them(
    pair: tuple[RedisStorage, RedisStorage],
    raw: redis.Redis[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain, full = pair
    jobs = _jobs()
    assert all(enqueue.is_plain(j) for j in jobs)
    assert plain.enqueue(jobs, now=NOW) == [JobState.QUEUED] * 3
    assert plain.enqueuing._plain is not None  # the lean script ran
    monkeypatch.setattr(enqueue, "is_plain", lambda j: False)
    assert full.enqueue(jobs, now=NOW) == [JobState.QUEUED] * 3
    assert full.enqueuing._plain is None
    assert _dump(raw, plain.key_prefix) == _dump(raw, full.key_prefix)
    claimed = plain.claim("w", ["q"], 5, LEASE, now=NOW)
    assert [c.id for c in claimed] == ["b", "a"]  # priority first


def test_a_duplicate_id_stores_nothing(pair: tuple[RedisStorage, RedisStorage]) -> None:
    plain, _ = pair
    plain.enqueue([_jobs()[0]], now=NOW)
    with pytest.raises(StorageError, match="'a' already exists"):
        plain.enqueue(_jobs()[1:] + _jobs()[:1], now=NOW)
    assert plain.get_job("b") is None


@pytest.mark.parametrize(
    "field",
    [
        {"unique_key": "k"},
        {"rate_key": "r", "rate_limit": 1, "rate_window_ms": 1000},
        {"concurrency_key": "c", "concurrency_limit": 1},
        {"heartbeat_ms": 1000},
        {"schedule_to_start_ms": 1000},
        {"options": "{}"},
        {"replay_of": "d"},
    ],
)
def test_a_job_with_any_other_field_is_not_plain(field: dict[str, object]) -> None:
    job = NewJob(id="x", task_name="t", queue="q", payload=b"{}", **field)  # type: ignore[arg-type]
    assert not enqueue.is_plain(job)


def test_a_large_batch_matches_too(
    pair: tuple[RedisStorage, RedisStorage],
    raw: redis.Redis[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More jobs than one ZADD call takes (the sorted-set writes go in slices)."""
    plain, full = pair
    jobs = [
        NewJob(id=f"j{i:04d}", task_name="t", queue=f"q{i % 2}", payload=b"{}", priority=i % 3)
        for i in range(1200)
    ]
    plain.enqueue(jobs, now=NOW)
    plain.enqueue([NewJob(id="after", task_name="t", queue="q0", payload=b"{}")], now=NOW)
    monkeypatch.setattr(enqueue, "is_plain", lambda j: False)
    full.enqueue(jobs, now=NOW)
    full.enqueue([NewJob(id="after", task_name="t", queue="q0", payload=b"{}")], now=NOW)
    assert _dump(raw, plain.key_prefix) == _dump(raw, full.key_prefix)
    assert plain.count_pending(["q0", "q1"], 0, now=NOW) == 1201
    claimed = plain.claim("w", ["q0"], 3, LEASE, now=NOW)
    assert [c.id for c in claimed] == ["j0002", "j0008", "j0014"]  # priority 2, then order


@pytest.mark.parametrize("delay_ms", [0, 60_000])
def test_single_jobs_are_stored_as_the_batch_scripts_store_them(
    pair: tuple[RedisStorage, RedisStorage],
    redis_server: RedisServer,
    raw: redis.Redis[bytes],
    monkeypatch: pytest.MonkeyPatch,
    delay_ms: int,
) -> None:
    """One job per call through ``enqueue_one.lua``, through ``enqueue_plain.lua`` and
    through ``enqueue.lua``: every key alike (wake-up tokens, capped at 8, included), the
    same duplicate refusal."""
    one, batch = pair
    # enqueue_plain.lua for one job too
    batch.enqueuing._one = batch.enqueuing._plain = batch.store.script("enqueue_plain")
    more = [
        NewJob(id=f"n{i}", task_name="t", queue="q", payload=b"{}", delay_ms=delay_ms)
        for i in range(10)
    ]
    jobs = _jobs() + more
    for job in jobs:
        assert one.enqueue([job], now=NOW) == [JobState.QUEUED]
    assert one.enqueuing._one is not None and one.enqueuing._plain is None
    for job in jobs:
        batch.enqueue([job], now=NOW)
    assert batch.enqueuing._one.sha == batch.enqueuing._plain.sha != one.enqueuing._one.sha
    assert _dump(raw, one.key_prefix) == _dump(raw, batch.key_prefix)
    full = RedisStorage.from_url(redis_server.url(prefix=f"x{uuid.uuid4().hex[:12]}"))
    try:
        monkeypatch.setattr(enqueue, "is_plain", lambda j: False)
        for job in jobs:
            full.enqueue([job], now=NOW)
        assert _dump(raw, full.key_prefix) == _dump(raw, one.key_prefix)
    finally:
        full.close()
    monkeypatch.undo()
    with pytest.raises(StorageError, match="'a' already exists"):
        one.enqueue([_jobs()[0]], now=NOW)
    assert one.stats(now=NOW) == batch.stats(now=NOW)
