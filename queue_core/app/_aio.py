"""The async producer API's one bridge to the event loop: run a blocking storage call in
a worker thread (``anyio.to_thread.run_sync``) so the caller's event loop keeps running.

Only the facade's ``*_async`` methods import this module, and only when called, so
``import queue_core`` still does not import anyio.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from anyio import to_thread

__all__ = ["run_sync", "sleep"]

T = TypeVar("T")


async def run_sync(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` in a worker thread; the event loop is never blocked."""
    return await to_thread.run_sync(functools.partial(func, *args, **kwargs))


async def sleep(seconds: float) -> None:
    """Pause this coroutine; other tasks of the event loop run meanwhile."""
    await anyio.sleep(seconds)
