"""Unique jobs and rate limits through the public API on every backend (the issue's
acceptance): concurrent enqueues with one key make one job; a worker draining a
rate-limited task never starts more than the rate in any window (attempt timestamps)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_core import JobState, Queue
from queue_core.records.jobs import ms_from_dt
from tests.integration._backends import backend_url

BACKENDS = ["memory", "sqlite", "postgres", "redis", "sqs"]


@pytest.fixture(params=BACKENDS)
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Queue]:
    q = Queue(backend_url(request, tmp_path, request.param))
    q.migrate()
    yield q
    q.close()


def test_50_concurrent_enqueues_with_one_key_from_5_threads_make_one_job(queue: Queue) -> None:
    @queue.task(name="welcome", unique_key=lambda user_id: f"welcome:{user_id}")
    def welcome(user_id: int) -> None:
        return None

    ids: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(5)

    def producer() -> None:
        barrier.wait(10)
        for _ in range(10):
            job_id = welcome.delay(42).id
            with lock:
                ids.append(job_id)

    threads = [threading.Thread(target=producer) for _ in range(5)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert len(ids) == 50
    assert len(set(ids)) == 1
    assert sum(s.ready for s in queue.stats()) == 1


def test_a_worker_never_starts_more_than_the_rate_in_any_window(queue: Queue) -> None:
    @queue.task(name="partner", rate_limit="10/s")
    def partner(i: int) -> int:
        return i

    handles = partner.map(range(25))
    queue.run_worker(burst=True, slots=4)
    assert all(h.status() is JobState.SUCCEEDED for h in handles)
    starts = sorted(ms_from_dt(h.attempts()[0].started_at) for h in handles)  # type: ignore[arg-type]
    for s in starts:
        assert sum(1 for x in starts if s - 1000 < x <= s) <= 10
    assert starts[-1] - starts[0] >= 2000  # 25 jobs at 10/s span three windows
