"""Start-up order (queue_core/worker/startup.py): the worker's first claim goes before the
presence registration and the reaper's first pass, which follow it at once, at the same
clock reading, whether the claim found jobs or failed."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import anyio
import pytest

from backends.memory import MemoryStorage
from queue_core import Queue, StorageUnavailable
from queue_core.records.jobs import ClaimedJob, ReapedJob
from queue_core.records.workers import WorkerInfo
from queue_core.testing import T0, ManualClock
from queue_core.worker import Worker
from tests.unit.worker.conftest import until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class OrderStorage(MemoryStorage):
    """memory:// noting each claim, reap and registration with the clock reading; the
    first claim waits for ``release`` (and raises ``fail`` if set)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.calls: list[tuple[str, int]] = []
        self.release = threading.Event()
        self.fail: Exception | None = None

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        n: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        self._noted()
        return super().claim(worker_id, queues, n, lease_ms, now=now)

    def claim_ahead(
        self,
        worker_id: str,
        queues: Sequence[str],
        n: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        """A claim too (a worker that prefetches claims its free slots' jobs so)."""
        self._noted()
        return super().claim_ahead(worker_id, queues, n, lease_ms, now=now)

    def _noted(self) -> None:
        first = not any(name == "claim" for name, _ in self.calls)
        self.calls.append(("claim", self.store.clock()))
        if first:
            assert self.release.wait(30)
            if self.fail is not None:
                raise self.fail

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        self.calls.append(("reap", self.store.clock()))
        return super().reap(now=now, limit=limit)

    def register_worker(self, info: WorkerInfo) -> None:
        self.calls.append(("register", self.store.clock()))
        super().register_worker(info)


def _names(storage: OrderStorage) -> list[str]:
    return [name for name, _ in storage.calls]


async def _start_and_check(storage: OrderStorage, queue: Queue, after: set[str]) -> None:
    worker = Worker(
        queue, slots=2, reap_interval=3600, presence_ttl=9000, install_signal_handlers=False
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run_async)
        try:
            await until(lambda: _names(storage) == ["claim"], "the first claim is under way")
            for _ in range(20):  # the services had every chance to call storage
                await anyio.sleep(0.005)
            assert _names(storage) == ["claim"]
            storage.release.set()
            await until(lambda: after <= set(_names(storage)), f"{after} after the claim")
            assert storage.calls[0] == ("claim", T0)
            assert {(name, T0) for name in after} <= set(storage.calls)
        finally:
            storage.release.set()
            worker.stop()


async def test_the_services_call_storage_only_after_the_first_claim() -> None:
    clock = ManualClock(start_ms=T0)
    storage = OrderStorage(clock)
    queue = Queue(storage=storage, clock=clock, lease=3)
    ran: list[int] = []

    @queue.task()
    def job(i: int) -> None:
        ran.append(i)

    job.delay(1)
    await _start_and_check(storage, queue, {"reap", "register"})
    assert ran == [1]


async def test_a_failed_first_claim_starts_the_services_too() -> None:
    """The registration follows the failed claim; the reaper starts too but holds off
    after an outage, as always (worker/outage.py), so it makes no pass yet."""
    clock = ManualClock(start_ms=T0)
    storage = OrderStorage(clock)
    storage.fail = StorageUnavailable("down for the test")
    await _start_and_check(storage, Queue(storage=storage, clock=clock, lease=3), {"register"})


def test_a_worker_freezes_the_start_heap_once_per_process() -> None:
    # Full collections during a drain walked every object the start made (20-45 ms each,
    # docs/guides/performance.md); the first worker of a process moves them out of the
    # collector's reach before its first claim, and later workers leave that as it is.
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import gc
        from queue_core import Queue
        from queue_core.worker import Worker
        q = Queue("memory://")
        before = gc.get_freeze_count()
        for _ in range(2):
            Worker(q, burst=True, install_signal_handlers=False, scheduler=False).run()
            print(gc.get_freeze_count() - before)
        """
    )
    got = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    first, second = map(int, got.stdout.split())
    assert first > 1000 and second <= first, got.stdout  # frozen objects may still be freed
