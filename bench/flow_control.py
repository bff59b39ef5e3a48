"""Claims per second under flow control (SPEC §13), on one storage URL, no worker.

Each figure is a storage-level drain: ``claim(8)`` + ``finish`` of the 8 until the jobs
are gone, claims per second of this process's CPU time (on ``memory://`` that is all the
work; a server's share is not in it), median of ``--reps`` runs on a fresh storage each
(``memory://`` builds a new store per run; a server URL is used as given, so give an
empty one):

1. plain -- a task with no flow control (the baseline);
2. round_robin, 100 keys -- ``Concurrency(1000, "round_robin", key=...)`` over 100 keys;
3. round_robin, skewed -- one key with half the jobs, 99 keys sharing the rest;
4. shared rate limit -- two tasks under one named limit high enough never to hold a
   claim back (the cost of the rate bookkeeping, not of waiting);
5. paused queue beside -- the plain drain claiming from ``default`` and ``held`` while
   ``held`` (as many jobs) is paused; its control: as many jobs stored in a queue the
   drain does not claim from (what the stored jobs cost, with no pause);
6. paused task beside -- the plain drain while a paused task's jobs (as many) share the
   queue (a paused task's jobs are set aside once, by the first claims that meet them).

Each figure runs in a fresh process (so no figure pays for the ones before it), and
is given with the Python function calls per claimed job of its drain, counted (a figure
that does not move with the machine's load, unlike claims/s). Run:
``python bench/flow_control.py memory:// [--jobs 20000] [--reps 3]``. A storage
without the ability a figure needs prints ``n/a`` naming it. Figures vary ±20% on
shared machines; compare within one run.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from queue_core.app.config import open_storage  # noqa: E402
from queue_core.records.control import PauseKind  # noqa: E402
from queue_core.records.jobs import Action, AttemptEnd, Decision, NewJob, Outcome  # noqa: E402
from queue_core.storage.abilities import (  # noqa: E402
    SupportsPause,
    SupportsRateLimits,
    SupportsRoundRobin,
)
from queue_core.storage.protocol import Storage  # noqa: E402

PAYLOAD = b'{"args":[1],"kwargs":{}}'
DONE = Decision(action=Action.COMPLETE)


def _job(**fields: Any) -> NewJob:
    fields.setdefault("task_name", "bench.noop")
    fields.setdefault("queue", "default")
    return NewJob(id=uuid.uuid4().hex, payload=PAYLOAD, **fields)


def _drain(storage: Storage, queues: list[str], expect: int) -> float:
    """claim(8)+finish until ``expect`` jobs were claimed: claims/s."""
    got = 0
    if _COUNT[0]:
        _CALLS[0] = 0
        sys.setprofile(_counter)
    start = time.process_time()  # this process's CPU: the storage's work on memory://
    while got < expect:
        claimed = storage.claim("bench", queues, 8, 30_000)
        if not claimed:
            raise RuntimeError(f"the drain stalled after {got} of {expect} claims")
        got += len(claimed)
        storage.finish(
            [AttemptEnd(ref=c.ref, outcome=Outcome.SUCCEEDED, decision=DONE) for c in claimed]
        )
    took = max(time.process_time() - start, 1e-9)
    sys.setprofile(None)
    return got / took


def _counter(frame: Any, event: str, arg: Any) -> None:
    if event in ("call", "c_call"):
        _CALLS[0] += 1


def _enqueue(storage: Storage, jobs: list[NewJob]) -> None:
    for i in range(0, len(jobs), 1000):
        storage.enqueue(jobs[i : i + 1000])


def plain(storage: Storage, n: int) -> float:
    _enqueue(storage, [_job() for _ in range(n)])
    return _drain(storage, ["default"], n)


def _fair(key: str) -> NewJob:
    return _job(
        task_name="bench.fair",
        concurrency_key=f"bench.fair:{key}",
        concurrency_limit=1000,
        concurrency_behavior="round_robin",
        concurrency_group="bench.fair",
    )


def round_robin(storage: Storage, n: int) -> float:
    _enqueue(storage, [_fair(f"k{i % 100}") for i in range(n)])
    return _drain(storage, ["default"], n)


def round_robin_skewed(storage: Storage, n: int) -> float:
    jobs = [_fair("big") for _ in range(n // 2)]
    jobs += [_fair(f"k{i % 99}") for i in range(n - n // 2)]
    _enqueue(storage, jobs)
    return _drain(storage, ["default"], n)


def shared_rate(storage: Storage, n: int) -> float:
    def limited(task: str) -> NewJob:
        return _job(task_name=task, rate_key="rate:bench", rate_limit=100_000, rate_window_ms=1)

    _enqueue(storage, [limited("bench.a" if i % 2 else "bench.b") for i in range(n)])
    return _drain(storage, ["default"], n)


def other_queue(storage: Storage, n: int) -> float:
    """The control of :func:`paused_queue`: as many jobs stored in a queue not claimed."""
    _enqueue(storage, [_job(queue="other") for _ in range(n)])
    _enqueue(storage, [_job() for _ in range(n)])
    return _drain(storage, ["default"], n)


def paused_queue(storage: Storage, n: int) -> float:
    assert isinstance(storage, SupportsPause)
    storage.pause(PauseKind.QUEUE, "held")
    _enqueue(storage, [_job(queue="held") for _ in range(n)])
    _enqueue(storage, [_job() for _ in range(n)])
    return _drain(storage, ["default", "held"], n)


def paused_task(storage: Storage, n: int) -> float:
    assert isinstance(storage, SupportsPause)
    storage.pause(PauseKind.TASK, "bench.held")
    jobs = [_job(task_name="bench.held") for _ in range(n)] + [_job() for _ in range(n)]
    _enqueue(storage, jobs)
    return _drain(storage, ["default"], n)


FIGURES: list[tuple[str, Callable[[Storage, int], float], type | None]] = [
    ("plain", plain, None),
    ("round_robin, 100 keys", round_robin, SupportsRoundRobin),
    ("round_robin, 1 key with half the jobs + 99", round_robin_skewed, SupportsRoundRobin),
    ("shared rate limit (never holding back)", shared_rate, SupportsRateLimits),
    ("plain, another queue's jobs stored (control)", other_queue, None),
    ("plain, a paused queue beside (claimed too)", paused_queue, SupportsPause),
    ("plain, a paused task beside", paused_task, SupportsPause),
]


def _calls_per_claim(run: Callable[[Storage, int], float], url: str, jobs: int) -> float:
    """Python function calls per claimed job, counted in one more run (the drain only:
    not the enqueue): a figure that does not drift with the machine's load."""
    storage = open_storage(url)
    _COUNT[0] = True
    try:
        run(storage, jobs)
    finally:
        _COUNT[0] = False
        storage.close()
    return _CALLS[0] / jobs


