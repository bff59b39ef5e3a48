"""Prometheus metrics read from storage at scrape time (``pip install queue-core[dashboard]``).

::

    from prometheus_client import start_http_server
    from contrib.metrics import make_registry

    registry = make_registry(queue)          # a Queue or any Storage
    start_http_server(9100, registry=registry)

The dashboard serves the same registry at ``/metrics``. Every number comes from the
storage when Prometheus scrapes (a custom collector), so any process that can reach
the storage can export them -- no worker needs to be running, and every backend gets
them through the public :class:`~queue_core.Storage` protocol:

``queue_core_jobs{queue,state}`` (gauge)
    Jobs per queue and state, from ``Storage.stats()``. ``state`` is one of the
    :class:`~queue_core.QueueStats` counters: ``ready``, ``scheduled``, ``running``,
    ``succeeded``, ``dead``, ``cancelled``, ``skipped``, ``timed_out`` (``ready`` +
    ``scheduled`` = the jobs in state ``queued``).
``queue_core_storage_up`` (gauge)
    ``1`` when the scrape could read the storage, ``0`` when it raised (the other
    families are then left out of that scrape; the error is logged).
``queue_core_scrape_duration_seconds`` (gauge)
    How long the storage reads of this scrape took.

``queue_core_jobs_enqueued_total{queue}``, ``queue_core_jobs_finished_total{queue,state}``
    (counters)
    Jobs enqueued, and jobs that reached a final state (``succeeded``, ``dead``,
    ``cancelled``, ``timed_out``, ``skipped``), by every process that uses the storage:
    built from storage's per-minute counts (:class:`~queue_core.SupportsThroughput`, every
    in-repo backend) by :mod:`contrib.metrics_throughput`. The first scrape starts them at
    the last hour's counts; scrapes more than an hour apart miss what lies between.

A scrape reads counts only -- one ``stats()`` and one throughput read -- so it costs
the same whether storage keeps ten jobs or ten million: the ``/metrics`` of a dashboard
without a token cannot be used to load the storage. Two scans that read every kept
record are opt-in, for an exporter only Prometheus reaches:

``queue_core_dead_letters{task}`` and ``queue_core_dead_letters_scan_truncated`` (gauges,
``scan_dead_letters=True``)
    Dead-letter entries per task (paged ``Storage.list_dead``, at most
    ``max_scan_dead`` entries read), and ``1`` when the scan stopped there. Without the
    scan, ``queue_core_jobs{state="dead"}`` counts dead jobs per queue.
``queue_core_attempts{queue,task,outcome,reason}``, ``queue_core_attempts_scan_jobs``,
``queue_core_attempts_scan_truncated`` (gauges, ``scan_attempts=True``)
    Attempt records kept in storage, by outcome (``succeeded``, ``failed``,
    ``timed_out``, ``lost``, ``cancelled``, or ``running`` for an attempt that has not
    ended) and reason (empty for none): one ``list_attempts`` per job, at most
    ``max_scan_jobs`` jobs, newest first (needs :class:`~queue_core.SupportsJobScan`);
    how many jobs it read, and ``1`` when it stopped at ``max_scan_jobs``. A gauge, not a
    counter: pruning finished jobs lowers it. Worker metrics count attempts for free.

Label cardinality is bounded: at most ``max_tasks`` distinct ``task`` values and
``max_queues`` distinct ``queue`` values per family (the largest counts win, ties by
name); the rest are added up under the value ``other``.

Worker-side live metrics (attempt duration and pick-up latency histograms, busy and
stuck slots) need hooks in the worker and are not exported here yet.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from contrib.metrics_throughput import ThroughputTotals
from queue_core import (
    ConfigError,
    Queue,
    QueueStats,
    Storage,
    SupportsJobScan,
    SupportsThroughput,
)

__all__ = ["OTHER", "STATS_STATES", "StorageCollector", "make_registry", "storage_of"]

log = logging.getLogger("contrib.metrics")

OTHER = "other"
"""The label value that the tasks and queues past the cardinality cap are folded into."""

STATS_STATES: tuple[str, ...] = (
    "ready",
    "scheduled",
    "running",
    "succeeded",
    "dead",
    "cancelled",
    "skipped",
    "timed_out",
)
"""The ``state`` label values of ``queue_core_jobs``: the :class:`QueueStats` counters."""

_PAGE = 500


def storage_of(queue_or_storage: Queue | Storage) -> Storage:
    """The storage behind a :class:`~queue_core.Queue`, or the storage itself.

    Raises:
        ConfigError: the object is neither a Queue nor a Storage.
    """
    if isinstance(queue_or_storage, Queue):
        return queue_or_storage.storage()
    if isinstance(queue_or_storage, Storage):
        return queue_or_storage
    raise ConfigError(
        f"invalid queue_or_storage: {type(queue_or_storage).__name__} -- expected a "
        "queue_core.Queue or an object implementing queue_core.Storage",
        code="invalid_option",
        field="queue_or_storage",
        value=type(queue_or_storage).__name__,
    )


def _check_cap(name: str, value: int, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(
            f"invalid {name}: {value!r} -- expected an integer >= {low}",
            code="invalid_option",
            field=name,
            value=value,
        )
    return value


def fold(counts: Mapping[str, float], cap: int) -> dict[str, float]:
    """Keep the ``cap`` largest keys (ties by name), add the rest up under ``other``."""
    label = _allowed(counts, cap)
    folded: dict[str, float] = {}
    for key, value in counts.items():
        folded[label(key)] = folded.get(label(key), 0) + value
    return folded


def _allowed(counts: Mapping[str, float], cap: int) -> Callable[[str], str]:
    """A label mapper: a kept name maps to itself, any other name to ``other``."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = {key for key, _ in ranked[:cap]}
    return lambda name: name if name in kept else OTHER


