"""Worker services on a manual clock: renewal cadence, heartbeat silence, deadlines,
shutdown grace, auto-replay. Time moves only when a test advances the clock; the
tests wait for conditions, never for time to pass."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from backends.memory import MemoryStorage
from queue_core import JobContext, JobState, Outcome, Queue, Replay
from queue_core.records.jobs import LeaseRef, RenewResult
from queue_core.testing import T0, ManualClock
from queue_core.worker import Worker
from tests.unit.worker.conftest import until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class RecordingStorage(MemoryStorage):
    """memory:// on the manual clock, noting the clock time of every renewal."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.renewals: list[tuple[int, int]] = []

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        self.renewals.append((self.store.clock(), len(refs)))
        return super().renew(refs, lease_ms, now=now)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=T0)


@pytest.fixture
def storage(clock: ManualClock) -> RecordingStorage:
    return RecordingStorage(clock)


@pytest.fixture
def queue(storage: RecordingStorage, clock: ManualClock) -> Queue:
    return Queue(storage=storage, clock=clock, lease=3)


@pytest.fixture
def gate() -> threading.Event:
    """Released at the end of each test so blocked bodies return."""
    return threading.Event()


def timer_at(clock: ManualClock, at: float) -> bool:
    return any(abs(t - at) < 1e-6 for t in clock.pending_timers())


@asynccontextmanager
async def running(worker: Worker, gate: threading.Event) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run_async)
        try:
            yield
        finally:
            gate.set()
            worker.stop()


def make_worker(queue: Queue, **kw: Any) -> Worker:
    kw.setdefault("slots", 2)
    kw.setdefault("reap_interval", 3600)
    kw.setdefault("presence_ttl", 9000)  # its refresh timer (3000.0) stays out of the way
    return Worker(queue, install_signal_handlers=False, **kw)


def blocking_task(queue: Queue, gate: threading.Event, **options: Any) -> Any:
    @queue.task(name="block", **options)
    def block(ctx: JobContext) -> str:
        gate.wait(30)
        return "done"

    return block


async def test_leases_renew_every_third_of_the_lease(
    queue: Queue, storage: RecordingStorage, clock: ManualClock, gate: threading.Event
) -> None:
    block = blocking_task(queue, gate)
    worker = make_worker(queue)  # lease 3 s (the queue's): renew every 1 s
    async with running(worker, gate):
        job = block.delay()
        await until(lambda: worker.stats()["running"] == 1, "the body runs")
        await until(lambda: timer_at(clock, 3600.0), "the reaper's first pass is over")
        await until(lambda: timer_at(clock, 1.0), "the renewer sleeps until 1.0")
        clock.advance(0.9)
        await until(lambda: timer_at(clock, 0.95), "the watchdog saw 0.9")
        assert storage.renewals == []
        clock.advance(0.1)
        await until(lambda: len(storage.renewals) == 1, "first renewal")
        assert storage.renewals == [(T0 + 1000, 1)]
        await until(lambda: timer_at(clock, 2.0), "the renewer sleeps until 2.0")
        clock.advance(1.0)
        await until(lambda: len(storage.renewals) == 2, "second renewal")
        assert storage.renewals == [(T0 + 1000, 1), (T0 + 2000, 1)]
        assert job.status() is JobState.RUNNING


async def test_heartbeat_silence_times_the_attempt_out(
    queue: Queue, clock: ManualClock, gate: threading.Event
) -> None:
    block = blocking_task(queue, gate, heartbeat="2s", max_retries=1, retry_backoff="10m")
    worker = make_worker(queue)
    async with running(worker, gate):
        job = block.delay()
        await until(lambda: worker.stats()["running"] == 1, "the body runs")
        await until(lambda: timer_at(clock, 3600.0), "the reaper's first pass is over")
        await until(lambda: timer_at(clock, 0.05), "the watchdog sleeps")
        # judged at the bound, never before it (storage's reaper waits a margin more)
        clock.advance(1.9)
        await until(lambda: timer_at(clock, 1.95), "the watchdog saw 1.9")
        assert job.attempts()[0].outcome is None
        clock.advance(0.1)
        await until(lambda: job.attempts()[0].outcome is not None, "attempt 1 recorded")
        record = job.attempts()[0]
        assert (record.outcome, record.reason) == (Outcome.TIMED_OUT, "heartbeat_timeout")
        assert record.message == "attempt 1 sent no heartbeat for 2 s"
        assert record.finished_at is not None
        assert round(record.finished_at.timestamp() * 1000) == T0 + 2000
        assert job.status() is JobState.QUEUED  # retried in 10 min
        assert worker.stats()["stuck"] == 1  # the thread cannot be stopped


