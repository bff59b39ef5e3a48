"""Pick-up latency on every backend: each claimed job says when it became due
(``ClaimedJob.run_at``), so the worker's pick-up histogram is observed for every attempt
(Redis returned no ``run_at`` before, and its histogram stayed empty)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from contrib.worker_metrics import WorkerMetrics
from queue_core import JobState, Queue
from queue_core.testing import LEASE, SEC, T0, enqueue_one
from tests.integration._backends import backend_url

BACKENDS = ["memory", "sqlite", "postgres", "redis", "redis_cluster", "sqs"]


@pytest.fixture(params=BACKENDS)
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Queue]:
    q = Queue(backend_url(request, tmp_path, request.param))
    q.migrate()
    yield q
    q.close()


def test_every_claimed_job_reports_when_it_became_due(queue: Queue) -> None:
    storage = queue.storage()
    delayed = enqueue_one(storage, queue="pickup", delay_ms=10 * SEC)
    at = enqueue_one(storage, queue="pickup", run_at=T0 + 5 * SEC)
    got = storage.claim("w", ["pickup"], 5, LEASE, now=T0 + 12 * SEC)
    assert {c.id: c.run_at for c in got} == {delayed: T0 + 10 * SEC, at: T0 + 5 * SEC}


def test_the_pickup_histogram_counts_every_attempt(queue: Queue) -> None:
    @queue.task(name="pickup.noop", queue="pickup")
    def noop(i: int) -> int:
        return i

    handles = [noop.delay(i) for i in range(6)]
    metrics = WorkerMetrics()
    queue.run_worker(
        queues=["pickup"], burst=True, install_signal_handlers=False, listeners=[metrics]
    )
    assert all(h.status() is JobState.SUCCEEDED for h in handles)
    counts = [
        s.value
        for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for s in f.samples
        if s.name == "queue_core_worker_pickup_latency_seconds_count"
    ]
    assert sum(counts) == 6
