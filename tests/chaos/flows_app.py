"""The flow the chaos drain with flows runs (``queue-core worker tests.chaos.flows_app:queue``).

One diamond flow, ``chaos-diamond``: ``a`` -> (``b``, ``c``) -> ``d``, every step a short
body (30-80 ms) that returns a value derived from the input ``{"n": n}``, so the driver
knows each execution's result: ``{"a": n, "b": n + 1, "c": 10 n, "d": [n + 1, 10 n]}``.
Retries: 30 attempts, fixed 50 ms, no jitter (kills make attempts ``lost``; an execution
must not run out of them because of the chaos alone).

Side channel: each body appends ``S <execution> <step> <attempt> <pid>`` when it starts and
``E ...`` when it returns to ``$QC_CHAOS_DIR/flow-<pid>.log`` (one ``O_APPEND`` write per
line), so the driver counts executions of step bodies from what actually ran.

Env: ``QUEUE_CORE_URL`` (``memory://`` when unset), ``QC_CHAOS_DIR``, ``QC_CHAOS_LEASE``
(seconds, default 2).
"""

from __future__ import annotations

import os
import time
from typing import Any

from queue_core import JobContext, Queue, RetryPolicy
from queue_core.flows.api import Flow

FLOW = "chaos-diamond"
STEPS = ("a", "b", "c", "d")
RETRY = RetryPolicy(max_attempts=30, backoff="fixed", initial=0.05, jitter=0)


def expected(n: int) -> dict[str, Any]:
    """The result of the execution started with ``{"n": n}``."""
    return {"a": n, "b": n + 1, "c": 10 * n, "d": [n + 1, 10 * n]}


def _log(kind: str, ctx: JobContext) -> None:
    folder = os.environ.get("QC_CHAOS_DIR")
    if not folder:
        return
    line = f"{kind} {ctx.execution_id} {ctx.step_id} {ctx.attempt} {os.getpid()}\n"
    fd = os.open(
        os.path.join(folder, f"flow-{os.getpid()}.log"),
        os.O_WRONLY | os.O_APPEND | os.O_CREAT,
        0o644,
    )
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _run(ctx: JobContext, value: Any, n: int) -> Any:
    _log("S", ctx)
    time.sleep(0.03 + (n % 51) / 1000)
    _log("E", ctx)
    return value


def step_a(input: dict[str, int], ctx: JobContext) -> int:
    return int(_run(ctx, input["n"], input["n"]))


def step_b(a: int, ctx: JobContext) -> int:
    return int(_run(ctx, a + 1, a))


def step_c(a: int, ctx: JobContext) -> int:
    return int(_run(ctx, a * 10, a))


def step_d(b: int, c: int, ctx: JobContext) -> list[int]:
    return list(_run(ctx, [b, c], b))


def declare(q: Queue) -> Flow:
    """Declare ``chaos-diamond`` on ``q`` (workers and the driver alike)."""
    flow = q.flow(FLOW, retry=RETRY)
    a = flow.step(id="a")(step_a)
    b = flow.step(id="b", depends_on=[a])(step_b)
    c = flow.step(id="c", depends_on=[a])(step_c)
    flow.step(id="d", depends_on=[b, c])(step_d)
    return flow


queue = Queue(
    os.environ.get("QUEUE_CORE_URL", "memory://"),
    lease=float(os.environ.get("QC_CHAOS_LEASE", "2")),
)
declare(queue)
