"""The app of the chaos drain with flows and durable workflows
(``queue-core worker tests.chaos.durable_app:queue``).

It declares the diamond flow of :mod:`tests.chaos.flows_app` (a small fan-out / fan-in:
``a`` -> (``b``, ``c``) -> ``d``) and one durable workflow, ``chaos-durable``::

    a = ctx.step("a", ...)                       # memoized step
    ctx.sleep(QC_CHAOS_WF_SLEEP)                 # suspended: sleep
    b = ctx.step("b", ...)
    go = ctx.wait_for_event("chaos-go", key=n)   # suspended: event (the driver sends it)
    kids = ctx.gather(ctx.run(child, ...) x2)    # suspended: children (fan-out of jobs)
    c = ctx.step("c", ...)

so a SIGKILL can land mid-step, mid-sleep, while it waits for its event and while its
children run. Its result is fixed by its input (:func:`expected_workflow`).

Side channel (as the plain drain counts runs): every memoized step body and every child
body appends ``S <execution> <step> <attempt> <pid>`` when it starts and ``E ...`` when it
returns to ``$QC_CHAOS_DIR/wf-<pid>.log`` (one ``O_APPEND`` write per line). A step's
``<attempt>`` is the function step's attempt that ran the body; a child's is its job's.

Env: ``QC_MEMPROXY`` (a served memory storage, :mod:`tests.integration.helpers.memproxy`)
else ``QUEUE_CORE_URL`` (``memory://`` when unset), ``QC_CHAOS_DIR``, ``QC_CHAOS_LEASE``
(seconds, default 2), ``QC_CHAOS_WF_SLEEP`` (the workflow's ``ctx.sleep``, default 0.5 s).
"""

from __future__ import annotations

import os
import time
from typing import Any

from queue_core import DurableContext, JobContext, Queue, RetryPolicy
from tests.chaos.flows_app import declare
from tests.integration.helpers.memproxy import ENV, connect

WORKFLOW = "chaos-durable"
EVENT = "chaos-go"
STEPS = ("a", "b", "c")  # the workflow's memoized steps
CHILDREN = 2
RETRY = RetryPolicy(max_attempts=30, backoff="fixed", initial=0.05, jitter=0)
MAX_ATTEMPTS = 30


def expected_workflow(n: int) -> dict[str, Any]:
    """The result of the workflow started with ``n``."""
    kids = [100 * n + k for k in range(CHILDREN)]
    return {"a": n, "b": n + 1, "go": {"n": n}, "c": [n + 1, n, kids]}


def event_data(n: int) -> dict[str, int]:
    """What the driver sends to the execution started with ``n``."""
    return {"n": n}


def _log(kind: str, execution: str, step: str, attempt: int) -> None:
    folder = os.environ.get("QC_CHAOS_DIR")
    if not folder:
        return
    line = f"{kind} {execution} {step} {attempt} {os.getpid()}\n"
    fd = os.open(
        os.path.join(folder, f"wf-{os.getpid()}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
    )
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def step_body(execution: str, step: str, attempt: int, value: Any) -> Any:
    """A memoized step's body: logs its start and end around 20-40 ms of work."""
    _log("S", execution, step, attempt)
    time.sleep(0.02 + (ord(step[0]) % 21) / 1000)
    _log("E", execution, step, attempt)
    return value


def child(execution: str, n: int, k: int, ctx: JobContext) -> int:
    """A child job of the workflow (``ctx.run``)."""
    _log("S", execution, f"child-{k}", ctx.attempt)
    time.sleep(0.05)
    _log("E", execution, f"child-{k}", ctx.attempt)
    return 100 * n + k


def chaos_workflow(ctx: DurableContext, n: int) -> dict[str, Any]:
    ex = ctx.execution_id
    a = ctx.step("a", step_body, ex, "a", ctx.attempt, n)
    ctx.sleep(float(os.environ.get("QC_CHAOS_WF_SLEEP", "0.5")))
    b = ctx.step("b", step_body, ex, "b", ctx.attempt, a + 1)
    go = ctx.wait_for_event(EVENT, key=str(n), timeout="30m")
    kids = ctx.gather(*(ctx.run(CHILD, ex, n, k) for k in range(CHILDREN)))
    c = ctx.step("c", step_body, ex, "c", ctx.attempt, [b, go["n"], kids])
    return {"a": a, "b": b, "go": go, "c": c}


def open_queue() -> Queue:
    """The app's queue: on the served memory storage when ``QC_MEMPROXY`` is set."""
    lease = float(os.environ.get("QC_CHAOS_LEASE", "2"))
    if os.environ.get(ENV):
        return Queue(storage=connect(), lease=lease)  # type: ignore[arg-type]
    return Queue(os.environ.get("QUEUE_CORE_URL", "memory://"), lease=lease)


def declare_all(q: Queue) -> tuple[Any, Any]:
    """Declare the diamond flow, the child task and the workflow on ``q``; returns
    ``(flow, workflow)`` (workers and the driver declare them alike)."""
    global CHILD
    flow = declare(q)
    CHILD = q.task(
        name="chaos-child",
        max_attempts=MAX_ATTEMPTS,
        retry_backoff="50ms",
        retry_backoff_kind="fixed",
        retry_jitter=0,
    )(child)
    workflow = q.workflow(name=WORKFLOW, retry=RETRY)(chaos_workflow)
    return flow, workflow


CHILD: Any = None
queue = open_queue()
declare_all(queue)
