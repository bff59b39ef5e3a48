"""PostgreSQL bulk enqueue: ``COPY`` (backends/sql/pgcopy.py) against the ``insert_jobs``
statement (``unnest`` of per-job arrays), alternated batch run by batch run.

Starts a private PostgreSQL (as the test suite does), then enqueues ``--reps`` times
``--batches`` batches of ``--size`` jobs through ``SQLStorage.enqueue`` each way, the
two ways in turn, and prints each way's median jobs/s. The jobs are built before the
timer starts: this measures the storage, not ``NewJob`` construction::

    python bench/pg_copy.py [--size 1000] [--batches 5] [--reps 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.sql import SQLStorage, pgcopy  # noqa: E402
from queue_core.records.jobs import NewJob  # noqa: E402
from tests.servers.postgres import PostgresServer  # noqa: E402


def _batches(first: int, size: int, count: int) -> list[list[NewJob]]:
    return [
        [
            NewJob(id=f"j{first + b * size + i}", task_name="t", queue="default",
                   payload=b'{"args":[1],"kwargs":{}}', lost_delay_ms=900, timeout_ms=300_000)
            for i in range(size)
        ]
        for b in range(count)
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--reps", type=int, default=8)
    a = ap.parse_args()
    server = PostgresServer()
    rates: dict[str, list[float]] = {"copy": [], "insert_jobs": []}
    try:
        server.start()
        server.create_database("qc_copy")
        storage = SQLStorage(server.url("qc_copy"))
        storage.migrate()
        copy_min, n = pgcopy.COPY_MIN, 0
        for _ in range(a.reps):
            for way, runs in rates.items():
                pgcopy.COPY_MIN = copy_min if way == "copy" else 10**9
                batches = _batches(n, a.size, a.batches)
                n += a.size * a.batches
                t0 = time.perf_counter()
                for batch in batches:
                    storage.enqueue(batch)
                runs.append(a.size * a.batches / (time.perf_counter() - t0))
        storage.close()
    finally:
        server.destroy()
    print(f"PostgreSQL enqueue, {a.batches} x {a.size} jobs, median of {a.reps} alternated runs")
    for way, r in rates.items():
        print(f"{way:<12}{statistics.median(r):>10,.0f} jobs/s  ({min(r):,.0f}-{max(r):,.0f})")


if __name__ == "__main__":
    main()
