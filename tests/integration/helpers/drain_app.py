"""The queue app the cross-backend worker tests run in subprocesses, and their harness.

Workers load it with ``queue-core worker tests.integration.helpers.drain_app:queue``.

Env read by the workers:
    QUEUE_CORE_URL: the storage URL (``memory://`` when unset, so importing this module in
        the test process opens nothing).
    QC_DRAIN_LOG: a file every execution appends to, one ``O_APPEND`` write per line so
        concurrent processes never interleave: ``S <i> <attempt> <pid> <time>`` when the
        body starts and ``E <i> <attempt> <pid> <time>`` when it returns.
    QC_DRAIN_SLEEP: seconds each body sleeps between its two lines (default 0).
    QC_DRAIN_LEASE: the lease workers take (default 30 s).

The test side uses :func:`register` (the same task on the producer's own ``Queue``, so
``.map`` enqueues with the task's options), :func:`spawn_workers` and :func:`read_log`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from queue_core import JobContext, Queue, Task

ROOT = Path(__file__).resolve().parents[3]
APP = "tests.integration.helpers.drain_app:queue"
CLI = str(Path(sys.executable).parent / "queue-core")  # the installed console script
TASK = "drain"

LOG = os.environ.get("QC_DRAIN_LOG", os.devnull)
SLEEP = float(os.environ.get("QC_DRAIN_SLEEP", "0"))


def _log(kind: str, i: int, attempt: int) -> None:
    line = f"{kind} {i} {attempt} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one O_APPEND write: lines never interleave
    finally:
        os.close(fd)


def drain(i: int, ctx: JobContext) -> int:
    """Log the start and the end of this execution; sleep ``QC_DRAIN_SLEEP`` between."""
    _log("S", i, ctx.attempt)
    if SLEEP:
        time.sleep(SLEEP)
    _log("E", i, ctx.attempt)
    return i


def register(q: Queue) -> Task[Any, Any]:
    """Declare the ``drain`` task on ``q`` (workers and producers declare it alike)."""
    return q.task(name=TASK, max_retries=5, retry_backoff="10ms", retry_jitter=0)(drain)


queue = Queue(
    os.environ.get("QUEUE_CORE_URL", "memory://"),
    lease=float(os.environ.get("QC_DRAIN_LEASE", "30")),
)
register(queue)


# --------------------------------------------------------------------------- test harness


def spawn_workers(
    url: str,
    log: Path,
    n: int,
    *cli_args: str,
    sleep: float = 0.0,
    lease: float = 30.0,
) -> list[subprocess.Popen[bytes]]:
    """Start ``n`` console-script workers on ``url``; each one's stderr goes to a file
    beside ``log`` (``<log>.worker<k>.err``)."""
    env = dict(
        os.environ,
        QUEUE_CORE_URL=url,
        QC_DRAIN_LOG=str(log),
        QC_DRAIN_SLEEP=str(sleep),
        QC_DRAIN_LEASE=str(lease),
        PYTHONPATH=str(ROOT),
    )
    procs = []
    for k in range(n):
        with open(f"{log}.worker{k}.err", "wb") as err:
            procs.append(
                subprocess.Popen(
                    [CLI, "worker", APP, *cli_args],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
            )
    return procs


def worker_errors(log: Path, k: int) -> str:
    """The tail of worker ``k``'s stderr (for assertion messages)."""
    try:
        return Path(f"{log}.worker{k}.err").read_text(errors="replace")[-3000:]
    except OSError:
        return "(no stderr file)"


def wait_all(procs: Sequence[subprocess.Popen[bytes]], log: Path, timeout: float) -> None:
    """Wait for every worker to exit with status 0 (each gets ``timeout`` from now)."""
    end = time.monotonic() + timeout
    for k, p in enumerate(procs):
        try:
            p.wait(max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {k} still running after {timeout} s:\n{worker_errors(log, k)}"
            ) from None
        assert p.returncode == 0, f"worker {k} exited {p.returncode}:\n{worker_errors(log, k)}"


def stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """Kill whatever is still running (test clean-up)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait(10)


def wait_for(
    pred: Callable[[], bool],
    timeout: float,
    what: str,
    workers: Sequence[subprocess.Popen[bytes]] = (),
    log: Path | None = None,
) -> None:
    """Poll ``pred`` every 20 ms until true; fail naming ``what`` after ``timeout``, or at
    once (with its stderr) when one of ``workers`` has exited meanwhile."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        for k, p in enumerate(workers):
            if p.poll() is not None:
                err = worker_errors(log, k) if log is not None else ""
                raise AssertionError(
                    f"worker {k} exited {p.returncode} while waiting: {what}\n{err}"
                )
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout} s: {what}")


def started_by(log: Path) -> dict[int, int]:
    """How many executions each worker pid has started so far."""
    counts: dict[int, int] = defaultdict(int)
    try:
        with open(log, "rb") as f:
            for line in f:
                if line.startswith(b"S "):
                    counts[int(line.split()[3])] += 1
    except FileNotFoundError:
        pass
    return dict(counts)


@dataclass
class Execution:
    """One run of the body as the log shows it."""

    job: int
    attempt: int
    pid: int
    started: float
    ended: float | None = None


def count_started(log: Path) -> int:
    """How many executions have started so far (cheap enough to poll)."""
    try:
        with open(log, "rb") as f:
            return sum(1 for line in f if line.startswith(b"S "))
    except FileNotFoundError:
        return 0


def read_log(log: Path) -> dict[int, list[Execution]]:
    """Executions per job argument, in attempt order."""
    runs: dict[tuple[int, int, int], Execution] = {}
    for line in log.read_text().splitlines():
        kind, i, attempt, pid, t = line.split()
        key = (int(i), int(attempt), int(pid))
        if kind == "S":
            assert key not in runs, f"execution started twice: {line}"
            runs[key] = Execution(int(i), int(attempt), int(pid), float(t))
        else:
            assert key in runs and runs[key].ended is None, f"end without start: {line}"
            runs[key].ended = float(t)
    per_job: dict[int, list[Execution]] = defaultdict(list)
    for ex in runs.values():
        per_job[ex.job].append(ex)
    for execs in per_job.values():
        execs.sort(key=lambda e: (e.attempt, e.started))
    return dict(per_job)
