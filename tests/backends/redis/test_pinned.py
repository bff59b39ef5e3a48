"""The hot scripts' pinned connection (backends/redis/pinned.py): one per thread, a fresh
one after a fork, the retry policy kept, a failed connection given back."""

from __future__ import annotations

import os
import threading

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from backends.redis import RedisStorage
from queue_core.records.errors import StorageUnavailable
from queue_core.records.jobs import JobState, NewJob
from queue_core.testing import T0


def _job(job_id: str) -> NewJob:
    return NewJob(id=job_id, task_name="t", queue="q", payload=b"{}")


def _kill_others(raw: redis.Redis[bytes]) -> int:
    return int(raw.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"))


def _with_retries(url: str, retries: int) -> RedisStorage:
    """A storage whose connections retry a failed call ``retries`` times, no backoff."""
    base, _, prefix = url.partition("?prefix=")
    client = redis.Redis.from_url(base, retry=Retry(NoBackoff(), retries))
    return RedisStorage(client, prefix=prefix or "qc")


def test_a_dropped_connection_is_retried_by_the_client_policy(
    redis_url: str, raw: redis.Redis[bytes]
) -> None:
    s = _with_retries(redis_url, 1)
    try:
        assert s.enqueue([_job("a")]) == [JobState.QUEUED]
        pinned = s.store.pinned.conn
        assert _kill_others(raw) >= 1  # the storage's pinned connection among them
        assert s.enqueue([_job("b")]) == [JobState.QUEUED]  # no error reaches the caller
        assert s.store.pinned.conn is pinned  # reconnected in place, still pinned
        assert sorted(j.id for j in s.list_jobs(limit=10)) == ["a", "b"]
    finally:
        s.close()


def test_without_retries_the_drop_is_unavailable_and_the_next_call_reconnects(
    redis_url: str, raw: redis.Redis[bytes]
) -> None:
    s = _with_retries(redis_url, 0)
    try:
        assert s.enqueue([_job("a")], now=T0) == [JobState.QUEUED]
        assert _kill_others(raw) >= 1
        with pytest.raises(StorageUnavailable) as info:
            s.enqueue([_job("b")], now=T0)
        assert isinstance(info.value.__cause__, redis.ConnectionError)
        assert s.store.pinned.conn is None  # given back to the pool
        assert s.enqueue([_job("c")], now=T0) == [JobState.QUEUED]
        assert sorted(j.id for j in s.list_jobs(limit=10)) == ["a", "c"]
    finally:
        s.close()


def test_each_thread_pins_its_own_connection(storage: RedisStorage) -> None:
    conns: dict[int, object] = {}
    barrier = threading.Barrier(3)

    def produce(k: int) -> None:
        barrier.wait()
        for i in range(50):
            storage.enqueue([_job(f"{k}-{i}")])
        conns[k] = storage.store.pinned.conn

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in conns.values()}) == 3
    assert len(storage.list_jobs(limit=500)) == 150


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_checks_out_its_own_connection(storage: RedisStorage) -> None:
    assert storage.enqueue([_job("parent-1")]) == [JobState.QUEUED]
    inherited = storage.store.pinned.conn
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if it used a connection of its own
        code = 1
        try:
            ok = storage.enqueue([_job("child")]) == [JobState.QUEUED]
            code = 0 if ok and storage.store.pinned.conn is not inherited else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert storage.store.pinned.conn is inherited
    assert storage.enqueue([_job("parent-2")]) == [JobState.QUEUED]
    assert sorted(j.id for j in storage.list_jobs(limit=10)) == ["child", "parent-1", "parent-2"]
