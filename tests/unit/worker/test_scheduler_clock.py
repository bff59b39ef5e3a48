"""The worker's scheduler service on a manual clock: each tick enqueues exactly one job
however many workers schedule, a stopped scheduler loses no tick while another runs,
missed ticks are skipped or (catch_up) run once. Nothing sleeps: the tests advance the
clock and wait for state."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from backends.memory import MemoryStorage
from queue_core import Queue, StorageError
from queue_core.records.jobs import JobRecord, JobState
from queue_core.testing import T0, ManualClock
from queue_core.worker import Worker
from tests.unit.worker.conftest import until

pytestmark = pytest.mark.anyio

EVERY = 10  # seconds; T0 is a multiple of 10 s
START = T0 + 1_000  # the clock starts 1 s after a tick: the first tick is at START + 9 s
NAME = "tests.tick"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=START)


@pytest.fixture
def storage(clock: ManualClock) -> MemoryStorage:
    return MemoryStorage(clock=clock)


def periodic_queue(storage: MemoryStorage, clock: ManualClock, **kw: Any) -> Queue:
    queue = Queue(storage=storage, clock=clock)

    @queue.periodic(every=f"{EVERY}s", name=NAME, args=(7,), queue="periodic", **kw)
    def tick(n: int) -> int:
        return n

    return queue


def make_worker(queue: Queue, **kw: Any) -> Worker:
    # the workers take jobs from another queue: every periodic job stays to be counted
    kw.setdefault("queues", ["elsewhere"])
    return Worker(queue, install_signal_handlers=False, reap_interval=3600, slots=1, **kw)


def tick_jobs(storage: MemoryStorage) -> list[JobRecord]:
    jobs = storage.list_jobs(queue="periodic", limit=1000)
    return sorted(jobs, key=lambda j: j.run_at)


def run_ats(storage: MemoryStorage) -> list[int]:
    return [j.run_at for j in tick_jobs(storage)]


def timer_at(clock: ManualClock, at: float) -> bool:
    """Whether a timer is set for the monotonic time ``at``."""
    return any(abs(t - at) < 1e-6 for t in clock.pending_timers())


def passed(workers: Sequence[Worker], n: int) -> bool:
    """Whether the scheduler of every worker made ``n`` passes (then it sleeps until
    the next tick: it registers that timer before the event loop runs anything else)."""
    return all(w._scheduler is not None and w._scheduler.passes >= n for w in workers)


@asynccontextmanager
async def running(workers: Sequence[Worker]) -> AsyncIterator[list[anyio.CancelScope]]:
    """Run ``workers``; yields one cancel scope per worker (cancel = a crash)."""
    scopes = [anyio.CancelScope() for _ in workers]

    async def run(worker: Worker, scope: anyio.CancelScope) -> None:
        with scope:
            await worker.run_async()

    async with anyio.create_task_group() as tg:
        for worker, scope in zip(workers, scopes, strict=True):
            tg.start_soon(run, worker, scope)
        try:
            yield scopes
        finally:
            for worker in workers:
                worker.stop()


def tick(k: int) -> int:
    """Wall time of the k-th tick after START (k >= 1)."""
    return START - 1_000 + k * EVERY * 1_000


async def test_two_schedulers_over_ten_ticks_enqueue_exactly_ten_jobs(
    storage: MemoryStorage, clock: ManualClock
) -> None:
    queue = periodic_queue(storage, clock)
    workers = [make_worker(queue), make_worker(queue)]
    async with running(workers):
        await until(lambda: passed(workers, 1), "both schedulers wait for tick 1")
        assert tick_jobs(storage) == []  # the tick before START was not "missed" work
        for k in range(1, 11):
            clock.advance_ms(tick(k) - clock.now_ms())
            await until(partial(passed, workers, k + 1), f"passes of tick {k}")
            assert run_ats(storage) == [tick(i) for i in range(1, k + 1)]
    jobs = tick_jobs(storage)
    assert len(jobs) == 10
    assert {(j.task_name, j.state) for j in jobs} == {(NAME, JobState.QUEUED)}
    assert storage.schedule_ticks() == {NAME: tick(10)}
    assert sum(w._scheduler.enqueued for w in workers if w._scheduler) == 10


async def test_a_stopped_scheduler_loses_no_tick_while_another_runs(
    storage: MemoryStorage, clock: ManualClock
) -> None:
    queue = periodic_queue(storage, clock)
    survivor, crashing = make_worker(queue), make_worker(queue)
    async with running([survivor, crashing]) as scopes:
        await until(lambda: passed([survivor, crashing], 1), "both schedulers wait")
        for k in (1, 2, 3):
            clock.advance_ms(tick(k) - clock.now_ms())
            await until(partial(passed, [survivor, crashing], k + 1), f"tick {k}")
        scopes[1].cancel()  # the second worker dies without a goodbye
        await anyio.lowlevel.checkpoint()
        for k in range(4, 9):
            clock.advance_ms(tick(k) - clock.now_ms())
            await until(partial(passed, [survivor], k + 1), f"tick {k}")
        assert crashing._scheduler is not None and crashing._scheduler.passes == 4
    assert run_ats(storage) == [tick(i) for i in range(1, 9)]


async def test_ticks_missed_while_down_are_skipped_by_default(
    storage: MemoryStorage, clock: ManualClock
) -> None:
    queue = periodic_queue(storage, clock)
    task = queue.get_task(NAME)
    assert task is not None
    # the schedule last ran 5 ticks ago; nothing ran since
    old = task._make((7,), {}, task._template, 0, task.policy, run_at=tick(-5))
    storage.enqueue_tick(NAME, tick(-5), old)
    worker = make_worker(queue)
    async with running([worker]):
        await until(lambda: passed([worker], 1), "the scheduler waits")
        assert len(tick_jobs(storage)) == 1  # only the old one: the missed ticks skipped
        clock.advance_ms(tick(1) - clock.now_ms())
        await until(lambda: len(tick_jobs(storage)) == 2, "tick 1 enqueued")
    assert run_ats(storage) == [tick(-5), tick(1)]


async def test_catch_up_runs_the_missed_ticks_once(
    storage: MemoryStorage, clock: ManualClock
) -> None:
    queue = periodic_queue(storage, clock, catch_up=True)
    task = queue.get_task(NAME)
    assert task is not None
    old = task._make((7,), {}, task._template, 0, task.policy, run_at=tick(-5))
    storage.enqueue_tick(NAME, tick(-5), old)
    workers = [make_worker(queue), make_worker(queue)]
    async with running(workers):
        await until(lambda: passed(workers, 1), "both schedulers wait")
        # one run for the 5 missed ticks (the latest of them), however many schedulers
        assert run_ats(storage) == [tick(-5), tick(0)]
        clock.advance_ms(tick(1) - clock.now_ms())
        await until(lambda: passed(workers, 2), "tick 1")
    assert run_ats(storage) == [tick(-5), tick(0), tick(1)]


async def test_no_scheduler_and_burst_workers_do_not_schedule(
    storage: MemoryStorage, clock: ManualClock
) -> None:
    queue = periodic_queue(storage, clock)
    quiet = make_worker(queue, scheduler=False)
    assert make_worker(queue, burst=True).scheduler is False
    async with running([quiet]):
        await until(lambda: bool(clock.pending_timers()), "the worker's services sleep")
        clock.advance_ms(tick(3) - clock.now_ms())
        await until(lambda: bool(clock.pending_timers()), "the services sleep again")
    assert tick_jobs(storage) == []
    assert quiet._scheduler is None


async def test_periodic_jobs_run_with_their_arguments(
    storage: MemoryStorage, clock: ManualClock
) -> None:
    queue = periodic_queue(storage, clock)
    worker = make_worker(queue, queues=["periodic"])
    async with running([worker]):
        await until(lambda: passed([worker], 1), "the scheduler waits")
        clock.advance_ms(tick(1) - clock.now_ms())
        await until(
            lambda: [j.state for j in tick_jobs(storage)] == [JobState.SUCCEEDED], "the job ran"
        )
    (job,) = tick_jobs(storage)
    assert queue.job(job.id).result() == 7


class FlakyStorage(MemoryStorage):
    """memory:// whose ``enqueue_tick`` fails ``failures`` times, as an outage would."""

    failures = 0

    def enqueue_tick(self, schedule: str, tick_ms: int, job: Any, *, now: Any = None) -> bool:
        if self.failures:
            self.failures -= 1
            raise StorageError("storage unreachable (test)")
        return super().enqueue_tick(schedule, tick_ms, job, now=now)


