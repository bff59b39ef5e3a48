"""Worker tests run on the reference backend, ``memory://``."""

from __future__ import annotations

import pytest

from queue_core import Queue


@pytest.fixture
def queue() -> Queue:
    q = Queue("memory://")
    yield q
    q.close()


def drain(q: Queue, **kw: object) -> None:
    """Run a burst worker in this thread until the queues are empty."""
    kw.setdefault("reap_interval", 0.1)
    kw.setdefault("install_signal_handlers", False)
    q.run_worker(burst=True, **kw)  # type: ignore[arg-type]
