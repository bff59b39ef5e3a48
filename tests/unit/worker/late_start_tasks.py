"""Task bodies whose module takes a while to import: in a fresh child the body starts
:data:`IMPORT_S` seconds after its request was sent (the never-early tests)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import FrameType

IMPORT_S = 0.6
time.sleep(IMPORT_S)


def nap(seconds: float) -> str:
    """Sleep ``seconds``, then return."""
    time.sleep(seconds)
    return "done"


def until_stopped(path: str) -> None:
    """Run until SIGTERM; then write how long the body ran to ``path`` and exit."""
    started = time.monotonic()

    def stop(signum: int, frame: FrameType | None) -> None:
        Path(path).write_text(f"{time.monotonic() - started:.6f}")
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        time.sleep(0.01)