async def test_a_storage_outage_delays_the_tick_but_does_not_lose_it(clock: ManualClock) -> None:
    storage = FlakyStorage(clock=clock)
    queue = periodic_queue(storage, clock)
    worker = make_worker(queue)
    async with running([worker]):
        await until(partial(passed, [worker], 1), "the scheduler waits")
        storage.failures = 2
        clock.advance_ms(tick(1) - clock.now_ms())
        await until(lambda: storage.failures == 1, "the first failure")
        # the scheduler's backoff, on the worker's clock (advanced once its timer is set:
        # the failure is counted on a thread before the loop schedules the back-off)
        await until(partial(timer_at, clock, clock.monotonic() + 0.05), "the back-off")
        clock.advance(0.05)
        await until(lambda: storage.failures == 0, "the second failure")
        assert tick_jobs(storage) == []
        await until(partial(timer_at, clock, clock.monotonic() + 0.1), "the doubled back-off")
        clock.advance(0.1)
        await until(lambda: len(tick_jobs(storage)) == 1, "the tick enqueued after the outage")
    assert run_ats(storage) == [tick(1)]


async def test_a_tick_is_logged_as_an_iso_time(
    storage: MemoryStorage, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="queue_core.worker")
    queue = periodic_queue(storage, clock)
    worker = make_worker(queue)
    async with running([worker]):
        await until(lambda: passed([worker], 1), "the scheduler waits")
        clock.advance_ms(tick(1) - clock.now_ms())
        await until(lambda: len(tick_jobs(storage)) == 1, "tick 1 enqueued")
    [job] = tick_jobs(storage)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("scheduled")]
    # tick(1) is T0 + 10 s: 2023-11-14T22:13:30Z, not epoch milliseconds (issue 23 item 8)
    assert lines == [f"scheduled {NAME} for tick 2023-11-14T22:13:30Z as job {job.id}"]
