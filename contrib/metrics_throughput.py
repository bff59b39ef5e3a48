"""The ``queue_core_jobs_enqueued_total`` / ``queue_core_jobs_finished_total`` counters of
:mod:`contrib.metrics`, built from storage's per-minute counts
(:class:`queue_core.SupportsThroughput`), so they count the jobs of every process that
uses the storage, not only this one's.

Each scrape reads the last hour's minute counts and adds to the running totals what
each minute gained since the previous scrape (a minute's count that dropped -- pruned
job rows -- adds nothing: the totals never decrease). The first scrape of an exporter
starts the totals at the last hour's counts; ``rate()`` / ``increase()`` see a fresh
counter, as after any exporter restart. Scrapes further apart than an hour miss what
happened between them. On backends that count from job rows (memory, SQLite, PostgreSQL,
SQS+DynamoDB) with a retention shorter than the hour, jobs enqueued and pruned within
one minute between two scrapes can be missed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from prometheus_client.core import CounterMetricFamily

from queue_core import SupportsThroughput
from queue_core.rules.throughput import ENQUEUED, THROUGHPUT_RESOLUTION_MS, THROUGHPUT_WINDOW_MS

__all__ = ["ThroughputTotals"]

Folder = Callable[[Mapping[str, float], int], Callable[[str], str]]


class ThroughputTotals:
    """Monotonic totals per queue and kind, fed from successive throughput reads."""

    def __init__(self, max_queues: int, allowed: Folder) -> None:
        self._max_queues = max_queues
        self._allowed = allowed
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, int, str], int] = {}
        self._totals: Counter[tuple[str, str]] = Counter()

    @staticmethod
    def families() -> list[CounterMetricFamily]:
        """The two families, empty (what ``describe`` reports)."""
        return [
            CounterMetricFamily(
                "queue_core_jobs_enqueued",
                "Jobs enqueued, by every process using the storage",
                labels=["queue"],
            ),
            CounterMetricFamily(
                "queue_core_jobs_finished",
                "Jobs that reached a final state, by every process using the storage",
                labels=["queue", "state"],
            ),
        ]

    def read(self, storage: SupportsThroughput, now_ms: int | None = None) -> None:
        """Read the last hour's minute counts and add what each minute gained."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        counts = storage.throughput(now - THROUGHPUT_WINDOW_MS, now=now_ms)
        with self._lock:
            for c in counts:
                key = (c.queue, c.bucket, c.kind)
                gained = c.count - self._seen.get(key, 0)
                if gained > 0:
                    self._totals[(c.queue, c.kind)] += gained
                    self._seen[key] = c.count
            oldest = now - THROUGHPUT_WINDOW_MS - 2 * THROUGHPUT_RESOLUTION_MS
            for key in [k for k in self._seen if k[1] < oldest]:
                del self._seen[key]

    def collect(self) -> Iterable[CounterMetricFamily]:
        """The families with the current totals (queues past the cap folded)."""
        enqueued, finished = self.families()
        with self._lock:
            totals = dict(self._totals)
        by_queue: Counter[str] = Counter()
        for (queue, _), n in totals.items():
            by_queue[queue] += n
        label = self._allowed(by_queue, self._max_queues)
        merged: Counter[tuple[str, str]] = Counter()
        for (queue, kind), n in totals.items():
            merged[(label(queue), kind)] += n
        for (queue, kind), n in sorted(merged.items()):
            if kind == ENQUEUED:
                enqueued.add_metric([queue], n)
            else:
                finished.add_metric([queue, kind], n)
        return [enqueued, finished]
