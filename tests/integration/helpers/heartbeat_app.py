"""Tasks that beat their heartbeat for a while, one per isolation (async, thread, process):
the app of the storage-outage tests. Workers load it with
``queue-core worker tests.integration.helpers.heartbeat_app:queue``.

Env: ``QUEUE_CORE_URL`` (``memory://`` when unset), ``QC_BEAT_SECONDS`` (how long each body
beats, default 6), ``QC_BEAT_LOG`` (each body appends ``<task> start <pid>`` /
``<task> end <pid>``).
"""

from __future__ import annotations

import os
import time

import anyio

from queue_core import JobContext, Queue

SECONDS = float(os.environ.get("QC_BEAT_SECONDS", "6"))
LOG = os.environ.get("QC_BEAT_LOG", os.devnull)
TASKS = ("beat.async", "beat.thread", "beat.process")

queue = Queue(os.environ.get("QUEUE_CORE_URL", "memory://"))


def _log(text: str) -> None:
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


@queue.task(name="beat.async", heartbeat="2s", timeout=60, max_retries=0)
async def beat_async(ctx: JobContext = JobContext.INJECTED) -> str:
    _log("beat.async start")
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        ctx.heartbeat()
        await anyio.sleep(0.05)
    _log("beat.async end")
    return "async"


def _beat_sync(name: str, ctx: JobContext) -> str:
    _log(f"{name} start")
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        ctx.heartbeat()
        time.sleep(0.05)
    _log(f"{name} end")
    return name


@queue.task(name="beat.thread", heartbeat="2s", timeout=60, max_retries=0)
def beat_thread(ctx: JobContext = JobContext.INJECTED) -> str:
    return _beat_sync("beat.thread", ctx)


@queue.task(name="beat.process", heartbeat="2s", timeout=60, max_retries=0, isolation="process")
def beat_process(ctx: JobContext = JobContext.INJECTED) -> str:
    return _beat_sync("beat.process", ctx)
