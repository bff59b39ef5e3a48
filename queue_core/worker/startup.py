"""Start-up order: the first claim goes before the services' first storage calls.

A worker's first job waits for its first claim; the presence registration and the
reaper's first pass need storage too (on PostgreSQL each opens its own connection, on
SQLite each takes the write lock), and started together with the claim they compete
with it for the CPU, the connection set-up and the lock. So they start once the first
claim has returned (with jobs, empty, or with a storage error), at the same clock
reading on a manual clock; the reaper still makes its first pass at once after that,
so a restarted worker recovers its predecessor's jobs without waiting an interval.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

__all__ = ["FirstClaim", "after_first_claim", "freeze_start_heap"]

_frozen = [False]


def freeze_start_heap() -> None:
    """Once per process, before the first claim: leave every object the start made (the
    imports, the app, the worker's parts) out of all later garbage collections
    (``gc.freeze``). They live as long as the process anyway; without this, each full
    collection during a drain walks them all again (20-45 ms, measured in a 1,000-step
    fan-out: docs/guides/performance.md)."""
    if not _frozen[0]:
        _frozen[0] = True
        gc.freeze()


class FirstClaim:
    """Set once the worker's first claim call has returned (or failed)."""

    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = anyio.Event()

    def done(self) -> None:
        if not self.event.is_set():
            self.event.set()


async def after_first_claim(
    first: FirstClaim, service: Callable[..., Awaitable[Any]], *args: Any
) -> None:
    """Run ``service(*args)`` once the first claim is done."""
    await first.event.wait()
    await service(*args)
