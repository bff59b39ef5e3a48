"""A stop asked of an idle worker ends the wake-up wait its claim thread is blocked in
(``SupportsWaitInterrupt``): the worker stops at once, not when the wait times out."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from queue_core import Queue
from queue_core.storage.abilities import SupportsWaitInterrupt
from queue_core.worker import Worker


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
def test_a_stop_ends_the_idle_wait_in_progress(url: str, tmp_path: Path) -> None:
    queue = Queue(url=f"sqlite:///{tmp_path / 'q.db'}" if url == "sqlite" else url)

    @queue.task(name="t")
    def t() -> None: ...

    storage = queue.storage()
    assert isinstance(storage, SupportsWaitInterrupt)
    waits: list[float] = []
    waiting = threading.Event()
    wait_for_jobs = storage.wait_for_jobs

    def watched(queues: Sequence[str], timeout: float) -> bool:
        waits.append(timeout)
        waiting.set()
        return wait_for_jobs(queues, timeout)

    storage.wait_for_jobs = watched  # type: ignore[method-assign]
    worker = Worker(queue, install_signal_handlers=False, reap_interval=3600)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert waiting.wait(10), "the idle worker never waited"
        began = time.monotonic()
        worker.stop()
        thread.join(10)
        took = time.monotonic() - began
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()
    # the stop came as a wait began: without the interrupt it would have lasted it out
    assert took < waits[-1] / 2, (took, waits)
    queue.close()
