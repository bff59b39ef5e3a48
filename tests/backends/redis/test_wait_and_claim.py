"""Redis ``wait_and_claim``: the BLPOP and the claim pipelined on one connection
(backends/redis/claiming.py)."""

from __future__ import annotations

import threading
import time

import redis

from backends.redis import RedisStorage
from queue_core.records.errors import StorageUnavailable
from queue_core.records.jobs import ClaimedJob, NewJob
from queue_core.storage.abilities import SupportsWaitClaim
from queue_core.testing import LEASE


def _job(job_id: str, **kw: object) -> NewJob:
    return NewJob(id=job_id, task_name="t", queue="q", payload=b"{}", **kw)  # type: ignore[arg-type]


def test_claims_a_job_another_client_enqueues_after_the_scripts_were_flushed(
    redis_url: str, raw: redis.Redis[bytes]
) -> None:
    waiter = RedisStorage.from_url(redis_url)
    producer = RedisStorage.from_url(redis_url)
    try:
        assert isinstance(waiter, SupportsWaitClaim)
        raw.script_flush()  # the pipelined EVALSHA meets NOSCRIPT: loaded and run again
        got: list[ClaimedJob] = []
        t = threading.Thread(
            target=lambda: got.extend(waiter.wait_and_claim("w", ["q"], 4, LEASE, 30.0))
        )
        t.start()
        time.sleep(0.2)  # let the waiter block first
        producer.enqueue([_job("a")])
        t.join(10)
        assert [(c.id, c.attempt, c.lease_expires_at - c.started_at) for c in got] == [
            ("a", 1, LEASE)
        ]
        assert waiter.claim("w", ["q"], 4, LEASE) == []
    finally:
        waiter.close()
        producer.close()


def test_claims_a_delayed_job_when_it_falls_due(storage: RedisStorage) -> None:
    storage.enqueue([_job("later", delay_ms=150)])
    # no token is pushed for a delayed job: the wait must end at its due time
    assert [c.id for c in storage.wait_and_claim("w", ["q"], 1, LEASE, 10.0)] == ["later"]


def test_a_wait_under_a_millisecond_does_not_block(storage: RedisStorage) -> None:
    """Redis counts a BLPOP timeout in milliseconds, 0 meaning forever: a shorter wait
    ends at once (claiming what is ready) instead of blocking."""
    storage.enqueue([_job("later", delay_ms=60_000)])
    begun = time.monotonic()
    for _ in range(3):
        assert storage.wait_and_claim("w", ["q"], 1, LEASE, 0.0004) == []
        assert storage.wait_for_jobs(["q"], 0.0004) is False
    assert time.monotonic() - begun < 5.0


def test_the_connection_is_reused_cleanly_after_timed_out_waits(storage: RedisStorage) -> None:
    for _ in range(3):  # both replies of each timed-out pair are read off the connection
        assert storage.wait_and_claim("w", ["q"], 1, LEASE, 0.01) == []
    storage.enqueue([_job("a")])
    assert [c.id for c in storage.wait_and_claim("w", ["q"], 1, LEASE, 5.0)] == ["a"]
    assert storage.wait_and_claim("w", ["q"], 1, LEASE, 0.01) == []


def test_a_wait_whose_connection_is_killed_fails_and_the_next_one_claims(
    storage: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            storage.wait_and_claim("w", ["q"], 1, LEASE, 8.0)
        except StorageUnavailable as exc:
            errors.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    limit = time.monotonic() + 10
    while not (blocked := [c for c in raw.client_list() if c.get("cmd") == "blpop"]):
        assert time.monotonic() < limit, "the wait never blocked"
        time.sleep(0.005)
    raw.client_kill_filter(_id=blocked[0]["id"])
    t.join(10)
    assert len(errors) == 1  # the connection (a reply unread) was dropped, not pooled
    storage.enqueue([_job("a")])
    assert [c.id for c in storage.wait_and_claim("w", ["q"], 1, LEASE, 5.0)] == ["a"]


def test_an_interrupt_while_reading_the_due_time_claims_without_blocking(
    storage: RedisStorage,
) -> None:
    """``interrupt_waits`` during the ``next_ready`` read that precedes the ``BLPOP``
    (a stop that comes just as the worker begins to wait): the call claims at once
    instead of blocking (the unblock, sent from its own thread, may reach the server
    before the ``BLPOP`` does)."""
    storage.enqueue([NewJob(id="a", task_name="t", queue="other", payload=b"{}")])
    claiming = storage.claiming
    read_due = claiming._due_ms

    def due_ms(*args: object, **kw: object) -> int:
        claiming.interrupt_waits()
        return read_due(*args, **kw)  # type: ignore[arg-type]

    claiming._due_ms = due_ms  # type: ignore[method-assign]
    begun = time.monotonic()
    assert storage.wait_and_claim("w", ["q"], 4, LEASE, 5.0) == []  # "a" is elsewhere
    assert time.monotonic() - begun < 2.5, "the call blocked"
