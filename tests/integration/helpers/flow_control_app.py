"""The queue app of the flow-control end-to-end tests (SPEC §13), and their harness.

Workers load it with ``queue-core worker tests.integration.helpers.flow_control_app:queue``
(a URL backend: real worker processes) or run it in threads of the test's own process
(``memory://``, which processes cannot share). Every body appends one line per start to a
log, ``<task> <arg> <pid> <time.time()>``, one ``O_APPEND`` write each, so the tests read
what actually ran and when each body started.

Env read by the workers: ``QUEUE_CORE_URL`` (``memory://`` when unset) and ``QC_FC_LOG``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from queue_core import Concurrency, JobContext, Queue, RateLimit
from queue_core.worker import Worker

ROOT = Path(__file__).resolve().parents[3]
APP = "tests.integration.helpers.flow_control_app:queue"
CLI = str(Path(sys.executable).parent / "queue-core")


def _log(task: str, arg: object) -> None:
    line = f"{task} {arg} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(os.environ.get("QC_FC_LOG", os.devnull), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def declare(q: Queue) -> dict[str, Any]:
    """Declare the tasks on ``q`` (workers and producers declare them alike)."""
    partner = q.rate_limit("partner-api", "5/s")

    @q.task(name="fc.limited", rate_limit="10/s")
    def limited(i: int) -> None:
        _log("limited", i)
        # longer than a worker's 4 slots can start at 10/s (4 / 0.6 s = 6.7/s): while one
        # worker's slots are full the rate still has room, so the other worker starts
        # bodies too -- a fast worker cannot take every grant of a run
        time.sleep(0.6)

    @q.task(name="fc.shared_a", rate_limit=partner)
    def shared_a(i: int) -> None:
        _log("shared", f"a{i}")

    @q.task(name="fc.shared_b", rate_limit=partner)
    def shared_b(i: int) -> None:
        _log("shared", f"b{i}")

    @q.task(name="fc.keyed", rate_limit=RateLimit("3/s", key=lambda tenant, *_: tenant))
    def keyed(tenant: str, i: int) -> None:
        _log("keyed", f"{tenant}{i}")

    @q.task(name="fc.fair", concurrency=Concurrency(1, "round_robin", key=lambda t, *_: t))
    def fair(tenant: str, i: int) -> None:
        _log("fair", f"{tenant}{i}")

    @q.task(
        name="fc.build",
        concurrency=Concurrency(1, "cancel_in_progress", key=lambda doc, _v: doc),
    )
    def build(doc: str, version: int, *, ctx: JobContext = JobContext.INJECTED) -> int:
        _log("build", f"{doc}{version}")
        end = time.monotonic() + 60
        while version == 1 and not ctx.cancelled and time.monotonic() < end:
            time.sleep(0.01)
        return version

    @q.task(name="fc.mail", queue="emails")
    def mail(i: int) -> None:
        _log("mail", i)

    @q.task(name="fc.copy")
    def copy(n: int, *, ctx: JobContext = JobContext.INJECTED) -> None:
        for k in range(1, n + 1):
            ctx.progress(k / n, f"{k} of {n}")
        _log("copy", n)

    tasks = (limited, shared_a, shared_b, keyed, fair, build, mail, copy)
    return {**{f.__name__: f for f in tasks}, "docs": _declare_docs(q)}


def _declare_docs(q: Queue) -> Any:
    """Flow ``fc.docs``: one step that runs until told it was superseded (version 1)."""
    docs = q.flow(
        "fc.docs", concurrency=Concurrency(1, "cancel_in_progress", key=lambda i: i["doc"])
    )

    @docs.step()
    def render(input: dict[str, Any], ctx: JobContext) -> int:
        _log("render", f"{input['doc']}{input['version']}")
        end = time.monotonic() + 60
        while input["version"] == 1 and not ctx.cancelled and time.monotonic() < end:
            time.sleep(0.01)
        if ctx.cancelled:
            _log("render_told", input["version"])  # the body learnt it was superseded
        return int(input["version"])

    return docs


queue = Queue(os.environ.get("QUEUE_CORE_URL", "memory://"), lease=2)
declared = declare(queue)
"""What :func:`declare` returned for :data:`queue`: its tasks and flows by name."""


# --------------------------------------------------------------------------- harness


def read_starts(log: Path, task: str) -> list[tuple[str, int, float]]:
    """``(arg, pid, time)`` of every start of ``task``, in time order."""
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        name, arg, pid, t = line.split()
        if name == task:
            out.append((arg, int(pid), float(t)))
    return sorted(out, key=lambda s: s[2])


class Workers:
    """``n`` workers on one storage: console-script processes on a URL backend, or
    threads of this process on ``memory://`` (its storage lives in one process)."""

    def __init__(self, q: Queue, url: str, log: Path, n: int, *args: str) -> None:
        self.log = log
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workers: list[Worker] = []
        self.threads: list[threading.Thread] = []
        self._log_before = os.environ.get("QC_FC_LOG")
        os.environ["QC_FC_LOG"] = str(log)  # the in-process bodies log here too
        if url == "memory://":
            for _ in range(n):
                w = Worker(q, slots=4, install_signal_handlers=False, queues=["default", "emails"])
                self.workers.append(w)
                self.threads.append(threading.Thread(target=w.run, daemon=True))
            for th in self.threads:
                th.start()
            return
        env = dict(os.environ, QUEUE_CORE_URL=url, PYTHONPATH=str(ROOT))
        for k in range(n):
            with open(f"{log}.w{k}.err", "wb") as err:
                self.procs.append(
                    subprocess.Popen(
                        [CLI, "worker", APP, "--queues", "default,emails", "--slots", "4", *args],
                        cwd=ROOT,
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                    )
                )

    def errors(self) -> str:
        return "\n".join(
            Path(f"{self.log}.w{k}.err").read_text(errors="replace")[-2000:]
            for k in range(len(self.procs))
        )

    def alive(self) -> None:
        for k, p in enumerate(self.procs):
            assert p.poll() is None, f"worker {k} exited {p.returncode}:\n{self.errors()}"

    def stop(self) -> None:
        for w in self.workers:
            w.stop()
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for th in self.threads:
            th.join(30)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        if self._log_before is None:
            os.environ.pop("QC_FC_LOG", None)
        else:
            os.environ["QC_FC_LOG"] = self._log_before


def wait_until(check: Any, timeout: float, what: str, workers: Workers | None = None) -> None:
    """Poll ``check()`` every 20 ms; fail naming ``what`` after ``timeout`` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        if workers is not None:
            workers.alive()
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout} s: {what}")


def in_any_window(times: Sequence[float], window: float) -> int:
    """The most of ``times`` that any half-open window ``(t - window, t]`` holds."""
    return max((sum(1 for x in times if t - window < x <= t) for t in times), default=0)
