"""Micro-benchmarks of the SQL backend's storage operations (no worker).

1. claim + finish throughput on SQLite in batches of 8 over 10,000 no-op jobs;
2. claim cost with 1,000,000 finished jobs stored versus an empty store (finished rows
   are inserted directly with SQL);
3. ``list_dead`` page of 50 among 100,000 dead-letter entries.

Run: ``python bench/sql_microbench.py [--finished 1000000] [--url sqlite:///...]``.
Figures vary ±20% on shared machines; compare within one run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import text

from backends.sql import SQLStorage
from queue_core.model import Action, AttemptEnd, Decision, NewJob, Outcome

PAYLOAD = b'{"args":[1],"kwargs":{}}'


def _jobs(n: int) -> list[NewJob]:
    return [
        NewJob(id=uuid.uuid4().hex, task_name="bench.noop", queue="default", payload=PAYLOAD)
        for _ in range(n)
    ]


def drain(storage: SQLStorage, n: int, batch: int = 8) -> float:
    for i in range(0, n, 1000):
        storage.enqueue(_jobs(min(1000, n - i)))
    done = 0
    start = time.perf_counter()
    while done < n:
        claimed = storage.claim("bench", ["default"], batch, 30_000)
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
    return n / (time.perf_counter() - start)


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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        s = SQLStorage(f"sqlite:///{root / 'drain.db'}")
        rate = drain(s, args.jobs)
        s.close()
        print(f"sqlite claim+finish, batch 8, {args.jobs} jobs: {rate:,.0f} jobs/s")

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
