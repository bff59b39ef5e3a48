"""The app ``bench/flows_bench.py`` runs: a fan-out/fan-in flow and a plain task.

Workers load it with ``queue-core worker bench._flows_app:queue``. Env:
``QC_BENCH_URL`` (storage URL), ``QC_BENCH_MARKS`` (a file every body appends
``<unix time>`` to, one ``O_APPEND`` write each), ``QC_BENCH_WIDTH`` (parallel steps
between root and join; default 998, so the flow has 1,000 steps), ``QC_BENCH_CHAIN``
(the steps of the chain flow, each depending on the one before; default 50).
"""

from __future__ import annotations

import os
import time

from queue_core import JobContext, Queue

WIDTH = int(os.environ.get("QC_BENCH_WIDTH", "998"))
CHAIN = int(os.environ.get("QC_BENCH_CHAIN", "50"))

queue = Queue(os.environ.get("QC_BENCH_URL", "memory://"))


def _mark() -> None:
    path = os.environ.get("QC_BENCH_MARKS")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.time():.6f}\n".encode())
    finally:
        os.close(fd)


@queue.task(name="bench.noop")
def noop(i: int) -> int:
    """The plain job the flow's steps are compared with."""
    _mark()
    return i


fan = queue.flow("bench-fan")


def _root(input: int) -> int:
    _mark()
    return input


def _leaf(root: int, ctx: JobContext) -> int:
    _mark()
    return root


def _join(ctx: JobContext) -> str:
    _mark()
    return str(ctx.step_id)


root = fan.step(id="root")(_root)
leaves = [fan.step(id=f"s{i}", depends_on=[root])(_leaf) for i in range(WIDTH)]
fan.step(id="join", depends_on=leaves)(_join)


@queue.task(name="bench.link")
def link(i: int, n: int) -> int:
    """The plain chain the chain flow is compared with: each job enqueues the next."""
    _mark()
    if i + 1 < n:
        link.delay(i + 1, n)
    return i


chain = queue.flow("bench-chain")


def _link(ctx: JobContext) -> str:
    _mark()
    return str(ctx.step_id)


_prev = chain.step(id="c0")(_link)
for _i in range(1, CHAIN):
    _prev = chain.step(id=f"c{_i}", depends_on=[_prev])(_link)
