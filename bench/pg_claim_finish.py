"""CPU of the PostgreSQL backend's claim and finish calls, per job, in one thread.

Bulk-enqueues N no-op jobs into a throwaway database (``tests/servers/postgres.py``, as
``bench/drain.py``), then loops as a worker's storage threads do: ``claim(limit)`` and,
once ``--batch`` jobs are claimed, ``finish`` them (``COMPLETE``), until the queue is
empty. Prints the calling thread's CPU time (``time.thread_time``) spent inside
``claim`` and inside ``finish``, per job: the Python, driver and socket work of the
backend alone, without the worker's threads competing for the GIL (so much steadier than
``bench/worker_cpu.py`` on a busy machine). Building the attempt ends is not counted.

Run from a checkout (its code is what is measured), alternating two checkouts::

    python bench/pg_claim_finish.py [-n 8000] [--reps 3] [--limit 8] [--batch 16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drain  # noqa: E402 - the app and servers of bench/drain.py

from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    Decision,
    Outcome,
)  # noqa: E402


def one_rep(fresh: object, workdir: Path, n: int, limit: int, batch: int) -> tuple[float, ...]:
    """(claim µs per job, finish µs per job, jobs/s) of one drain of ``n`` jobs."""
    app = drain._load_app(workdir, fresh(f"pcf{time.monotonic_ns()}"))  # type: ignore[operator]
    drain.enqueue_bulk(app, n)
    storage = app.queue.storage()
    done = Decision(action=Action.COMPLETE)
    claim_s = finish_s = 0.0
    ended = 0
    pending: list[AttemptEnd] = []
    t0 = time.perf_counter()
    while True:
        c = time.thread_time()
        jobs = storage.claim("bench", ["default"], limit, 30_000)
        claim_s += time.thread_time() - c
        if not jobs and not pending:
            break
        pending.extend(
            AttemptEnd(ref=j.ref, outcome=Outcome.SUCCEEDED, decision=done, result=b"null")
            for j in jobs
        )
        if len(pending) >= batch or not jobs:
            c = time.thread_time()
            storage.finish(pending)
            finish_s += time.thread_time() - c
            ended += len(pending)
            pending = []
    wall = time.perf_counter() - t0
    app.queue.close()
    return claim_s / ended * 1e6, finish_s / ended * 1e6, ended / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=8000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--limit", type=int, default=8, help="jobs per claim (a worker's slots)")
    ap.add_argument("--batch", type=int, default=16, help="ends per finish")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / f"{drain.APP_MODULE}.py").write_text(drain.APP_SOURCE)
        with drain.storage_url("postgres", workdir) as fresh:
            reps = [one_rep(fresh, workdir, args.n, args.limit, args.batch)
                    for _ in range(args.reps)]  # fmt: skip
    claim = statistics.median(r[0] for r in reps)
    finish = statistics.median(r[1] for r in reps)
    total = statistics.median(r[0] + r[1] for r in reps)
    each = " ".join(f"{r[0] + r[1]:.1f}" for r in reps)
    print(
        f"postgres n={args.n} claim_us_per_job={claim:.1f} finish_us_per_job={finish:.1f} "
        f"sum={total:.1f} (reps {each}) root={drain.ROOT}"
    )


if __name__ == "__main__":
    main()
