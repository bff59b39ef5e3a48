"""Pauses on Redis (backends/redis/pauses.py, lua/_paused.lua): where the paused jobs go,
and what an idle worker's wait makes of them."""

from __future__ import annotations

import redis

from backends.redis import RedisStorage
from queue_core.records.control import PauseKind
from queue_core.records.jobs import NewJob
from queue_core.testing import LEASE, T0


def _job(job_id: str, task: str = "t", queue: str = "q") -> NewJob:
    return NewJob(id=job_id, task_name=task, queue=queue, payload=b"{}")


def test_a_paused_tasks_job_is_moved_aside_once_and_back_at_resume(
    storage: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    storage.enqueue([_job("held", task="slow"), _job("plain")], now=T0)
    storage.pause(PauseKind.TASK, "slow", now=T0)
    assert [c.id for c in storage.claim("w", ["q"], 5, LEASE, now=T0 + 1)] == ["plain"]
    held = f"{storage.key_prefix}:held:task:slow"
    ready = f"{storage.key_prefix}:r:q:0"
    assert [m[16:] for m in raw.zrange(held, 0, -1)] == [b"held"]
    assert raw.zcard(ready) == 0  # later claims do not meet it again
    assert storage.count_pending(["q"], 0, now=T0 + 2) == 1  # the running one
    assert storage.resume(PauseKind.TASK, "slow") is True
    assert not raw.exists(held)
    assert [c.id for c in storage.claim("w", ["q"], 5, LEASE, now=T0 + 3)] == ["held"]


def test_an_idle_wait_does_not_count_a_paused_queues_ready_job(storage: RedisStorage) -> None:
    storage.enqueue([_job("a", queue="pq")])
    assert storage.wait_for_jobs(["pq"], 0.05) is True
    storage.pause(PauseKind.QUEUE, "pq")
    storage.wait_for_jobs(["pq"], 0.05)  # may take the enqueue's token (a spurious wake-up)
    assert storage.wait_for_jobs(["pq"], 0.05) is False  # the job is not ready for it
    assert storage.count_pending(["pq"], 0) == 0
    storage.resume(PauseKind.QUEUE, "pq")
    assert storage.wait_for_jobs(["pq"], 0.05) is True


def test_a_pause_written_by_one_storage_holds_for_another_at_once(redis_url: str) -> None:
    admin, worker = RedisStorage.from_url(redis_url), RedisStorage.from_url(redis_url)
    try:
        worker.enqueue([_job("a", queue="pq2")], now=T0)
        admin_view = RedisStorage(admin.store.client, prefix=worker.prefix)
        assert admin_view.pause(PauseKind.QUEUE, "pq2", now=T0) is True
        assert worker.claim("w", ["pq2"], 1, LEASE, now=T0 + 1) == []
        assert [p.name for p in worker.list_paused()] == ["pq2"]
    finally:
        admin.close()
        worker.close()
