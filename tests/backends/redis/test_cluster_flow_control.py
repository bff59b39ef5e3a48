"""Flow control on a Redis Cluster's homes (``backends/redis/homes.py``): a queue's plain
jobs live in the queue's own slot while the pauses live in the shared home, so a claim
there gets the pauses from the client (``lua/_paused_argv.lua``), held jobs stay in their
home and ``resume`` sweeps every home; a debounce key spans queues, so its jobs go to the
shared home."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.redis import RedisStorage
from backends.redis.pauses import pause_arg
from queue_core.records.control import PauseKind, ProgressUpdate
from queue_core.records.jobs import NewJob
from queue_core.testing.fixtures import LEASE, T0, new_job

SEC = 1000


@pytest.fixture
def storage(redis_cluster_url: str) -> Iterator[RedisStorage]:
    s = RedisStorage.from_url(redis_cluster_url)
    try:
        yield s
    finally:
        s.close()


def _held(s: RedisStorage, queue: str, field: str) -> list[bytes]:
    home = s.store.homes.of_queue(queue)
    return list(s.store.client.zrange(f"{home}:held:{field}", 0, -1))


def test_a_paused_task_is_held_in_its_queue_home_and_resume_puts_it_back(
    storage: RedisStorage,
) -> None:
    job = new_job(queue="qa", task_name="t.paused")
    other = new_job(queue="qa", task_name="t.free")
    storage.enqueue([job, other], now=T0)
    assert storage.store.homes.find([job.id]) == [storage.store.homes.of_queue("qa")]
    assert storage.pause(PauseKind.TASK, "t.paused", now=T0)
    got = storage.claim("w", ["qa"], 5, LEASE, now=T0 + SEC)
    assert [g.id for g in got] == [other.id]
    assert len(_held(storage, "qa", "task:t.paused")) == 1
    assert storage.count_pending(["qa"], 0, now=T0 + SEC) == 1  # the running one
    assert storage.resume(PauseKind.TASK, "t.paused")
    assert _held(storage, "qa", "task:t.paused") == []
    assert [g.id for g in storage.claim("w", ["qa"], 5, LEASE, now=T0 + 2 * SEC)] == [job.id]


def test_a_paused_queue_in_its_own_home_is_neither_claimed_nor_counted_nor_waited_for(
    storage: RedisStorage,
) -> None:
    storage.enqueue([new_job(queue="qa"), new_job(queue="qb")], now=T0)
    storage.pause(PauseKind.QUEUE, "qa", now=T0)
    assert storage.count_pending(["qa"], 0, now=T0 + SEC) == 0
    assert not storage.wait_for_jobs(["qa"], 0.0)
    assert [g.queue for g in storage.claim("w", ["qa", "qb"], 5, LEASE, now=T0 + SEC)] == ["qb"]
    storage.resume(PauseKind.QUEUE, "qa")
    assert storage.wait_for_jobs(["qa"], 0.0)
    assert [g.queue for g in storage.claim("w", ["qa"], 5, LEASE, now=T0 + SEC)] == ["qa"]


def test_a_claim_that_read_the_pauses_before_a_resume_moves_nothing_aside(
    storage: RedisStorage,
) -> None:
    """The race the pause version closes: a claim reads the pauses, a resume sweeps the
    queue's home, then the claim's script runs there with what it read."""
    job = new_job(queue="qa", task_name="t.paused")
    storage.enqueue([job], now=T0)
    storage.pause(PauseKind.TASK, "t.paused", now=T0)
    home = storage.store.homes.of_queue("qa")
    stale = pause_arg(storage.store, home)
    assert "task:t.paused" in stale
    storage.resume(PauseKind.TASK, "t.paused")
    claiming = storage.claiming
    args = claiming._claim_args("w", ["qa"], 5, LEASE, T0 + SEC, home, stale)
    assert storage.store.call(claiming._claim, args) == []  # not claimed: it read a pause
    assert _held(storage, "qa", "task:t.paused") == []  # nor moved aside for good
    assert [g.id for g in storage.claim("w", ["qa"], 5, LEASE, now=T0 + SEC)] == [job.id]


def test_a_debounce_key_merges_the_calls_of_two_queues(storage: RedisStorage) -> None:
    def call(queue: str) -> NewJob:
        return new_job(queue=queue, debounce_key="d", debounce_ms=SEC, debounce_max_ms=10 * SEC)

    first = storage.enqueue_debounced([call("qa")], now=T0)[0]
    second = storage.enqueue_debounced([call("qb")], now=T0 + 1)[0]
    assert not first.existing and second.existing and second.job_id == first.job_id
    assert storage.store.homes.find([first.job_id]) == [storage.store.homes.shared]


def test_progress_of_a_job_in_its_queue_home(storage: RedisStorage) -> None:
    storage.enqueue([new_job(queue="qa")], now=T0)
    (got,) = storage.claim("w", ["qa"], 1, LEASE, now=T0 + SEC)
    assert "@" in got.lease_token  # issued by qa's own home
    assert storage.set_progress(
        got.ref, ProgressUpdate(fraction=0.5, message="half"), now=T0 + 2 * SEC
    )
    p = storage.get_progress(got.id)
    assert p is not None and (p.fraction, p.message) == (0.5, "half")
