"""PostgreSQL: finish-then-claim as separate calls vs one round trip, on the storage alone.

Bulk-enqueues N no-op jobs into a throwaway database (as ``bench/pg_claim_finish.py``),
then drains them in one thread, claiming ``--limit`` jobs a round:

* ``split``: ``claim(limit)``; every ``--batch`` claimed jobs, ``finish`` them (two
  round trips and two commits per finish batch, as the worker's claim and finish
  threads do);
* ``pipe``: each round sends the previous round's ends' ``finish`` *and* the next
  ``claim`` in one psycopg pipeline (one round trip, one implicit transaction: one
  commit), the backend's own two statements (:func:`_finish_and_claim`; plain ends of
  distinct jobs only, which these are).

Measured for issue 15 (a worker's claim thread carrying the finish thread's waiting ends
with its claim): ``pipe`` cut client and server CPU per job against ``split`` with
``--batch 16`` (and the drain rate of this one thread rose), not against ``--batch 64``;
in the worker (8 slots, no-op bodies) it lowered CPU per job but the drain rate fell
(3 alternated ``bench/drain.py`` pairs, medians 3,344 -> 2,927 jobs/s): each claim
waited for the finish before it, where the finish thread had overlapped the claims.
Not kept; the worker writes larger finish batches instead (FinishThread's gather).

Prints per job: this thread's CPU (``time.thread_time``), the server backend's CPU
(``/proc/<pid>/stat`` of ``pg_backend_pid()``), and the drain rate. Modes alternate
within a rep so that load drift cancels::

    python bench/pg_finish_claim.py [-n 8000] [--reps 3] [--limit 8] [--batch 16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drain  # noqa: E402 - the app and servers of bench/drain.py

from backends.sql import pg_hot  # noqa: E402
from backends.sql.postgresql import FINISH_SIZES  # noqa: E402
from backends.sql.records import end_values  # noqa: E402
from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    ClaimedJob,
    Decision,
    Outcome,
)  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _backend_pid(storage: Any) -> int:
    with storage._stmt() as cur:
        return int(cur.execute("SELECT pg_backend_pid() AS p").fetchone()["p"])


def _ends(jobs: list[Any]) -> list[AttemptEnd]:
    done = Decision(action=Action.COMPLETE)
    return [AttemptEnd(ref=j.ref, outcome=Outcome.SUCCEEDED, decision=done, result=b"null")
            for j in jobs]  # fmt: skip


def _split(storage: Any, limit: int, batch: int) -> int:
    ended, pending = 0, []
    while True:
        jobs = storage.claim("bench", ["default"], limit, 30_000)
        if not jobs and not pending:
            return ended
        pending.extend(_ends(jobs))
        if len(pending) >= batch or not jobs:
            storage.finish(pending)
            ended += len(pending)
            pending = []


def _finish_and_claim(
    storage: Any, ends: list[AttemptEnd], limit: int
) -> tuple[list[bool], list[ClaimedJob]]:
    """``finish(ends)`` and ``claim(limit)`` in one pipeline: the PostgreSQL backend's own
    statements (plain ends of distinct jobs, no flow step, no dead letter, no keyed
    job: what this drain has)."""
    values = sorted((end_values(e) for e in ends), key=lambda v: v.id)
    size = next(n for n in FINISH_SIZES if n >= len(values))
    flat = pg_hot.finish_params(values, None)
    flat.extend((None,) * (len(flat) // len(values)) * (size - len(values)))
    sql = storage._q["claim"].replace("{queues}", "queue = %(q0)s")
    params = {"now": None, "queues": ["default"], "q0": "default", "limit": limit,
              "worker": "bench", "lease_ms": 30_000}  # fmt: skip
    with storage._hot() as cur:
        raw = pg_hot.raw_cursor(storage._hot_local, cur.connection)
        with cur.connection.pipeline():
            raw.execute(storage._finish_statement(size), flat, prepare=storage._prepare_now)
            cur.execute(sql, params)
        done = dict(raw.fetchall())
        rows = cur.fetchall()
    jobs = [c for _, c in sorted(storage._claim_pairs(rows), key=lambda p: p[0])]
    return [e.ref.job_id in done for e in ends], jobs


def _pipe(storage: Any, limit: int, batch: int) -> int:
    ended, pending = 0, []
    while True:
        if pending:
            took, jobs = _finish_and_claim(storage, pending, limit)
            assert all(took), took
            ended += len(pending)
        else:
            jobs = storage.claim("bench", ["default"], limit, 30_000)
        if not jobs:
            return ended
        pending = _ends(jobs)


def one_rep(
    fresh: Any, workdir: Path, n: int, mode: str, limit: int, batch: int
) -> tuple[float, ...]:
    """(client µs per job, server µs per job, jobs/s) of one drain of ``n`` jobs."""
    app = drain._load_app(workdir, fresh(f"pfc{time.monotonic_ns()}"))
    drain.enqueue_bulk(app, n)
    storage = app.queue.storage()
    pid = _backend_pid(storage)
    s0, c0, t0 = _cpu_of(pid), time.thread_time(), time.perf_counter()
    ended = (_split if mode == "split" else _pipe)(storage, limit, batch)
    wall = time.perf_counter() - t0
    client, server = time.thread_time() - c0, _cpu_of(pid) - s0
    app.queue.close()
    assert ended == n, (ended, n)
    return client / n * 1e6, server / n * 1e6, n / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=8000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--limit", type=int, default=8, help="jobs per claim (a worker's slots)")
    ap.add_argument("--batch", type=int, default=16, help="ends per finish (split)")
    ap.add_argument("--modes", default="split,pipe")
    args = ap.parse_args()
    modes = args.modes.split(",")
    reps: dict[str, list[tuple[float, ...]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / f"{drain.APP_MODULE}.py").write_text(drain.APP_SOURCE)
        with drain.storage_url("postgres", workdir) as fresh:
            for _ in range(args.reps):
                for m in modes:
                    reps[m].append(one_rep(fresh, workdir, args.n, m, args.limit, args.batch))
    for m, rs in reps.items():
        med = [statistics.median(r[k] for r in rs) for k in range(3)]
        each = " ".join(f"{r[0]:.0f}/{r[1]:.0f}/{r[2]:.0f}" for r in rs)
        print(f"{m:5} n={args.n} client_us={med[0]:.1f} server_us={med[1]:.1f} "
              f"jobs_s={med[2]:.0f}  (reps {each})")  # fmt: skip


if __name__ == "__main__":
    main()
