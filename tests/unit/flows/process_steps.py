"""Module-level bodies of process-isolated flow steps (a child process imports this
module to run them; see ``test_process_steps.py``)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any


def probe(input: dict[str, Any], ctx: Any) -> list[object]:
    """Report what the child's ``ctx`` carries, and the child's pid."""
    return [ctx.execution_id, ctx.step_id, ctx.job_id, ctx.attempt, os.getpid()]


def warm() -> int:
    """A quick step: it leaves a started child in the worker's pool for the next one."""
    return os.getpid()


def stubborn(input: dict[str, str], ctx: Any) -> None:
    """Write its pid, note SIGTERM in a file and keep going, writing the time it was
    last alive every 10 ms: only SIGKILL ends it."""
    out = Path(input["dir"])

    def on_term(signum: int, frame: FrameType | None) -> None:
        (out / f"sigterm-{ctx.attempt}").write_text(f"{time.time():.6f}")

    signal.signal(signal.SIGTERM, on_term)
    (out / f"pid-{ctx.attempt}").write_text(str(os.getpid()))
    end = time.monotonic() + 30
    fd = os.open(out / f"alive-{ctx.attempt}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    while time.monotonic() < end:
        os.write(fd, f"{time.time():.6f}\n".encode())  # one line per write: never torn
        time.sleep(0.01)