async def test_attempt_deadline_times_the_attempt_out(
    queue: Queue, clock: ManualClock, gate: threading.Event
) -> None:
    block = blocking_task(queue, gate, timeout="10s", max_retries=0)
    worker = make_worker(queue)
    async with running(worker, gate):
        job = block.delay()
        await until(lambda: worker.stats()["running"] == 1, "the body runs")
        await until(lambda: timer_at(clock, 3600.0), "the reaper's first pass is over")
        await until(lambda: timer_at(clock, 0.05), "the watchdog sleeps")
        clock.advance(9.9)
        await until(lambda: timer_at(clock, 9.95), "the watchdog saw 9.9")
        assert job.status() is JobState.RUNNING  # never before the deadline
        clock.advance(0.1)  # 10.0: the deadline
        await until(lambda: job.status() is JobState.DEAD, "the job ends")
        record = job.attempts()[0]
        assert (record.outcome, record.reason) == (Outcome.TIMED_OUT, "timeout")
        assert record.message == "attempt 1 ran past its timeout of 10 s"
        assert queue.dead_letters()[0].reason == "retries_exhausted"


async def test_async_body_deadline_on_the_worker_clock(
    queue: Queue, clock: ManualClock, gate: threading.Event
) -> None:
    @queue.task(timeout="10s", max_retries=0)
    async def wait_forever() -> None:
        await anyio.sleep_forever()

    worker = make_worker(queue)
    async with running(worker, gate):
        job = wait_forever.delay()
        await until(lambda: worker.stats()["running"] == 1, "the body runs")
        await until(lambda: timer_at(clock, 3600.0), "the reaper's first pass is over")
        await until(lambda: timer_at(clock, 0.05), "the watchdog sleeps")
        clock.advance(9.9)
        await until(lambda: timer_at(clock, 9.95), "the watchdog saw 9.9")
        assert job.status() is JobState.RUNNING  # never before the deadline
        clock.advance(0.1)
        await until(lambda: job.status() is JobState.DEAD, "the job ends")
        record = job.attempts()[0]
        assert (record.outcome, record.reason, record.mode) == (
            Outcome.TIMED_OUT,
            "timeout",
            "async",
        )
        await until(lambda: worker.stats()["running"] == 0, "the body was cancelled")


async def test_shutdown_grace_then_attempts_are_released(
    queue: Queue, clock: ManualClock, gate: threading.Event
) -> None:
    block = blocking_task(queue, gate, max_retries=2)
    worker = make_worker(queue, shutdown_grace=5)
    done = anyio.Event()

    async def run() -> None:
        await worker.run_async()
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        job = block.delay()
        await until(lambda: worker.stats()["running"] == 1, "the body runs")
        await until(lambda: timer_at(clock, 3600.0), "the reaper's first pass is over")
        worker.stop()
        await until(lambda: timer_at(clock, 5.0), "shutdown waits until 5.0")
        clock.advance(4.9)
        await until(lambda: timer_at(clock, 4.95), "the watchdog saw 4.9")
        assert job.status() is JobState.RUNNING and not done.is_set()
        clock.advance(0.1)
        await until(done.is_set, "the worker stopped")
        gate.set()
    record = job.attempts()[0]
    assert (record.outcome, record.reason) == (Outcome.LOST, "worker_shutdown")
    assert job.status() is JobState.QUEUED


