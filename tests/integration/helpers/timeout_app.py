"""Task bodies for the timeout, heartbeat, cancellation and shutdown tests (issue 6).

The bodies are plain module-level functions, so a process-isolated attempt finds them
by module and qualified name in its child. :func:`build` registers them on a new
:class:`Queue` for one storage URL, so each test gets its own queue and file.

Every body that the tests must see start writes a marker file into ``marker_dir``:
``start-<attempt>`` holding ``<pid> <pgid>``, written atomically (rename).

Run as a worker: ``queue-core worker tests.integration.helpers.timeout_app:app`` with env
``QC_TEST_URL`` (``app`` is built on first access, so importing this module in a child
process opens no storage).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

from queue_core import JobContext, Queue
from queue_core.worker import Worker

BEAT_FOR = 2.0
"""Seconds a beating attempt runs, calling ``ctx.heartbeat()`` every ``BEAT_EVERY``."""
BEAT_EVERY = 0.2


def mark(marker_dir: str, attempt: int, extra: str = "") -> None:
    """Write ``start-<attempt>`` = ``<pid> <pgid> [extra]`` atomically."""
    tmp = Path(marker_dir, f".start-{attempt}-{os.getpid()}")
    tmp.write_text(f"{os.getpid()} {os.getpgid(0)} {extra}".strip())
    tmp.rename(Path(marker_dir, f"start-{attempt}"))


def spin(marker_dir: str, ctx: JobContext) -> None:
    """Burn CPU forever; only a signal ends it."""
    mark(marker_dir, ctx.attempt)
    while True:
        pass


def spin_ignoring_sigterm(marker_dir: str, ctx: JobContext) -> None:
    """Burn CPU forever and ignore SIGTERM: only SIGKILL ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    mark(marker_dir, ctx.attempt)
    while True:
        pass


def quick(tag: str) -> str:
    """Return at once."""
    return f"ok {tag}"


def silent_then_beat(marker_dir: str, silent_for: float, ctx: JobContext) -> str:
    """Attempt 1 sleeps ``silent_for`` s without a heartbeat; later ones beat and return."""
    mark(marker_dir, ctx.attempt)
    if ctx.attempt == 1:
        time.sleep(silent_for)
        return "attempt 1 woke up"
    end = time.monotonic() + BEAT_FOR
    while time.monotonic() < end:
        ctx.heartbeat()
        time.sleep(BEAT_EVERY)
    return f"beat on attempt {ctx.attempt}"


async def silent_then_beat_async(marker_dir: str, silent_for: float, ctx: JobContext) -> str:
    """The async form of :func:`silent_then_beat`."""
    mark(marker_dir, ctx.attempt)
    if ctx.attempt == 1:
        await anyio.sleep(silent_for)
        return "attempt 1 woke up"
    end = time.monotonic() + BEAT_FOR
    while time.monotonic() < end:
        ctx.heartbeat()
        await anyio.sleep(BEAT_EVERY)
    return f"beat on attempt {ctx.attempt}"


def sleep_first(marker_dir: str, seconds: float, ctx: JobContext) -> str:
    """Attempt 1 sleeps ``seconds`` (ignoring everything); later attempts return at once."""
    mark(marker_dir, ctx.attempt)
    if ctx.attempt == 1:
        time.sleep(seconds)
        Path(marker_dir, "returned-1").write_text("attempt 1 returned")
    return f"done on attempt {ctx.attempt}"


async def sleep_async(marker_dir: str, seconds: float, ctx: JobContext) -> str:
    """Sleep on the event loop (cancellable at any await)."""
    mark(marker_dir, ctx.attempt)
    await anyio.sleep(seconds)
    return "slept"


def sleep_sync(marker_dir: str, seconds: float, ctx: JobContext) -> str:
    """Sleep in a sync body (thread or child process)."""
    mark(marker_dir, ctx.attempt)
    time.sleep(seconds)
    return "slept"


def crash_first(marker_dir: str, ctx: JobContext) -> str:
    """Attempt 1 ends its process with ``os._exit(3)``; later attempts return."""
    mark(marker_dir, ctx.attempt)
    if ctx.attempt == 1:
        os._exit(3)
    return f"survived on attempt {ctx.attempt}"


def kill_worker(marker_dir: str, ctx: JobContext) -> str:
    """SIGKILL the worker running it, at once (a crash in native code)."""
    mark(marker_dir, ctx.attempt)
    os.kill(os.getpid(), signal.SIGKILL)
    return "never"


async def until_stopped(marker_dir: str, ctx: JobContext) -> str:
    """Sleep 30 s on the event loop; when stopped, write ``stopped-<attempt>`` = seconds
    since the body started (by ``time.time()``) and ``started-at-<attempt>`` = its start."""
    begin = time.time()
    mark(marker_dir, ctx.attempt)
    _note(marker_dir, f"started-at-{ctx.attempt}", repr(begin))
    try:
        await anyio.sleep(30)
    finally:
        _note(marker_dir, f"stopped-{ctx.attempt}", repr(time.time() - begin))
    return "never stopped"


def _note(marker_dir: str, name: str, text: str) -> None:
    Path(marker_dir, name).write_text(text)


async def step_until_stopped(input: dict[str, Any], ctx: JobContext) -> str:
    """A flow step: :func:`until_stopped` with ``input["markers"]``."""
    return await until_stopped(input["markers"], ctx)


