"""Live Prometheus metrics of a worker process (``queue-core worker --metrics-port P``).

:class:`WorkerMetrics` is a :class:`~queue_core.app.events.WorkerListener`: the worker tells
it of every attempt's start and end, and it keeps prometheus-client metrics in its own
registry. Unlike :mod:`contrib.metrics` (read from storage at scrape time, by any
process), these count what *this* worker did since it started::

    from contrib.worker_metrics import WorkerMetrics

    metrics = WorkerMetrics()
    metrics.serve(9100)                      # http://127.0.0.1:9100/metrics
    queue.run_worker(listeners=[metrics])

Families (labels ``queue`` and ``task``, at most ``max_tasks`` / ``max_queues`` distinct
values each; later ones are counted under ``other``):

``queue_core_worker_attempts_total{queue,task,outcome,reason}`` (counter)
    Attempt ends by outcome (``succeeded``, ``failed``, ``timed_out``, ``lost``,
    ``cancelled``) and reason (empty for none).
``queue_core_worker_attempt_duration_seconds{queue,task}`` (histogram)
    Claim to end of each attempt.
``queue_core_worker_pickup_latency_seconds{queue,task}`` (histogram)
    From when the job was due (``run_at``) to the attempt's start, by the storage's
    clock; observed on storages that report ``run_at`` (memory, SQLite, PostgreSQL, SQS).
``queue_core_worker_slots``, ``..._busy_slots``, ``..._stuck_slots`` (gauges)
    The worker's slots, those running an attempt that is not stuck, and the stuck ones
    (an attempt past its deadline that has not stopped), read at scrape time.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from contrib.metrics import OTHER
from queue_core import ConfigError
from queue_core.app.events import (
    AttemptEnded,
    AttemptStarted,
    WorkerListener,
    WorkerView,
)

__all__ = ["DURATION_BUCKETS", "WorkerMetrics"]

DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
"""Histogram buckets (seconds) of attempt duration and pick-up latency."""


class _Capped:
    """Label values as given until ``cap`` distinct ones were seen, then ``other``."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        if value in self.seen:
            return value
        with self._lock:
            if len(self.seen) < self.cap:
                self.seen.add(value)
                return value
        return OTHER


def _check_cap(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(
            f"invalid {name} {value!r}: expected an integer >= 1",
            code="invalid_option",
            field=name,
            value=value,
        )
    return value


class WorkerMetrics(WorkerListener):
    """Prometheus metrics of the workers it listens to (see the module docstring).

    Args:
        registry: where the metrics are registered (default: a new registry, so two
            instances never clash).
        max_tasks: distinct ``task`` label values before ``other``.
        max_queues: distinct ``queue`` label values before ``other``.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        max_tasks: int = 50,
        max_queues: int = 20,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._task = _Capped(_check_cap(max_tasks, "max_tasks"))
        self._queue = _Capped(_check_cap(max_queues, "max_queues"))
        reg = self.registry
        self.attempts = Counter(
            "queue_core_worker_attempts",
            "Attempt ends recorded by this worker",
            ["queue", "task", "outcome", "reason"],
            registry=reg,
        )
        self.duration = Histogram(
            "queue_core_worker_attempt_duration_seconds",
            "Claim to end of each attempt",
            ["queue", "task"],
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self.pickup = Histogram(
            "queue_core_worker_pickup_latency_seconds",
            "From when the job was due (run_at) to the attempt's start",
            ["queue", "task"],
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self._workers: list[WorkerView] = []
        for name, doc, key in (
            ("queue_core_worker_slots", "Slots of the worker", "slots"),
            ("queue_core_worker_busy_slots", "Slots running an attempt that is not stuck", "busy"),
            ("queue_core_worker_stuck_slots", "Slots held by a stuck attempt", "stuck"),
        ):
            Gauge(name, doc, registry=reg).set_function(self._reader(key))

    def _reader(self, key: str) -> Any:
        def read() -> float:
            total = 0
            for worker in list(self._workers):
                stats = worker.stats()
                if key == "busy":
                    total += stats["running"] - stats["stuck"]
                else:
                    total += stats[key]
            return float(total)

        return read

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` of this registry on ``addr:port`` (a daemon thread)."""
        start_http_server(port, addr=addr, registry=self.registry)

    def _labels(self, event: AttemptStarted | AttemptEnded) -> tuple[str, str]:
        return self._queue(event.job.queue), self._task(event.job.task_name)

    # ------------------------------------------------------------------ listener

    def worker_started(self, worker: WorkerView) -> None:
        self._workers.append(worker)

    def worker_stopped(self, worker: WorkerView) -> None:
        if worker in self._workers:
            self._workers.remove(worker)

    def attempt_started(self, event: AttemptStarted) -> None:
        pickup = event.pickup_ms
        if pickup is not None:
            self.pickup.labels(*self._labels(event)).observe(pickup / 1000.0)

    def attempt_ended(self, event: AttemptEnded) -> None:
        queue, task = self._labels(event)
        self.attempts.labels(queue, task, event.outcome.value, event.reason or "").inc()
        self.duration.labels(queue, task).observe(event.duration_s)
