"""The flows the cross-backend flow acceptance tests run in real worker processes.

Workers load it with ``queue-core worker tests.integration.helpers.flows_app:queue``;
the test process calls :func:`declare` on its own ``Queue`` to start executions of the
same flows (a worker runs a step by its task name, ``<flow>.<step>``).

Env read by the workers:
    QUEUE_CORE_URL: the storage URL (``memory://`` when unset, so importing this module
        in the test process opens nothing).
    QC_FLOW_LOG: a file every step body appends to, one ``O_APPEND`` write per line so
        concurrent processes never interleave:
        ``S|E <flow>.<step> <execution id> <attempt> <pid> <unix time>`` when the body
        starts (``S``) and returns (``E``).
    QC_FLOW_LEASE: the lease workers take (default 30 s).

The process-isolated step (``timeouts-process.hold``) writes its lines from the child.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from queue_core import Concurrency, JobContext, Queue, RetryPolicy
from queue_core.flows.api import Flow

FAST = RetryPolicy(max_attempts=3, initial=0.01, jitter=0)
"""The flows' retry policy: three attempts, 10 ms apart."""

SLEEP = 0.3
"""Seconds each step of the ``max_parallel`` and concurrency flows runs."""


def _log(kind: str, ctx: JobContext | Any) -> None:
    path = os.environ.get("QC_FLOW_LOG", os.devnull)
    line = (
        f"{kind} {ctx.step_id} {ctx.execution_id} {ctx.attempt} {os.getpid()} {time.time():.6f}\n"
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- step bodies
# Module-level (a process-isolated step's child imports its body by qualified name).


def diamond_a(input: dict[str, int], ctx: JobContext) -> int:
    _log("S", ctx)
    _log("E", ctx)
    return input["n"]


def diamond_b(a: int, ctx: JobContext) -> int:
    _log("S", ctx)
    _log("E", ctx)
    return a + 1


def diamond_c(a: int, ctx: JobContext) -> int:
    _log("S", ctx)
    _log("E", ctx)
    return a * 10


def diamond_d(b: int, c: int, ctx: JobContext) -> list[int]:
    _log("S", ctx)
    _log("E", ctx)
    return [b, c]


def sleeper(ctx: JobContext) -> str:
    """Run ``SLEEP`` seconds, logged (the parallel and concurrency flows)."""
    _log("S", ctx)
    time.sleep(SLEEP)
    _log("E", ctx)
    return str(ctx.step_id)


def flaky(ctx: JobContext) -> int:
    """Fail attempts 1 and 2, succeed on attempt 3."""
    _log("S", ctx)
    if ctx.attempt < 3:
        raise RuntimeError(f"flaky attempt {ctx.attempt}")
    _log("E", ctx)
    return ctx.attempt


def broken(flaky: int, ctx: JobContext) -> None:
    """Always fail (declared with ``max_attempts=1``)."""
    _log("S", ctx)
    raise ValueError("broken on purpose")


async def hold_async(ctx: JobContext) -> None:
    """Sleep 5 s on the event loop (the flow deadline cancels it)."""
    _log("S", ctx)
    await asyncio.sleep(5)
    _log("E", ctx)


def hold_sync(ctx: Any) -> None:
    """Sleep 5 s in a child process (the flow deadline stops its process group)."""
    _log("S", ctx)
    time.sleep(5)
    _log("E", ctx)


def warm(ctx: Any) -> int:
    """A quick process-isolated step: it leaves a started child in the worker's pool."""
    return os.getpid()


def first(ctx: JobContext) -> str:
    _log("S", ctx)
    _log("E", ctx)
    return "one"


def second(first: str, ctx: JobContext) -> str:
    """Hold 3 s on attempt 1 (the test SIGKILLs its worker meanwhile)."""
    _log("S", ctx)
    if ctx.attempt == 1:
        time.sleep(3)
    _log("E", ctx)
    return first + "+two"


# --------------------------------------------------------------------------- declaring


@dataclass
class Flows:
    """Every acceptance flow, declared on one queue."""

    diamond: Flow
    parallel: Flow
    retry: Flow
    timeout_async: Flow
    timeout_process: Flow
    warm_process: Flow
    resume: Flow
    one_at_a_time: Flow
    skipper: Flow
    per_customer: Flow


def customer_of(input: dict[str, str]) -> str:
    """The concurrency key of ``per-customer``: one running execution per customer."""
    return input["customer"]


def declare(q: Queue) -> Flows:
    """Declare the acceptance flows on ``q`` (workers and the test process alike)."""
    diamond = q.flow("diamond")
    a = diamond.step(id="a")(diamond_a)
    b = diamond.step(id="b", depends_on=[a])(diamond_b)
    c = diamond.step(id="c", depends_on=[a])(diamond_c)
    diamond.step(id="d", depends_on=[b, c])(diamond_d)

    parallel = q.flow("parallel", max_parallel=2)
    for i in range(6):
        parallel.step(id=f"s{i}")(sleeper)

    retry = q.flow("retry", retry=FAST)
    flaky_step = retry.step(id="flaky")(flaky)
    retry.step(id="broken", depends_on=[flaky_step], max_attempts=1)(broken)

    timeout_async = q.flow("timeouts-async", timeout="1.5s", retry=FAST)
    timeout_async.step(id="hold")(hold_async)
    timeout_process = q.flow("timeouts-process", timeout="1.5s", retry=FAST)
    timeout_process.step(id="hold", isolation="process", kill_grace="0.2s")(hold_sync)
    warm_process = q.flow("warm-process")
    warm_process.step(id="warm", isolation="process")(warm)

    resume = q.flow("resume", retry=FAST)
    one = resume.step(id="first")(first)
    resume.step(id="second", depends_on=[one])(second)

    one_at_a_time = q.flow("one-at-a-time", concurrency=Concurrency(1))
    one_at_a_time.step(id="work")(sleeper)
    skipper = q.flow("skipper", concurrency=Concurrency(1, behavior="skip"))
    skipper.step(id="work")(sleeper)
    per_customer = q.flow("per-customer", concurrency=Concurrency(1, key=customer_of))
    per_customer.step(id="work")(sleeper)
    return Flows(
        diamond,
        parallel,
        retry,
        timeout_async,
        timeout_process,
        warm_process,
        resume,
        one_at_a_time,
        skipper,
        per_customer,
    )


queue = Queue(
    os.environ.get("QUEUE_CORE_URL", "memory://"),
    lease=float(os.environ.get("QC_FLOW_LEASE", "30")),
)
declare(queue)


# --------------------------------------------------------------------------- the log


@dataclass(frozen=True)
class Run:
    """One run of a step body as the log shows it."""

    step: str
    execution: str
    attempt: int
    pid: int
    started: float
    ended: float | None


def read_runs(log: Path) -> list[Run]:
    """Every logged body run, in start order (``ended`` ``None``: it never returned)."""
    starts: dict[tuple[str, str, int], tuple[int, float]] = {}
    ends: dict[tuple[str, str, int], float] = {}
    try:
        text = log.read_text()
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        kind, step, execution, attempt, pid, t = line.split()
        key = (step, execution, int(attempt))
        if kind == "S":
            assert key not in starts, f"a step attempt started twice: {line}"
            starts[key] = (int(pid), float(t))
        else:
            ends[key] = float(t)
    runs = [Run(k[0], k[1], k[2], p, t, ends.get(k)) for k, (p, t) in starts.items()]
    return sorted(runs, key=lambda r: r.started)
