"""The queue app the chaos drain's workers run (``queue-core worker tests.chaos.app:queue``).

Job ``i`` has a kind fixed by ``i % 100`` (:func:`kind_of`), so the checker knows from the
job's task name what it must have ended as:

=========  =====  ===================================================================
kind       share  body
=========  =====  ===================================================================
noop       87 %   sleeps 50-150 ms, returns ``i``
flaky       5 %   raises ``RuntimeError`` (retryable) on its first two executions
fatal       1 %   raises ``TaskError.fatal`` (dead-lettered at once)
slow        1 %   ``isolation="process"``, ``timeout=3s``: its first execution sleeps 9 s
                  (SIGTERMed at the deadline), the next returns
proc        3 %   ``isolation="process"``, returns ``i``
limited     3 %   ``Concurrency(3)`` across all workers, sleeps 100 ms
=========  =====  ===================================================================

Every task allows 30 attempts (kills make attempts ``lost``; a job must not run out of
them because of the chaos alone), fixed 50 ms backoff (``QC_CHAOS_BACKOFF``), no jitter.
A backoff under half a millisecond rounds to a lost-retry delay of 0, which keeps a
reaped job's place in line (:func:`queue_core.rules.outcomes.reap_ready_at`).

Side channel: every execution of a body appends ``S <i> <attempt> <pid>`` when it starts
to ``$QC_CHAOS_DIR/exec-<pid>.log`` (one file per process, one ``O_APPEND`` write per
line), so the driver counts executions from what actually ran, not from storage.

Env: ``QUEUE_CORE_URL`` (``memory://`` when unset, so importing this module in the test
process opens nothing), ``QC_CHAOS_DIR``, ``QC_CHAOS_LEASE`` (seconds, default 2),
``QC_CHAOS_BACKOFF`` (the retry backoff, a duration, default ``50ms``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from queue_core import Concurrency, JobContext, Queue, Task, TaskError

KINDS = ("noop", "flaky", "fatal", "slow", "proc", "limited")
LIMIT = 3  # the concurrency limit of ``limited``
FLAKY_FAILURES = 2  # executions of a flaky job that raise before one returns
SLOW_TIMEOUT_S = 3.0
MAX_ATTEMPTS = 30


def kind_of(i: int) -> str:
    """The kind of job ``i`` (see the module docstring for the shares)."""
    r = i % 100
    if r < 5:
        return "flaky"
    if r == 5:
        return "fatal"
    if r == 6:
        return "slow"
    if r < 10:
        return "proc"
    if r < 13:
        return "limited"
    return "noop"


def _log(i: int, attempt: int) -> None:
    folder = os.environ.get("QC_CHAOS_DIR")
    if not folder:
        return
    path = os.path.join(folder, f"exec-{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"S {i} {attempt} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def noop(i: int, ctx: JobContext) -> int:
    _log(i, ctx.attempt)
    time.sleep(0.05 + (i % 101) / 1000)
    return i


def flaky(i: int, ctx: JobContext) -> int:
    _log(i, ctx.attempt)
    executions = _executions(i)
    if executions <= FLAKY_FAILURES:
        raise RuntimeError(f"flaky job {i}: failure {executions} of {FLAKY_FAILURES}")
    return i


def fatal(i: int, ctx: JobContext) -> int:
    _log(i, ctx.attempt)
    raise TaskError.fatal(f"fatal job {i}")


def slow(i: int, ctx: JobContext) -> int:
    _log(i, ctx.attempt)
    if _executions(i) == 1:
        time.sleep(3 * SLOW_TIMEOUT_S)  # past the timeout: SIGTERMed at the deadline
    return i


def proc(i: int, ctx: JobContext) -> int:
    _log(i, ctx.attempt)
    return i


def limited(i: int, ctx: JobContext) -> int:
    _log(i, ctx.attempt)
    time.sleep(0.1)
    return i


def _executions(i: int) -> int:
    """How many executions of job ``i`` have started so far, this one included.

    Counted from the side channel, not from the attempt number: an attempt lost to a
    SIGKILL before its body ran must not use up one of the designed failures.
    """
    folder = os.environ.get("QC_CHAOS_DIR")
    if not folder:
        return 1
    needle = f"S {i} ".encode()
    n = 0
    for name in os.listdir(folder):
        if name.startswith("exec-"):
            with open(os.path.join(folder, name), "rb") as f:
                n += sum(1 for line in f if line.startswith(needle))
    return n


def register(q: Queue) -> dict[str, Task[Any, Any]]:
    """Declare the six tasks on ``q`` (workers and the producer declare them alike)."""
    common: dict[str, Any] = {
        "max_attempts": MAX_ATTEMPTS,
        "retry_backoff": os.environ.get("QC_CHAOS_BACKOFF", "50ms"),
        "retry_backoff_kind": "fixed",
        "retry_jitter": 0,
    }
    return {
        "noop": q.task(name="noop", **common)(noop),
        "flaky": q.task(name="flaky", **common)(flaky),
        "fatal": q.task(name="fatal", **common)(fatal),
        "slow": q.task(name="slow", isolation="process", timeout=SLOW_TIMEOUT_S, **common)(slow),
        "proc": q.task(name="proc", isolation="process", **common)(proc),
        "limited": q.task(name="limited", concurrency=Concurrency(LIMIT), **common)(limited),
    }


queue = Queue(
    os.environ.get("QUEUE_CORE_URL", "memory://"),
    lease=float(os.environ.get("QC_CHAOS_LEASE", "2")),
)
register(queue)
