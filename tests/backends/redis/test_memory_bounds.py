"""Nothing grows without bound: finished jobs leave no keys behind (SPEC §8)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from backends.redis import RedisStorage
from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    Decision,
    JobState,
    NewJob,
    Outcome,
)
from queue_core.testing import DAY, LEASE, T0
from tests.servers.redis import RedisServer

pytestmark = pytest.mark.soak  # 20,000 jobs per test: `nox -s soak`

DB = 3  # a database of its own: these tests count every key in it
JOBS = 20_000
BATCH = 500


@pytest.fixture
def db(redis_server: RedisServer) -> Iterator[redis.Redis[bytes]]:
    client = redis.Redis.from_url(redis_server.url(DB))
    client.flushdb()
    try:
        yield client
    finally:
        client.flushdb()
        client.close()


def _run_jobs(s: RedisStorage, count: int, now: int) -> None:
    """Enqueue, claim and complete ``count`` jobs through the storage API."""
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        jobs = [
            NewJob(
                id=f"job-{start + i}",
                task_name="t",
                queue="q",
                payload=b"{}",
                timeout_ms=60_000,
                schedule_to_start_ms=3_600_000,
                concurrency_key="k",
                concurrency_limit=10_000,
            )
            for i in range(size)
        ]
        assert s.enqueue(jobs, now=now) == [JobState.QUEUED] * size
        claimed = s.claim("w", ["q"], size, LEASE, now=now)
        assert len(claimed) == size
        ends = [
            AttemptEnd(
                ref=c.ref,
                outcome=Outcome.SUCCEEDED,
                decision=Decision(action=Action.COMPLETE),
                result=b"1",
            )
            for c in claimed
        ]
        assert s.finish(ends, now=now) == [True] * size


def _prune_all(s: RedisStorage, now: int) -> int:
    pruned = 0
    while n := s.prune(now=now, limit=5_000):
        pruned += n
    return pruned


def test_retention_zero_leaves_no_keys_after_a_prune(
    redis_server: RedisServer, db: redis.Redis[bytes]
) -> None:
    s = RedisStorage.from_url(redis_server.url(DB, retention="0"))
    try:
        # creates the few fixed keys (sequence, wake-up list, the retention stream and its
        # sequence) and the minute's throughput counters (one hash per minute, expiring
        # after the hour: test_throughput_keys.py)
        _run_jobs(s, 1, T0)
        assert s.prune(now=T0) == 1
        baseline = db.dbsize()
        assert baseline <= 5
        _run_jobs(s, JOBS, T0)
        assert s.get_job("job-7") is not None  # kept until the next prune
        assert _prune_all(s, T0) == JOBS
        assert db.dbsize() == baseline
        assert s.get_job("job-7") is None
        assert s.stats(now=T0) == []
    finally:
        s.close()


def test_prune_returns_to_baseline(redis_server: RedisServer, db: redis.Redis[bytes]) -> None:
    s = RedisStorage.from_url(redis_server.url(DB, retention="1d"))
    try:
        _run_jobs(s, 1, T0)
        assert s.prune(now=T0 + DAY) == 1
        baseline = db.dbsize()
        _run_jobs(s, JOBS, T0)
        assert db.dbsize() > baseline + JOBS  # kept for the retention period
        assert s.prune(now=T0 + DAY - 1) == 0
        assert _prune_all(s, T0 + DAY) == JOBS
        assert db.dbsize() == baseline
        assert s.stats(now=T0 + DAY) == []
    finally:
        s.close()


def test_dead_letters_stay_until_purged(redis_server: RedisServer, db: redis.Redis[bytes]) -> None:
    s = RedisStorage.from_url(redis_server.url(DB, retention="0"))
    try:
        _run_jobs(s, 1, T0)
        assert s.prune(now=T0) == 1
        baseline = db.dbsize()
        s.enqueue([NewJob(id="d1", task_name="t", queue="q", payload=b"{}")], now=T0)
        (c,) = s.claim("w", ["q"], 1, LEASE, now=T0)
        assert s.reap(now=T0 + LEASE)[0].state is JobState.DEAD
        assert s.prune(now=T0 + LEASE) == 1
        assert s.get_job("d1") is None
        assert [d.job_id for d in s.list_dead()] == ["d1"]
        assert s.purge_dead() == 1
        # the dead-letter id counter is the one key a first dead letter adds
        assert db.dbsize() == baseline + 1
    finally:
        s.close()
