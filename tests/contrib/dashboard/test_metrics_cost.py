"""A ``/metrics`` scrape costs O(queues x states), not O(jobs): the storage calls it makes
and the records they return are counted on real SQLite, PostgreSQL and Redis storage,
with 10 and then 310 finished jobs (with their attempts and dead letters) kept, and
must not change. Operations are counted, never time."""

from __future__ import annotations

import inspect
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contrib.dashboard import create_app
from queue_core import Storage
from queue_core.app.config import open_storage
from queue_core.testing.fixtures import claim_one, complete_end, dead_end, enqueue_one
from tests.contrib.dashboard.conftest import local_client

FIXTURES = {"postgresql": "postgres_url", "redis": "redis_url"}


class Reads:
    """Every public method call on one storage object, and the records it returned."""

    def __init__(self, storage: Storage) -> None:
        self.calls: Counter[str] = Counter()
        self.rows: Counter[str] = Counter()
        for name, attr in inspect.getmembers(type(storage)):
            if name.startswith("_") or not inspect.isfunction(attr):
                continue
            setattr(storage, name, self._counted(name, getattr(storage, name)))

    def _counted(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            result = method(*args, **kwargs)
            if isinstance(result, (list, tuple, dict)):
                self.rows[name] += len(result)
            return result

        return counted

    def during(self, action: Callable[[], object]) -> tuple[Counter[str], Counter[str]]:
        self.calls.clear()
        self.rows.clear()
        action()
        return Counter(self.calls), Counter(self.rows)


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'cost.db'}"
    else:
        url = str(request.getfixturevalue(FIXTURES[request.param]))
    s = open_storage(url)
    try:
        yield s
    finally:
        s.close()


def keep(storage: Storage, n: int, at: int) -> None:
    """``n`` finished jobs in two queues, one in three dead-lettered, all within the
    minute that starts at ``at`` (so the per-minute throughput counts have the same
    rows however many jobs there are)."""
    for i in range(n):
        queue = "a" if i % 2 else "b"
        now = at + i % 50_000
        enqueue_one(storage, now=now, queue=queue, task_name=f"cost.t{i % 3}")
        claimed = claim_one(storage, now=now, queues=[queue])
        end = dead_end(claimed.ref) if i % 3 == 0 else complete_end(claimed.ref)
        assert storage.finish([end], now=now) == [True]


def test_a_scrape_reads_the_same_however_many_jobs_are_kept(storage: Storage) -> None:
    at = (time.time_ns() // 60_000_000_000 - 5) * 60_000  # a minute of the last hour
    metrics = local_client(create_app(storage))  # the dashboard's /metrics, as served
    reads = Reads(storage)

    def scrape() -> None:
        response = metrics.get("/metrics")
        assert response.status_code == 200
        assert "queue_core_storage_up 1.0" in response.text

    keep(storage, 10, at)
    scrape()  # the first scrape starts the throughput totals
    few = reads.during(scrape)
    keep(storage, 300, at + 20)
    many = reads.during(scrape)
    assert many == few, f"10 jobs kept: {few}; 310 jobs kept: {many}"
    calls, rows = many
    assert set(calls) <= {"stats", "throughput"}, calls
    assert rows["stats"] == 2  # one row per queue