_COUNT = [False]
_CALLS = [0]


def _measure(index: int, url: str, jobs: int, reps: int) -> str:
    """One figure, in this process: the median of ``reps`` runs and the calls per claim,
    or ``n/a`` naming the ability the storage lacks."""
    _name, run, ability = FIGURES[index]
    warm = open_storage(url)  # one untimed run first: imports, caches, allocator
    try:
        plain(warm, min(jobs, 5000))
    finally:
        warm.close()
    rates = []
    for _ in range(reps):
        storage = open_storage(url)
        try:
            if ability is not None and not isinstance(storage, ability):
                return f"n/a {ability.__name__}"
            gc.collect()
            rates.append(run(storage, jobs))
        finally:
            storage.close()
    return f"{statistics.median(rates):.1f} {_calls_per_claim(run, url, jobs):.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="storage URL (memory://, or an empty server storage)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only is not None:  # one figure in a fresh process (no order effects)
        print(_measure(args.only, args.url, args.jobs, args.reps))
        return 0
    base: float | None = None
    print(
        f"{'figure':48} {'claims/s':>10} {'vs plain':>9} {'calls/claim':>12}"
        f"   ({args.jobs} jobs, {args.url}, CPU)"
    )
    for i, (name, _run, _ability) in enumerate(FIGURES):
        out = subprocess.run(
            [sys.executable, __file__, args.url, "--jobs", str(args.jobs), "--reps",
             str(args.reps), "--only", str(i)],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        if out.startswith("n/a"):
            print(f"{name:48} {'n/a':>10}   (lacks {out.split()[1]})")
            continue
        rate, calls = (float(x) for x in out.split())
        base = rate if base is None else base
        print(f"{name:48} {rate:>10,.0f} {rate / base:>8.2f}x {calls:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