def fetch_users(input: dict[str, Any], ctx: JobContext) -> str:
    """A flow step: attempt 1 sleeps ``input["seconds"]``; later attempts return."""
    return sleep_first(input["markers"], input["seconds"], ctx)


def report(ctx: JobContext) -> str:
    """A flow step after ``fetch`` (it takes no parameter of that step)."""
    return f"reported on attempt {ctx.attempt}"


def poll_cancelled(marker_dir: str, ctx: JobContext) -> str:
    """Loop until ``ctx.cancelled`` turns true, then return (a cooperative thread body)."""
    mark(marker_dir, ctx.attempt)
    end = time.monotonic() + 60
    while not ctx.cancelled:
        if time.monotonic() > end:
            raise RuntimeError("never saw ctx.cancelled")
        time.sleep(0.02)
    Path(marker_dir, "saw-cancel").write_text("yes")
    return "stopped early"


_BODIES: dict[str, tuple[Any, dict[str, Any]]] = {
    "spin": (spin, {"timeout": 1, "isolation": "process", "kill_grace": 0.5}),
    "spin_ignoring_sigterm": (
        spin_ignoring_sigterm,
        {"timeout": 1, "isolation": "process", "kill_grace": 0.5},
    ),
    "quick": (quick, {}),
    "beat_thread": (silent_then_beat, {"heartbeat": 2.5, "max_retries": 1}),
    "beat_async": (silent_then_beat_async, {"heartbeat": 2.5, "max_retries": 1}),
    "beat_process": (
        silent_then_beat,
        {"heartbeat": 2.5, "max_retries": 1, "isolation": "process", "kill_grace": 0.5},
    ),
    "sleep_first": (sleep_first, {"max_retries": 2}),
    "sleep_first_no_retry": (sleep_first, {}),  # the default: 0 retries
    "stuck_thread": (sleep_first, {"timeout": 1, "max_retries": 1}),
    "sleep_async": (sleep_async, {"max_retries": 3}),
    "sleep_thread": (sleep_sync, {"max_retries": 3}),
    "sleep_process": (
        sleep_sync,
        {"max_retries": 3, "isolation": "process", "kill_grace": 0.5},
    ),
    "poll_cancelled": (poll_cancelled, {"max_retries": 3}),
    "until_stopped": (until_stopped, {"timeout": 1.5}),
    "crash_first": (crash_first, {"max_retries": 1, "isolation": "process"}),
    "kill_worker": (kill_worker, {}),  # the default: 0 retries
}


def build(url: str, *, lease: float = 3.0) -> Queue:
    """A queue on ``url`` with every body registered under its short name.

    Retries wait 0.5 s exactly (no jitter), so tests can check "retried on schedule".
    """
    queue = Queue(url, lease=lease)
    queue.migrate()
    for name, (body, options) in _BODIES.items():
        opts = {"retry_backoff": 0.5, "retry_jitter": 0, **options}
        queue.task(name=name, **opts)(body)
    flow = queue.flow("deploy")  # steps keep the default: 0 retries
    fetch = flow.step(id="fetch")(fetch_users)
    flow.step(depends_on=[fetch])(report)
    FLOWS[id(queue)] = flow
    step_bound = queue.flow("step-timeout")  # a step with timeout=1.5
    step_bound.step(id="wait", timeout=1.5)(step_until_stopped)
    flow_bound = queue.flow("flow-timeout", timeout=1.5)  # the execution's deadline
    flow_bound.step(id="wait")(step_until_stopped)
    FLOWS[id(queue), "step"], FLOWS[id(queue), "flow"] = step_bound, flow_bound
    return queue


FLOWS: dict[Any, Any] = {}
"""The flows of each queue :func:`build` made: ``deploy`` by ``id(queue)``, the 1.5 s
step timeout and flow timeout by ``(id(queue), "step")`` and ``(id(queue), "flow")``."""


@contextmanager
def worker_thread(queue: Queue, **options: Any) -> Iterator[Worker]:
    """Run a :class:`Worker` on ``queue`` in a thread; stop it (and re-raise its errors) on exit."""
    options.setdefault("reap_interval", 0.2)
    options.setdefault("shutdown_grace", 0.5)
    worker = Worker(queue, install_signal_handlers=False, **options)
    errors: list[BaseException] = []

    def main() -> None:
        try:
            worker.run()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)

    thread = threading.Thread(target=main, name="test worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        if thread.is_alive():
            frame = sys._current_frames().get(thread.ident or 0)
            stack = "".join(traceback.format_stack(frame)) if frame else "?"
            raise AssertionError(f"the worker did not stop within 30 s; it is at:\n{stack}")
        if errors:
            raise errors[0]


def wait_for(pred: Callable[[], Any], timeout: float, what: str = "condition") -> Any:
    """Poll ``pred`` every 10 ms until it returns something truthy; return that."""
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(0.01)


def started(marker_dir: str | Path, attempt: int = 1) -> tuple[int, int] | None:
    """``(pid, pgid)`` from the ``start-<attempt>`` marker, or ``None`` if not there yet."""
    try:
        pid, pgid = Path(marker_dir, f"start-{attempt}").read_text().split()[:2]
    except FileNotFoundError:
        return None
    return int(pid), int(pgid)


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member (``os.killpg(pgid, 0)``)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def __getattr__(name: str) -> Any:
    if name == "app":
        return build(os.environ["QC_TEST_URL"], lease=float(os.environ.get("QC_TEST_LEASE", "3")))
    raise AttributeError(name)
