"""Task bodies for the process-isolation tests; they run inside child processes."""

from __future__ import annotations

import enum
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from queue_core.records.errors import ConfigError, TaskError


def noop() -> None:
    """Return at once."""


def add(a: int, b: int) -> int:
    return a + b


def identity(value: Any) -> Any:
    """Return the argument as it arrived."""
    return value


class Level(enum.IntEnum):
    """An int subclass: must come back as itself, not as a plain int."""

    HIGH = 3


def high() -> Level:
    return Level.HIGH


def whoami() -> dict[str, Any]:
    """The child's identity: pid, process group, session and the attempt env var."""
    return {
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
        "attempt_env": os.environ.get("QUEUE_CORE_ATTEMPT"),
    }


def spin() -> None:
    """A hung sync body: never returns, never sleeps."""
    while True:
        pass


def spin_with_grandchild(pid_file: str) -> None:
    """Start a grandchild that sleeps, record its pid, then hang."""
    pid = os.fork()
    if pid == 0:  # grandchild
        time.sleep(60)
        os._exit(0)
    Path(pid_file).write_text(str(pid))
    while True:
        pass


def flush_on_sigterm(out: str) -> None:
    """Write progress; on SIGTERM flush what was done so far and exit."""
    done: list[int] = []

    def on_term(signum: int, frame: object) -> None:
        Path(out).write_text(f"partial {len(done)}")
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    Path(out + ".ready").write_text("ready")
    while True:
        done.append(1)
        time.sleep(0.001)


def ignore_sigterm(marker: str) -> None:
    """Ignore SIGTERM entirely, so only SIGKILL can stop it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(marker).write_text("ignoring")
    while True:
        time.sleep(0.01)


def exit_code(code: int) -> None:
    os._exit(code)


def kill_self(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(10)


def raise_value_error() -> None:
    raise ValueError("bad value 42")


def raise_fatal() -> None:
    raise TaskError.fatal("give up")


def raise_retryable() -> None:
    raise TaskError.retryable("try again")


class PickyTaskError(TaskError):
    """A TaskError whose constructor cannot be replayed by pickle."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}", non_retryable=True)


def raise_picky() -> None:
    raise PickyTaskError(7, "unpicklable")


def raise_config_error() -> None:
    raise ConfigError("bad", code="invalid_option")


def return_unpicklable() -> Any:
    return lambda: None


def beat(times: int, pause: float, *, ctx: Any) -> dict[str, Any]:
    """Call ctx.heartbeat() ``times`` times, ``pause`` seconds apart."""
    for _ in range(times):
        ctx.heartbeat()
        time.sleep(pause)
    return {
        "job_id": ctx.job_id,
        "attempt": ctx.attempt,
        "deadline": ctx.deadline,
        "cancelled": ctx.cancelled,
    }


def wait_cancelled(out: str, *, ctx: Any) -> None:
    """Handle SIGTERM by recording whether ctx.cancelled was already true."""

    def on_term(signum: int, frame: object) -> None:
        Path(out).write_text(f"cancelled={ctx.cancelled}")
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    while True:
        time.sleep(0.01)


async def async_body() -> int:
    return 1


class Wrapper:
    """Mimics a task object: the plain function is ``.fn``."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the wrapper itself must not be called in the child")


wrapped_add = Wrapper(add)


class Namespace:
    @staticmethod
    def nested() -> str:
        return "nested"


_calls = 0
"""Module state of the child: it persists across the attempts one warm child runs."""


def count_calls() -> tuple[int, int]:
    """How many times this child has run this body, and the child's pid."""
    global _calls
    _calls += 1
    return _calls, os.getpid()


def fork_then_exit(pid_file: str) -> None:
    """Start a grandchild that keeps the pipes open and sleeps, then exit with code 3."""
    pid = os.fork()
    if pid == 0:  # grandchild: inherits the child's pipe ends
        time.sleep(60)
        os._exit(0)
    Path(pid_file).write_text(str(pid))
    os._exit(3)


def report_progress(reports: list[tuple[Any, Any]], then_sleep: float = 0.0, *, ctx: Any) -> int:
    """Call ``ctx.progress(fraction, message)`` for each report at once, then sleep."""
    for fraction, message in reports:
        ctx.progress(fraction, message)
    time.sleep(then_sleep)
    return len(reports)


def progress_refusals(calls: list[tuple[Any, Any]], *, ctx: Any) -> list[tuple[str, Any, Any, str]]:
    """What ``ctx.progress`` raises for each ``(fraction, message)``: the error's class,
    ``code``, ``field`` and text."""
    seen: list[tuple[str, Any, Any, str]] = []
    for fraction, message in calls:
        try:
            ctx.progress(fraction, message)
        except Exception as exc:
            cls = type(exc)
            seen.append(
                (f"{cls.__module__}.{cls.__qualname__}", getattr(exc, "code", None),
                 getattr(exc, "field", None), str(exc))
            )  # fmt: skip
    return seen


def half_way(*, ctx: Any) -> str:
    """Report twice at once (the second waits in the child, sent before the answer)."""
    ctx.progress(0.2, "started")
    ctx.progress(0.5, "half")
    return "done"


def bad_progress(*, ctx: Any) -> None:
    """Report a fraction past 1.0: ``ctx.progress`` raises, and the body with it."""
    ctx.progress(1.5, "too far")
