"""An idle worker on a storage with ``SupportsWaitClaim`` waits and claims in one call
(``ClaimLoop._wait_then_claim``) and starts what that call claimed."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from backends.memory import MemoryStorage
from queue_core import JobState, Queue
from queue_core.records.jobs import ClaimedJob
from queue_core.storage.abilities import SupportsWaitClaim
from queue_core.worker import Worker


class WaitClaimStorage(MemoryStorage):
    """The reference backend with ``wait_and_claim`` (its wait, then its claim), and a
    log of what each call claimed."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.timeouts: list[float] = []

    def wait_and_claim(
        self, worker_id: str, queues: Sequence[str], limit: int, lease_ms: int, timeout: float
    ) -> list[ClaimedJob]:
        self.timeouts.append(timeout)
        self.wait_for_jobs(queues, timeout)
        jobs = self.claim(worker_id, queues, limit, lease_ms)
        self.calls.append([j.id for j in jobs])
        return jobs


def _until(cond: object, what: str) -> None:
    limit = time.monotonic() + 10
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < limit, f"never happened: {what}"
        time.sleep(0.002)


def _state(storage: MemoryStorage, job_id: str) -> JobState | None:
    record = storage.get_job(job_id)
    return None if record is None else record.state


def test_an_idle_worker_claims_through_wait_and_claim() -> None:
    storage = WaitClaimStorage()
    assert isinstance(storage, SupportsWaitClaim)
    q = Queue(storage=storage)
    ran: list[int] = []

    @q.task(name="t")
    def t(i: int) -> int:
        ran.append(i)
        return i

    worker = Worker(q, install_signal_handlers=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        _until(lambda: storage.timeouts, "the worker waits idle")
        ids = []
        for i in range(3):  # one at a time, each after the worker is idle again
            waits = len(storage.timeouts)  # the wait in progress is counted
            ids.append(t.delay(i).id)
            _until(lambda n=i + 1: len(ran) == n, f"job {i} ran")
            _until(lambda w=waits: len(storage.timeouts) > w, "waiting again")
        for job_id in ids:
            _until(lambda j=job_id: _state(storage, j) is JobState.SUCCEEDED, "recorded")
        claimed = [i for call in storage.calls for i in call]
        assert sorted(claimed) == sorted(ids) and ran == [0, 1, 2]
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()


def test_a_busy_worker_waits_for_a_wake_up_instead_of_polling() -> None:
    """While a body runs, a job enqueued is claimed by the wake-up wait (which returns
    when it arrives), not by a poll of ``claim`` some milliseconds later; those waits
    last no longer than the poll's pause did (a storage that polls inside its wait
    picks up no later than before)."""
    storage = WaitClaimStorage()
    q = Queue(storage=storage)
    release = threading.Event()
    ran: list[int] = []

    @q.task(name="t")
    def t(i: int) -> int:
        ran.append(i)
        if i == 0:
            release.wait(10)
        return i

    worker = Worker(q, install_signal_handlers=False, slots=2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        _until(lambda: storage.timeouts, "the worker waits idle")
        first = t.delay(0).id
        _until(lambda: ran == [0], "the first body runs")
        waits = len(storage.calls)
        _until(lambda w=waits: len(storage.calls) > w + 3, "the busy worker waits again")
        busy = storage.timeouts[waits:]
        assert busy and max(busy) <= 0.008, busy
        second = t.delay(1).id
        _until(lambda: ran == [0, 1], "the second body ran while the first runs")
        assert not release.is_set()
        claimed = [i for call in storage.calls for i in call]
        assert first in claimed and second in claimed
    finally:
        release.set()
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()
