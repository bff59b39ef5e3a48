"""Redis-specific behaviour: push wake-ups through BLPOP, and the server's clock."""

from __future__ import annotations

import threading
import time

import redis

from backends.redis import RedisStorage
from queue_core.records.jobs import JobState, NewJob
from queue_core.storage.abilities import SupportsWakeup
from queue_core.testing import LEASE


def _job(job_id: str, **kw: object) -> NewJob:
    return NewJob(id=job_id, task_name="t", queue="q", payload=b"{}", **kw)  # type: ignore[arg-type]


def test_idle_wait_is_woken_by_an_enqueue_from_another_client(redis_url: str) -> None:
    waiter = RedisStorage.from_url(redis_url)
    producer = RedisStorage.from_url(redis_url)
    try:
        assert isinstance(waiter, SupportsWakeup)
        result: list[bool] = []
        t = threading.Thread(target=lambda: result.append(waiter.wait_for_jobs(["q"], 30.0)))
        t.start()
        time.sleep(0.2)  # let the waiter block first
        producer.enqueue([_job("a")])
        t.join(10)
        assert result == [True]
        assert [c.id for c in waiter.claim("w", ["q"], 1, LEASE)] == ["a"]
    finally:
        waiter.close()
        producer.close()


def test_wait_times_out_without_jobs_and_tokens_stay_bounded(
    storage: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    assert storage.wait_for_jobs(["q"], 0.05) is False
    storage.enqueue([_job(f"j{i}") for i in range(50)])
    assert raw.llen(storage.keys.wake("q")) <= 8
    assert storage.wait_for_jobs(["q"], 5.0) is True  # ready now: no blocking


def test_wait_ends_when_a_delayed_job_becomes_due(storage: RedisStorage) -> None:
    storage.enqueue([_job("later", delay_ms=150)])
    # no token is pushed for a delayed job: only the due time can end this wait with True
    assert storage.wait_for_jobs(["q"], 10.0) is True


def test_now_none_uses_the_server_clock(storage: RedisStorage, raw: redis.Redis[bytes]) -> None:
    sec, usec = raw.time()
    server_ms = sec * 1000 + usec // 1000
    storage.enqueue([_job("a", timeout_ms=5_000)])
    (c,) = storage.claim("w", ["q"], 1, LEASE)
    assert abs(c.started_at - server_ms) < 5_000
    assert c.lease_expires_at == c.started_at + LEASE
    assert c.deadline == c.started_at + 5_000
    rec = storage.get_job("a")
    assert rec is not None and rec.state is JobState.RUNNING
    assert rec.enqueued_at <= c.started_at
