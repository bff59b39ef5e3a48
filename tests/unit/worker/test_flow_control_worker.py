"""The worker's side of flow control: progress writes (at most one per second per
attempt, the latest kept) and rate-limited bodies that could not start by their bound."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from backends.memory import MemoryStorage
from queue_core import JobContext, JobState, Queue
from queue_core.records.control import ProgressUpdate
from queue_core.records.jobs import ClaimedJob, LeaseRef, Outcome
from queue_core.rules.limits import RATE_START_MS
from queue_core.worker import claiming, ratestart
from queue_core.worker.progress import ProgressBook, ProgressWriter

A, B = LeaseRef("a", 1, "t"), LeaseRef("b", 1, "t")


def test_the_book_writes_at_once_then_at_most_every_second_the_latest_waiting() -> None:
    book = ProgressBook()
    book.waiting[A] = ProgressUpdate(0.1)
    assert book.take_due(1000) == ([(A, ProgressUpdate(0.1))], None)
    book.waiting[A] = ProgressUpdate(0.2)
    book.waiting[A] = ProgressUpdate(0.3)  # only the latest waits
    book.waiting[B] = ProgressUpdate(0.5)
    assert book.take_due(1500) == ([(B, ProgressUpdate(0.5))], 2000)
    assert book.take_due(1999) == ([], 2000)
    assert book.take_due(2000) == ([(A, ProgressUpdate(0.3))], None)
    book.forget(A)
    assert A not in book.written and A not in book.waiting


def _wait_for(check: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "not written in time"
        threading.Event().wait(0.005)


def test_the_writer_writes_the_first_report_and_the_latest_once_due() -> None:
    storage = MemoryStorage()
    storage.enqueue([_job()])
    (claimed,) = storage.claim("w", ["default"], 1, 30_000)
    now = [10_000]
    writer = ProgressWriter(storage, monotonic_ms=lambda: now[0])
    writer.report(claimed.ref, ProgressUpdate(0.1, "first"))

    def fraction() -> float | None:
        got = storage.get_progress(claimed.id)
        return None if got is None else got.fraction

    _wait_for(lambda: fraction() == 0.1)
    writer.report(claimed.ref, ProgressUpdate(0.2))
    writer.report(claimed.ref, ProgressUpdate(0.3))
    threading.Event().wait(0.05)
    assert fraction() == 0.1, "a second write within a second waits"
    now[0] += 1000
    writer.report(claimed.ref, ProgressUpdate(0.4))  # wakes the thread: due now
    _wait_for(lambda: fraction() == 0.4)
    writer.close()


def _job() -> Any:
    from queue_core.testing import new_job

    return new_job()


def test_a_rate_limited_body_that_cannot_start_in_time_is_given_back_unspent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = Queue("memory://")
    late = [True]

    def started_late(job: ClaimedJob, began: float, clock: object) -> bool:
        if job.start_by is not None and late:
            return bool(late.pop())
        return False

    monkeypatch.setattr(claiming, "started_late", started_late)

    @queue.task(rate_limit="100/s")
    def call() -> str:
        return "ok"

    handle = call.delay()
    queue.run_worker(burst=True, slots=1, install_signal_handlers=False)
    assert handle.result(timeout=1) == "ok"
    first, second = handle.attempts()
    assert (first.outcome, first.reason) == (Outcome.LOST, "start_late")
    assert second.outcome is Outcome.SUCCEEDED
    info = handle.info()
    assert (info.state, info.max_attempts) == (JobState.SUCCEEDED, 2)  # no attempt spent


def _claimed(started_at: int) -> ClaimedJob:
    return ClaimedJob(
        id="j", task_name="t", queue="q", payload=b"", attempt=1, lease_token="x",
        lease_expires_at=0, deadline=None, max_attempts=1, started_at=started_at,
        start_by=started_at + RATE_START_MS,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("storage_behind_ms", "call_began_ms_ago", "late"),
    [
        (5, 5, False),  # the claim returned 5 ms ago
        (80, 80, True),  # a slow claim: the body would start 80 ms after the claim's now
        (80, 3, False),  # the storage's clock 80 ms behind, a 3 ms call: skew, not lateness
        (-500, 60, False),  # the storage's clock ahead: nothing is read off it
    ],
)
def test_started_late_reads_the_wall_clocks_capped_by_the_claim_call(
    storage_behind_ms: int, call_began_ms_ago: int, late: bool
) -> None:
    wall_ms, mono = 1_700_000_000_000, 5000.0
    clock = _Clock(wall_ms, mono)
    job = _claimed(wall_ms - storage_behind_ms)
    assert ratestart.started_late(job, mono - call_began_ms_ago / 1000, clock) is late
    assert ratestart.started_late(_claimed_plain(), mono - 10, clock) is False


class _Clock:
    """The machine's clocks read at one instant (wall ms, monotonic s)."""

    def __init__(self, wall_ms: int, mono: float) -> None:
        self.wall_ms, self.mono = wall_ms, mono

    def now_ms(self) -> int:
        return self.wall_ms

    def monotonic(self) -> float:
        return self.mono


def _claimed_plain() -> ClaimedJob:
    return ClaimedJob(
        id="j", task_name="t", queue="q", payload=b"", attempt=1, lease_token="x",
        lease_expires_at=0, deadline=None, max_attempts=1,
    )  # fmt: skip


def test_progress_of_an_async_body_is_written_without_blocking_the_loop() -> None:
    queue = Queue("memory://")

    @queue.task
    async def crunch(ctx: JobContext = JobContext.INJECTED) -> None:
        ctx.progress(0.5, "half")

    handle = crunch.delay()
    queue.run_worker(burst=True, install_signal_handlers=False)
    got = handle.progress()
    assert got is not None and (got.fraction, got.message) == (0.5, "half")
