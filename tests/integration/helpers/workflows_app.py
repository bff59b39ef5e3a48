"""The workflows the real-process workflow tests run (tests/integration/test_workflows_e2e.py).

Workers load it with ``queue-core worker tests.integration.helpers.workflows_app:queue``;
the test process imports it too (with the same storage) to start executions.

Env read here:
    QC_MEMPROXY: a served memory storage (tests.integration.helpers.memproxy) to use;
        else QUEUE_CORE_URL (``memory://`` when unset).
    QC_WF_LOG: a file every step and child body appends to, one ``O_APPEND`` write per
        line: ``S|E <name> <pid> <unix time>`` when the body starts and returns.
    QC_WF_MARK: a directory of marker files: a body ``*_once`` holds (or fails) only the
        first time it runs (it creates its marker then), so a run after a SIGKILL or a
        retry passes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from queue_core import DurableContext, Queue, RetryPolicy
from tests.integration.helpers.memproxy import ENV, connect

queue = (
    Queue(storage=connect())  # type: ignore[arg-type]
    if os.environ.get(ENV)
    else Queue(os.environ.get("QUEUE_CORE_URL", "memory://"))
)

HOLD = 60.0
"""Seconds a ``*_once`` body holds the first time (its worker is killed meanwhile)."""


def log(kind: str, name: str) -> None:
    line = f"{kind} {name} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(os.environ.get("QC_WF_LOG", os.devnull), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def first_time(name: str) -> bool:
    """``True`` the first time ``name`` asks (it leaves a marker file)."""
    marks = os.environ.get("QC_WF_MARK")
    if not marks:
        return False
    try:
        fd = os.open(Path(marks) / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def quick(name: str) -> str:
    log("S", name)
    log("E", name)
    return name


def hold_once(name: str) -> str:
    log("S", name)
    if first_time(name):
        time.sleep(HOLD)
    log("E", name)
    return name


def fail_once(name: str) -> str:
    log("S", name)
    if first_time(name):
        raise RuntimeError(f"{name} fails the first time")
    log("E", name)
    return name


@queue.task(max_retries=3, retry_backoff=0.05)
def child(i: int) -> int:
    """Child 1 holds the first time (its worker is killed there); the others are quick."""
    (hold_once if i == 1 else quick)(f"child-{i}")
    return i


@queue.task
def plain(i: int) -> int:
    quick(f"plain-{i}")
    return i


@queue.workflow(retry=RetryPolicy(max_attempts=3, initial=0.05, jitter=0))
def three_steps(ctx: DurableContext) -> list[str]:
    """Steps a, b (held the first time: its worker is killed there), c."""
    return [ctx.step("a", quick, "a"), ctx.step("b", hold_once, "b"), ctx.step("c", quick, "c")]


@queue.workflow(retry=RetryPolicy(max_attempts=1))
async def naps(ctx: DurableContext, seconds: float, count: int) -> int:
    """``count`` sleeps of ``seconds``, a step before each: suspended ``count`` times."""
    for i in range(count):
        await ctx.step(f"before-{i}", quick, f"before-{i}")
        await ctx.sleep(seconds)
    return int(await ctx.step("after", lambda: count))


@queue.workflow
def fan_out(ctx: DurableContext, n: int) -> list[int]:
    """``n`` children (``child-1`` held the first time: killed there), gathered."""
    ctx.step("before", quick, "fan-before")
    return list(ctx.gather(*(ctx.run(child, i) for i in range(n))))


@queue.workflow
async def approval(ctx: DurableContext, key: str) -> Any:
    return await ctx.wait_for_event("approve", key=key, timeout="2m")


@queue.workflow(timeout="3s", queue="wf-deadline")
async def overdue(ctx: DurableContext) -> None:
    await ctx.sleep("1h")


@queue.workflow(retry=RetryPolicy(max_attempts=1))
def fails_at_b(ctx: DurableContext) -> list[str]:
    """b fails the first time: the execution fails; ``retry()`` resumes it at b."""
    return [ctx.step("a", quick, "ra"), ctx.step("b", fail_once, "rb"), ctx.step("c", quick, "rc")]
