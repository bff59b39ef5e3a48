"""The app the Redis worker tests run in subprocesses (``queue-core worker`` loads it).

Env: ``QC_TEST_URL`` (the redis URL), ``QC_TEST_LOG`` (a file each execution appends
one line to: ``<task> <arg> <attempt> <pid>``).
"""

from __future__ import annotations

import os
import time

from queue_core import Queue

queue = Queue(os.environ["QC_TEST_URL"], lease=2)
LOG = os.environ["QC_TEST_LOG"]


def _log(*parts: object) -> None:
    line = " ".join(str(p) for p in parts) + "\n"
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one O_APPEND write: lines never interleave
    finally:
        os.close(fd)


@queue.task(name="record")
def record(i: int, ctx: object = None) -> int:
    _log("record", i, getattr(ctx, "attempt", 0), os.getpid())
    return i


@queue.task(name="hang_first", max_retries=2, retry_backoff="10ms")
def hang_first(tag: str, ctx: object = None) -> str:
    attempt = getattr(ctx, "attempt", 0)
    _log("hang_first", tag, attempt, os.getpid())
    if attempt == 1:
        time.sleep(120)  # the test SIGKILLs the worker meanwhile
    return tag