async def test_a_release_at_shutdown_spends_no_attempt_and_says_so_once(
    queue: Queue, clock: ManualClock, gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    block = blocking_task(queue, gate)  # 0 retries: its only attempt is released
    worker = make_worker(queue, shutdown_grace=2.5)
    done = anyio.Event()

    async def run() -> None:
        await worker.run_async()
        done.set()

    caplog.set_level("INFO", logger="queue_core.worker")
    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        job = block.delay()
        await until(lambda: worker.stats()["running"] == 1, "the body runs")
        await until(lambda: timer_at(clock, 3600.0), "the reaper's first pass is over")
        worker.stop()
        await until(lambda: timer_at(clock, 2.5), "shutdown waits until 2.5")
        clock.advance(2.5)
        await until(done.is_set, "the worker stopped")
        gate.set()
    assert job.status() is JobState.QUEUED
    assert job.info().max_attempts == 2
    assert queue.dead_letters() == []
    lines = [r.getMessage() for r in caplog.records if job.id in r.getMessage()]
    assert lines == [
        f"block job {job.id} attempt 1: lost (worker_shutdown) in 2.500 s -> released for "
        "retry; spends no attempt of its retry budget"
    ]
    # the stop line counts the released attempt (it said "after 0 attempts")
    (stop,) = [r.getMessage() for r in caplog.records if " stopped after " in r.getMessage()]
    assert stop.endswith(" stopped after 1 attempt (1 released for retry)"), stop
    assert worker.stats()["processed"] == 1


async def test_dead_letters_are_replayed_after_the_quiet_period(
    queue: Queue, clock: ManualClock, gate: threading.Event
) -> None:
    runs: list[str] = []

    @queue.task(max_retries=0, dead_letter_replay=Replay(after="10m", max_replays=2))
    def always_fails(tag: str) -> None:
        runs.append(tag)
        raise RuntimeError(f"broken {len(runs)}")

    worker = make_worker(queue, reap_interval=60)
    async with running(worker, gate):
        first = always_fails.delay("x")
        await until(lambda: len(queue.dead_letters()) == 1, "the first dead letter")
        e1 = queue.dead_letters()[0]
        assert (e1.job_id, e1.replay_of) == (first.id, None)
        await until(lambda: timer_at(clock, 60.0), "the reaper sleeps until 60")
        clock.advance(540)  # 9 min: not quiet long enough
        await until(lambda: timer_at(clock, 600.0), "the reaper passed at 540")
        assert [d.id for d in queue.dead_letters()] == [e1.id] and runs == ["x"]
        clock.advance(60)  # 10 min: replayed, fails again
        await until(lambda: [d.replay_of for d in queue.dead_letters()] == [e1.id], "replay 1 dead")
        e2 = queue.dead_letters()[0]
        await until(lambda: timer_at(clock, 660.0), "the reaper sleeps until 660")
        clock.advance(600)
        await until(lambda: [d.replay_of for d in queue.dead_letters()] == [e2.id], "replay 2 dead")
        e3 = queue.dead_letters()[0]
        await until(lambda: timer_at(clock, 1260.0), "the reaper passed at 1200")
        clock.advance(1200)  # long past: but max_replays=2 were made
        await until(lambda: timer_at(clock, 2460.0), "the reaper passed at 2400")
        assert [d.id for d in queue.dead_letters()] == [e3.id]
    assert runs == ["x", "x", "x"]
    assert first.status() is JobState.DEAD
    assert queue.job(e3.job_id).status() is JobState.DEAD


def test_flush_backoff_is_per_worker(queue: Queue) -> None:
    one, two = make_worker(queue), make_worker(queue)
    assert one._flush_backoff.next() == 0.05
    assert one._flush_backoff.next() == 0.1
    assert two._flush_backoff.current == 0.0
    assert two._flush_backoff.next() == 0.05


async def test_second_signal_ends_the_grace_at_once(
    queue: Queue, clock: ManualClock, gate: threading.Event
) -> None:
    block = blocking_task(queue, gate, max_retries=2)
    worker = make_worker(queue, shutdown_grace=30)
    done = anyio.Event()

    async def run() -> None:
        await worker.run_async()
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        job = block.delay()
        await until(lambda: worker.stats()["running"] == 1, "the body runs")
        worker.stop()
        await until(lambda: timer_at(clock, 30.0), "shutdown waits until 30.0")
        # what the signal handler does on a second SIGTERM/SIGINT
        worker.shutdown_grace = 0.0
        worker._request_stop()
        await until(done.is_set, "the worker stopped without the clock moving")
        gate.set()
    assert clock.monotonic() == 0.0
    record = job.attempts()[0]
    assert (record.outcome, record.reason) == (Outcome.LOST, "worker_shutdown")


def replays_of(queue: Queue, job_id: str) -> object:
    """The replay count stored in a job's options (``None`` when there is none)."""
    record = queue.storage().get_job(job_id)
    assert record is not None
    return json.loads(record.options)["replays"] if record.options else None


async def test_a_fresh_worker_continues_the_chain_and_stops_at_max_replays(
    storage: RecordingStorage, clock: ManualClock, gate: threading.Event
) -> None:
    """The count is stored with the job: a new worker on a new queue object, sharing
    only the storage, goes on where the first stopped and makes max_replays in all."""
    runs: list[int] = []

    def register(q: Queue) -> Any:
        @q.task(name="flaky", max_retries=0, dead_letter_replay=Replay(after="1m", max_replays=3))
        def flaky() -> None:
            runs.append(1)
            raise RuntimeError("broken")

        return flaky

    first_queue = Queue(storage=storage, clock=clock, lease=3)
    first = make_worker(first_queue, reap_interval=60)
    async with running(first, gate):
        register(first_queue).delay()
        await until(lambda: len(first_queue.dead_letters()) == 1, "the first dead letter")
        await until(lambda: timer_at(clock, 60.0), "the reaper sleeps until 60")
        clock.advance(60)
        await until(lambda: len(runs) == 2, "replay 1 ran")
        await until(
            lambda: [d.replay_of is not None for d in first_queue.dead_letters()] == [True],
            "replay 1 died",
        )
    (e2,) = first_queue.dead_letters()
    assert replays_of(first_queue, e2.job_id) == 1

    second_queue = Queue(storage=storage, clock=clock, lease=3)
    register(second_queue)
    second = make_worker(second_queue, reap_interval=60)

    def counts() -> list[object]:
        return [replays_of(second_queue, d.job_id) for d in second_queue.dead_letters()]

    def next_pass() -> bool:
        return timer_at(clock, clock.monotonic() + 60.0)

    async with running(second, gate):
        for replay in (2, 3):
            await until(next_pass, "the reaper sleeps")
            clock.advance(60)
            # each lambda is awaited within its iteration
            await until(lambda: len(runs) == replay + 1, f"replay {replay} ran")  # noqa: B023
            await until(lambda: counts() == [replay], f"replay {replay} died")  # noqa: B023
        await until(next_pass, "the reaper sleeps")
        clock.advance(600)  # long past: but max_replays=3 were made
        await until(next_pass, "the reaper passed")
        assert counts() == [3]
    assert len(runs) == 4


async def test_a_replay_by_hand_counts_toward_max_replays(
    queue: Queue, clock: ManualClock, gate: threading.Event
) -> None:
    runs: list[int] = []

    @queue.task(max_retries=0, dead_letter_replay=Replay(after="1m", max_replays=2))
    def always_fails() -> None:
        runs.append(1)
        raise RuntimeError("broken")

    worker = make_worker(queue, reap_interval=60)
    async with running(worker, gate):
        always_fails.delay()
        await until(lambda: len(queue.dead_letters()) == 1, "the first dead letter")
        by_hand = queue.retry_dead(queue.dead_letters()[0].id)  # replay 1 of 2
        await until(lambda: queue.job(by_hand).status() is JobState.DEAD, "it died again")
        await until(lambda: timer_at(clock, 60.0), "the reaper sleeps until 60")
        clock.advance(60)  # the worker makes replay 2
        await until(lambda: len(runs) == 3, "replay 2 ran")
        await until(
            lambda: [d.job_id != by_hand for d in queue.dead_letters()] == [True],
            "replay 2 died",
        )
        (entry,) = queue.dead_letters()
        await until(lambda: timer_at(clock, 120.0), "the reaper sleeps until 120")
        clock.advance(600)
        await until(lambda: timer_at(clock, 720.0), "the reaper passed at 660")
        assert [d.id for d in queue.dead_letters()] == [entry.id]
    assert len(runs) == 3
    assert replays_of(queue, entry.job_id) == 2


async def test_a_dead_letter_whose_job_was_pruned_is_not_replayed(
    storage: RecordingStorage, clock: ManualClock, gate: threading.Event
) -> None:
    """Without the job record the count is unknown: no replay (never more than
    max_replays)."""
    runs: list[int] = []
    queue = Queue(storage=storage, clock=clock, lease=3)

    @queue.task(max_retries=0, dead_letter_replay=Replay(after="1m", max_replays=3))
    def always_fails() -> None:
        runs.append(1)
        raise RuntimeError("broken")

    worker = make_worker(queue, reap_interval=60)
    async with running(worker, gate):
        always_fails.delay()
        await until(lambda: len(queue.dead_letters()) == 1, "the first dead letter")
        by_hand = queue.retry_dead(queue.dead_letters()[0].id)
        await until(lambda: queue.job(by_hand).status() is JobState.DEAD, "it died again")
        assert storage.prune(now=clock() + storage.retention_ms) >= 1
        assert storage.get_job(by_hand) is None
        (entry,) = queue.dead_letters()
        await until(lambda: timer_at(clock, 60.0), "the reaper sleeps until 60")
        clock.advance(600)
        await until(lambda: timer_at(clock, 660.0), "the reaper passed at 600")
        assert [d.id for d in queue.dead_letters()] == [entry.id]
    assert len(runs) == 2


async def test_a_burst_worker_waits_for_a_replay_due_within_its_horizon_and_runs_it(
    queue: Queue, clock: ManualClock
) -> None:
    """SPEC §2: a burst returns once nothing is running or ready and nothing is due within
    60 s -- a dead letter's auto-replay 30 s away is due that soon."""
    runs: list[int] = []

    @queue.task(max_retries=0, dead_letter_replay=Replay(after="30s", max_replays=1))
    def flaky() -> str:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("first run fails")
        return "ok"

    first = flaky.delay()
    worker = make_worker(queue, burst=True)
    done = anyio.Event()

    async def burst() -> None:
        await worker.run_async()
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(burst)
        await until(lambda: len(queue.dead_letters()) == 1, "the first run is dead")
        await anyio.sleep(0.05)  # the burst goes on polling: the replay is due in 30 s
        assert not done.is_set()
        clock.advance(30)
        await until(done.is_set, "the burst replayed the dead job, ran it and returned")
    assert runs == [1, 1] and queue.dead_letters() == []
    assert first.status() is JobState.DEAD
    [replayed] = [j for j in queue.storage().list_jobs() if j.id != first.id]
    assert queue.job(replayed.id).result(timeout=1) == "ok"


async def test_a_burst_worker_replays_what_is_due_before_it_returns(
    queue: Queue, clock: ManualClock
) -> None:
    runs: list[int] = []

    @queue.task(max_retries=0, dead_letter_replay=Replay(after="10m", max_replays=1))
    def flaky() -> str:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("first run fails")
        return "ok"

    flaky.delay()
    await make_worker(queue, burst=True).run_async()  # the replay is 10 min away: returns
    assert runs == [1] and len(queue.dead_letters()) == 1
    clock.advance(600)
    await make_worker(queue, burst=True, reap_interval=3600).run_async()
    assert runs == [1, 1] and queue.dead_letters() == []


async def test_a_burst_does_not_end_right_after_its_reaper_replayed(
    queue: Queue, clock: ManualClock
) -> None:
    """The reaper's pass and a burst's end both replay due dead letters. When the reaper's
    replays first, after the burst counted nothing pending, the burst's end finds nothing
    to replay -- and must still claim again (``None``), not end before the new job ran."""
    from queue_core.worker.outage import Outage
    from queue_core.worker.replay import Replayer
    from queue_core.worker.timing import Timing

    @queue.task(max_retries=0, dead_letter_replay=Replay(after="10m", max_replays=1))
    def flaky() -> None:
        raise RuntimeError("fails")

    flaky.delay()
    await make_worker(queue, burst=True).run_async()
    assert len(queue.dead_letters()) == 1
    clock.advance(600)
    timing = Timing(clock)
    replayer = Replayer(queue.storage(), {flaky.name: flaky}, timing, anyio.CapacityLimiter(1))
    await replayer.replay_pass()  # the reaper's pass wins the race
    assert queue.dead_letters() == []
    assert await replayer.burst_end(60_000, Outage(timing.monotonic), "w") is None
    assert await replayer.burst_end(60_000, Outage(timing.monotonic), "w") is True  # once
