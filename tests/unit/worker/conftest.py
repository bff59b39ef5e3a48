"""Worker tests run on the reference backend, ``memory://``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import anyio
import pytest

from queue_core import Queue
from queue_core.worker.process import ProcessPool


@pytest.fixture
def pool() -> Iterator[ProcessPool]:
    """A process pool of two children for tests on the calling thread (``run_direct`` or
    ``anyio.run``); closed after the test, leaving no child or process group behind.
    test_process_isolation.py overrides it with an async one for its event-loop tests."""
    pool = ProcessPool(2)
    try:
        yield pool
    finally:
        pids = pool.pids
        anyio.run(lambda: pool.aclose(grace=1.0))
    assert pool.pids == []  # aclose left nothing behind
    for pid in pids:
        assert not group_exists(pid)


def group_exists(pgid: int) -> bool:
    """Whether a process group ``pgid`` still has a member."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def queue() -> Iterator[Queue]:
    q = Queue("memory://")
    yield q
    q.close()


def drain(q: Queue, **kw: object) -> None:
    """Run a burst worker in this thread until the queues are empty."""
    kw.setdefault("reap_interval", 0.1)
    kw.setdefault("install_signal_handlers", False)
    q.run_worker(burst=True, **kw)  # type: ignore[arg-type]


async def until(cond: Callable[[], bool], what: str, limit: float = 10.0) -> None:
    """Wait for ``cond`` (a condition on state, not on time); fail after ``limit`` s.

    Polls: the state is changed by worker threads as well as by the event loop.
    """
    with anyio.move_on_after(limit):
        while not cond():  # noqa: ASYNC110 - see above
            await anyio.sleep(0.002)
        return
    raise AssertionError(f"never happened: {what}")