class StorageCollector:
    """A prometheus-client collector that reads the storage at every scrape.

    Args:
        queue_or_storage: a :class:`~queue_core.Queue` or a :class:`~queue_core.Storage`.
        max_tasks: at most this many distinct ``task`` label values per family.
        max_queues: at most this many distinct ``queue`` label values per family.
        scan_attempts: count attempt records (needs :class:`~queue_core.SupportsJobScan`;
            costs one ``list_attempts`` per job that has attempts, at every scrape).
        scan_dead_letters: count dead-letter entries per task (costs reading every
            entry, up to ``max_scan_dead``, at every scrape).
        max_scan_jobs: stop the attempt scan after this many jobs (newest first).
        max_scan_dead: stop the dead-letter count after this many entries.

    Raises:
        ConfigError: a cap below 1 (``max_scan_*`` below 0) or a bad ``queue_or_storage``.
    """

    def __init__(
        self,
        queue_or_storage: Queue | Storage,
        *,
        max_tasks: int = 50,
        max_queues: int = 50,
        scan_attempts: bool = False,
        scan_dead_letters: bool = False,
        max_scan_jobs: int = 10_000,
        max_scan_dead: int = 10_000,
    ) -> None:
        self.storage = storage_of(queue_or_storage)
        self.max_tasks = _check_cap("max_tasks", max_tasks, 1)
        self.max_queues = _check_cap("max_queues", max_queues, 1)
        self.scan_attempts = bool(scan_attempts)
        self.scan_dead_letters = bool(scan_dead_letters)
        self.max_scan_jobs = _check_cap("max_scan_jobs", max_scan_jobs, 0)
        self.max_scan_dead = _check_cap("max_scan_dead", max_scan_dead, 0)
        self.throughput = ThroughputTotals(self.max_queues, _allowed)

    # prometheus-client calls describe() at registration: answer without touching storage.
    def describe(self) -> Iterable[Metric]:
        yield from self._families(with_dead=self.scan_dead_letters, with_attempts=self._can_scan())
        if isinstance(self.storage, SupportsThroughput):
            yield from ThroughputTotals.families()

    def _can_scan(self) -> bool:
        return self.scan_attempts and isinstance(self.storage, SupportsJobScan)

    def _families(self, *, with_dead: bool, with_attempts: bool) -> list[GaugeMetricFamily]:
        families: list[GaugeMetricFamily] = [
            GaugeMetricFamily(
                "queue_core_storage_up", "1 when this scrape could read the storage, else 0"
            ),
            GaugeMetricFamily(
                "queue_core_scrape_duration_seconds", "Time the storage reads of this scrape took"
            ),
            GaugeMetricFamily(
                "queue_core_jobs",
                "Jobs per queue and state (Storage.stats)",
                labels=["queue", "state"],
            ),
        ]
        if with_dead:
            families += [
                GaugeMetricFamily(
                    "queue_core_dead_letters", "Dead-letter entries per task", labels=["task"]
                ),
                GaugeMetricFamily(
                    "queue_core_dead_letters_scan_truncated",
                    "1 when the dead-letter count stopped at its scan limit",
                ),
            ]
        if with_attempts:
            families += [
                GaugeMetricFamily(
                    "queue_core_attempts",
                    "Attempt records kept in storage by outcome and reason",
                    labels=["queue", "task", "outcome", "reason"],
                ),
                GaugeMetricFamily("queue_core_attempts_scan_jobs", "Jobs read by the attempt scan"),
                GaugeMetricFamily(
                    "queue_core_attempts_scan_truncated",
                    "1 when the attempt scan stopped at its scan limit",
                ),
            ]
        return families

    def collect(self) -> Iterable[Metric]:
        started = time.perf_counter()
        try:
            stats = self.storage.stats()
            dead = self._dead_by_task() if self.scan_dead_letters else None
            attempts = self._attempts() if self._can_scan() else None
            if isinstance(self.storage, SupportsThroughput):
                self.throughput.read(self.storage)
        except Exception:  # noqa: BLE001 - a scrape must answer, and say the storage is down
            log.exception("queue-core metrics: reading the storage failed")
            up = self._families(with_dead=False, with_attempts=False)[0]
            up.add_metric([], 0)
            yield up
            return
        elapsed = time.perf_counter() - started
        families = {
            m.name: m
            for m in self._families(with_dead=dead is not None, with_attempts=attempts is not None)
        }
        families["queue_core_storage_up"].add_metric([], 1)
        families["queue_core_scrape_duration_seconds"].add_metric([], elapsed)
        self._add_jobs(families["queue_core_jobs"], stats)
        if dead is not None:
            by_task, dead_truncated = dead
            for task, n in sorted(fold(by_task, self.max_tasks).items()):
                families["queue_core_dead_letters"].add_metric([task], n)
            families["queue_core_dead_letters_scan_truncated"].add_metric(
                [], 1 if dead_truncated else 0
            )
        if attempts is not None:
            counts, scanned, truncated = attempts
            self._add_attempts(families["queue_core_attempts"], counts)
            families["queue_core_attempts_scan_jobs"].add_metric([], scanned)
            families["queue_core_attempts_scan_truncated"].add_metric([], 1 if truncated else 0)
        yield from families.values()
        if isinstance(self.storage, SupportsThroughput):
            yield from self.throughput.collect()

    # ------------------------------------------------------------------ reads

    def _add_jobs(self, family: Any, stats: list[QueueStats]) -> None:
        totals = {s.queue: float(sum(getattr(s, st) for st in STATS_STATES)) for s in stats}
        label = _allowed(totals, self.max_queues)
        merged: dict[tuple[str, str], float] = {}
        for s in stats:
            for state in STATS_STATES:
                key = (label(s.queue), state)
                merged[key] = merged.get(key, 0) + getattr(s, state)
        for (queue, state), n in sorted(merged.items()):
            family.add_metric([queue, state], n)

    def _dead_by_task(self) -> tuple[Counter[str], bool]:
        counts: Counter[str] = Counter()
        offset = 0
        while True:
            want = min(_PAGE, self.max_scan_dead - offset)
            if want <= 0:  # at the scan limit: truncated only if there is more to read
                return counts, bool(self.storage.list_dead(1, offset, None))
            page = self.storage.list_dead(want, offset, None)
            for entry in page:
                counts[entry.task_name] += 1
            offset += len(page)
            if len(page) < want:
                return counts, False

    def _attempts(
        self,
    ) -> tuple[Counter[tuple[str, str, str, str]], int, bool]:
        storage = self.storage
        assert isinstance(storage, SupportsJobScan)
        counts: Counter[tuple[str, str, str, str]] = Counter()
        seen: set[str] = set()
        offset = 0
        truncated = False
        while not truncated:
            page = storage.list_jobs(limit=_PAGE, offset=offset)
            for job in page:
                if job.id in seen:
                    continue
                if len(seen) >= self.max_scan_jobs:
                    truncated = True
                    break
                seen.add(job.id)
                if job.attempts <= 0:
                    continue
                for att in self.storage.list_attempts(job.id):
                    outcome = att.outcome.value if att.outcome is not None else "running"
                    counts[(job.queue, job.task_name, outcome, att.reason or "")] += 1
            offset += len(page)
            if len(page) < _PAGE:
                break
        return counts, len(seen), truncated

    def _add_attempts(self, family: Any, counts: Counter[tuple[str, str, str, str]]) -> None:
        by_task: Counter[str] = Counter()
        by_queue: Counter[str] = Counter()
        for (queue, task, _, _), n in counts.items():
            by_task[task] += n
            by_queue[queue] += n
        task_label = _allowed(by_task, self.max_tasks)
        queue_label = _allowed(by_queue, self.max_queues)
        merged: Counter[tuple[str, str, str, str]] = Counter()
        for (queue, task, outcome, reason), n in counts.items():
            merged[(queue_label(queue), task_label(task), outcome, reason)] += n
        for labels, n in sorted(merged.items()):
            family.add_metric(list(labels), n)


def make_registry(queue_or_storage: Queue | Storage, **options: Any) -> CollectorRegistry:
    """A fresh registry holding one :class:`StorageCollector` (``options`` go to it)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(StorageCollector(queue_or_storage, **options))
    return registry
