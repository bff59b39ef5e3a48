"""Micro-benchmarks of the SQL backend's storage operations (no worker).

1. hot paths, on SQLite and (with ``--postgres``) on a throwaway PostgreSQL server
   started like ``tests/servers/postgres.py`` does: single ``enqueue`` calls per second
   through the storage API, batches of 1,000 (jobs/s), and claim(8)+finish(8) jobs/s;
2. claim cost with 1,000,000 finished jobs stored versus an empty store (finished rows
   are inserted directly with SQL);
3. ``list_dead`` page of 50 among 100,000 dead-letter entries.

Run: ``python bench/sql_microbench.py [--postgres] [--hot-only] [--finished 1000000]``.
Figures vary ±20% on shared machines; compare within one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import text

from backends.sql import SQLStorage
from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    Decision,
    NewJob,
    Outcome,
)

PAYLOAD = b'{"args":[1],"kwargs":{}}'


def _jobs(n: int) -> list[NewJob]:
    return [
        NewJob(id=uuid.uuid4().hex, task_name="bench.noop", queue="default", payload=PAYLOAD)
        for _ in range(n)
    ]


def _rates(n: int, run: Callable[[], object]) -> tuple[float, float]:
    """``n`` divided by the wall time and by this process's CPU time of ``run()``.

    On a loaded machine the wall figure drifts with the neighbours; the CPU figure is
    what this process spent (for SQLite that is nearly all the work; for PostgreSQL the
    server's share is not in it)."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return n / (time.perf_counter() - wall), n / max(time.process_time() - cpu, 1e-9)


def enqueue_single(storage: SQLStorage, n: int) -> tuple[float, float]:
    """Single ``enqueue`` calls per second (one job each): (wall, CPU) rates."""
    jobs = _jobs(n)

    def run() -> None:
        for j in jobs:
            storage.enqueue([j])

    return _rates(n, run)


def enqueue_bulk(storage: SQLStorage, n: int, size: int = 1000) -> tuple[float, float]:
    """Jobs per second enqueued in batches of ``size``: (wall, CPU) rates."""
    batches = [_jobs(size) for _ in range(max(1, n // size))]

    def run() -> None:
        for b in batches:
            storage.enqueue(b)

    return _rates(size * len(batches), run)


def drain(storage: SQLStorage, batch: int = 8) -> tuple[float, float]:
    """claim(``batch``)+finish(``batch``) until empty: (wall, CPU) jobs/s."""
    done = 0

    def run() -> None:
        nonlocal done
        while True:
            claimed = storage.claim("bench", ["default"], batch, 30_000)
            if not claimed:
                return
            storage.finish(
                [
                    AttemptEnd(
                        ref=c.ref,
                        outcome=Outcome.SUCCEEDED,
                        decision=Decision(action=Action.COMPLETE),
                        result=b"1",
                        mode="thread",
                    )
                    for c in claimed
                ]
            )
            done += len(claimed)

    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return done / (time.perf_counter() - wall), done / max(time.process_time() - cpu, 1e-9)


def hot(url: str, label: str, n: int) -> None:
    """Print the hot-path figures for one storage URL (a fresh, empty database)."""
    s = SQLStorage(url)
    try:
        s.migrate()
        single = enqueue_single(s, n)
        bulk = enqueue_bulk(s, n * 2)
        rate = drain(s)
    finally:
        s.close()
    print(
        f"{label}: enqueue single {single[0]:,.0f}/s ({single[1]:,.0f} per CPU-s); "
        f"enqueue batch of 1000 {bulk[0]:,.0f} jobs/s ({bulk[1]:,.0f}); "
        f"claim(8)+finish(8) {rate[0]:,.0f} jobs/s ({rate[1]:,.0f})",
        flush=True,
    )


def claim_cost(storage: SQLStorage, rounds: int = 300) -> float:
    """Median seconds of one claim of 8 (jobs put back each round by finishing)."""
    storage.enqueue(_jobs(8 * rounds))
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        claimed = storage.claim("bench", ["default"], 8, 30_000)
        samples.append(time.perf_counter() - t)
        storage.finish(
            [
                AttemptEnd(
                    ref=c.ref, outcome=Outcome.SUCCEEDED, decision=Decision(action=Action.COMPLETE)
                )
                for c in claimed
            ]
        )
    return statistics.median(samples)


def fill_finished(storage: SQLStorage, n: int) -> None:
    storage.migrate()
    postgres = storage.dialect == "postgresql"
    series = (
        "SELECT g AS i FROM generate_series(1, :n) g"
        if postgres
        else "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :n) "
        "SELECT i FROM s"
    )
    sql = (
        "INSERT INTO qc_jobs (id, task_name, queue, payload, priority, state, enqueued_at, "
        "run_at, max_attempts, lost_delay_ms, concurrency_skip, attempt, cancel_requested, "
        "finished_at, result) "
        f"SELECT 'done-' || i, 'bench.noop', 'default', :p, 0, 'succeeded', 1, 1, 1, 0, "
        f"{'false' if postgres else '0'}, 1, {'false' if postgres else '0'}, "
        "1000 + i, :p FROM (" + series + ") AS src"
    )
    with storage._engine.begin() as conn:  # noqa: SLF001 - bench fills rows directly
        conn.execute(text(sql), {"n": n, "p": PAYLOAD})


def fill_dead(storage: SQLStorage, n: int) -> None:
    sql = (
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :n) "
        "INSERT INTO qc_dead (id, job_id, task_name, queue, payload, error, error_class, "
        "reason, attempts, dead_at, spec) SELECT 'dead-' || i, 'job-' || i, "
        "'bench.t' || (i % 10), 'default', :p, 'boom', 'ValueError', 'fatal', '[]', i, "
        "'{\"priority\": 0}' FROM s"
    )
    storage.migrate()
    with storage._engine.begin() as conn:  # noqa: SLF001
        conn.execute(text(sql), {"n": n, "p": PAYLOAD})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument(
        "--postgres", action="store_true", help="also run the hot paths on a throwaway server"
    )
    parser.add_argument(
        "--hot-only", action="store_true", help="skip the 1M-row and dead-letter figures"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hot(f"sqlite:///{root / 'hot.db'}", "sqlite", args.jobs)
        if args.postgres:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests.servers.postgres import PostgresServer

            server = PostgresServer()
            try:
                server.start()
                server.create_database("qc_bench")
                hot(server.url("qc_bench"), "postgresql", args.jobs)
            finally:
                server.destroy()
        if args.hot_only:
            return
        empty = SQLStorage(f"sqlite:///{root / 'empty.db'}")
        empty.migrate()
        c_empty = claim_cost(empty)
        empty.close()
        full = SQLStorage(f"sqlite:///{root / 'full.db'}")
        t = time.perf_counter()
        fill_finished(full, args.finished)
        fill_s = time.perf_counter() - t
        c_full = claim_cost(full)
        full.close()
        print(
            f"sqlite claim of 8: empty {c_empty * 1e6:,.0f} us, with {args.finished:,} finished "
            f"{c_full * 1e6:,.0f} us (ratio {c_full / c_empty:.2f}; fill took {fill_s:.1f} s)"
        )

        d = SQLStorage(f"sqlite:///{root / 'dead.db'}")
        fill_dead(d, 100_000)
        pages = []
        for offset in (0, 50, 5000):
            t = time.perf_counter()
            d.list_dead(50, offset)
            pages.append(time.perf_counter() - t)
        t = time.perf_counter()
        d.list_dead(50, 0, task_name="bench.t3")
        by_task = time.perf_counter() - t
        d.close()
        print(
            "sqlite list_dead 50 of 100,000: "
            + ", ".join(f"{p * 1e3:.1f} ms" for p in pages)
            + f" (offsets 0/50/5000); by task {by_task * 1e3:.1f} ms"
        )


if __name__ == "__main__":
    main()
