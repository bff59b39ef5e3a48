"""Claims ahead of free slots (SPEC §8 ``prefetch``) on a manual clock: a held job's
deadline and start count from its body's start, a stop gives held jobs back at once, a
cancel ends a held job unstarted. Time moves only when a test advances the clock."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from backends.memory import MemoryStorage
from queue_core import JobState, Outcome, Queue
from queue_core.records.jobs import ClaimedJob, dt_from_ms
from queue_core.testing import T0, ManualClock
from queue_core.worker import Worker
from tests.unit.worker.conftest import until
from tests.unit.worker.test_services_clock import running, timer_at

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class CountingStorage(MemoryStorage):
    """memory:// on the manual clock, counting claims ahead."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.ahead = 0
        self.pause_reads = 0

    def claim_ahead(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        got = super().claim_ahead(worker_id, queues, limit, lease_ms, now=now)
        self.ahead += len(got)
        return got

    def list_paused(self) -> Any:
        self.pause_reads += 1
        return super().list_paused()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=T0)


@pytest.fixture
def storage(clock: ManualClock) -> CountingStorage:
    return CountingStorage(clock)


@pytest.fixture
def queue(storage: CountingStorage, clock: ManualClock) -> Queue:
    return Queue(storage=storage, clock=clock, lease=30)


@pytest.fixture
def gates() -> dict[int, threading.Event]:
    return {i: threading.Event() for i in range(4)}


def gated_task(queue: Queue, gates: dict[int, threading.Event], started: list[int]) -> Any:
    @queue.task(name="gated", max_retries=1)
    def gated(i: int) -> int:
        started.append(i)
        gates[i].wait(30)
        return i

    return gated


def make_worker(queue: Queue, **kw: Any) -> Worker:
    kw.setdefault("reap_interval", 3600)
    kw.setdefault("presence_ttl", 9000)
    return Worker(queue, install_signal_handlers=False, slots=1, **kw)


async def test_a_held_job_times_out_and_starts_from_its_body_start(
    queue: Queue, storage: CountingStorage, clock: ManualClock, gates: dict[int, threading.Event]
) -> None:
    started: list[int] = []
    gated = gated_task(queue, gates, started)
    worker = make_worker(queue, prefetch=1)
    gate = threading.Event()
    async with running(worker, gate):
        first = gated.delay(0)
        await until(lambda: started == [0], "the first body runs")
        second = gated.apply((1,), timeout="5s")
        await until(lambda: worker.stats()["prefetched"] == 1, "the second job is held")
        assert started == [0]
        assert second.status() is JobState.RUNNING  # claimed: no other worker takes it
        clock.advance(7.0)  # past 5 s + the reap margin counted from the claim
        assert storage.reap() == []  # held: its timeout has not begun
        gates[0].set()
        await until(lambda: started == [0, 1], "the held job starts in the freed slot")
        await until(
            lambda: storage.get_job(second.id).started_at == T0 + 7000,  # type: ignore[union-attr]
            "storage is told of its start",
        )
        clock.advance(4.9)  # its timeout counts from 7.0: still running
        assert storage.reap() == []
        gates[1].set()
        await until(lambda: second.status() is JobState.SUCCEEDED, "the held job ends")
        assert first.status() is JobState.SUCCEEDED
        (attempt,) = second.attempts()
        assert attempt.started_at == dt_from_ms(T0 + 7000)


class NoGiveBack(CountingStorage):
    """A storage with prefetch but without ``SupportsGiveBack``."""

    give_back = None  # type: ignore[assignment]


@pytest.mark.parametrize("gives_back", [True, False], ids=["give_back", "release"])
async def test_a_stopping_worker_gives_its_held_jobs_back_at_once(
    clock: ManualClock, gates: dict[int, threading.Event], gives_back: bool
) -> None:
    """SPEC §8: held jobs go back without spending an attempt -- none counted or recorded
    (``SupportsGiveBack``); without the ability, released like running attempts."""
    storage = CountingStorage(clock) if gives_back else NoGiveBack(clock)
    queue = Queue(storage=storage, clock=clock, lease=30)
    started: list[int] = []
    gated = gated_task(queue, gates, started)
    worker = make_worker(queue, prefetch=2, shutdown_grace=30)
    done = anyio.Event()

    async def run() -> None:
        await worker.run_async()
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        first = gated.delay(0)
        await until(lambda: started == [0], "the first body runs")
        held = [gated.delay(1), gated.delay(2)]
        await until(lambda: worker.stats()["prefetched"] == 2, "two jobs are held")
        await until(lambda: timer_at(clock, 3600.0), "the reaper's first pass is over")
        worker.stop()
        await until(lambda: all(h.status() is JobState.QUEUED for h in held), "given back")
        assert first.status() is JobState.RUNNING and not done.is_set()  # within its grace
        for h in held:
            if gives_back:
                assert h.attempts() == [] and h.info().attempts == 0
                assert h.info().max_attempts == 2  # as declared: nothing to refund
                continue
            (attempt,) = h.attempts()
            assert (attempt.outcome, attempt.reason) == (Outcome.LOST, "worker_shutdown")
            assert h.info().max_attempts == 3  # the release spent no attempt
        gates[0].set()
        await until(done.is_set, "the worker stopped")
    assert started == [0] and first.status() is JobState.SUCCEEDED


async def test_a_cancelled_held_job_ends_cancelled_without_running(
    queue: Queue, clock: ManualClock, gates: dict[int, threading.Event]
) -> None:
    started: list[int] = []
    gated = gated_task(queue, gates, started)
    worker = make_worker(queue, prefetch=1)
    gate = threading.Event()
    async with running(worker, gate):
        gated.delay(0)
        await until(lambda: started == [0], "the first body runs")
        held = gated.delay(1)
        await until(lambda: worker.stats()["prefetched"] == 1, "the second job is held")
        assert held.cancel() is JobState.RUNNING  # a request, seen at the next renewal
        await until(lambda: timer_at(clock, 10.0), "the renewer sleeps until 10.0")
        clock.advance(10.0)
        await until(lambda: held.status() is JobState.CANCELLED, "the held job is cancelled")
        assert worker.stats()["prefetched"] == 0
        gates[0].set()
        await until(lambda: worker.stats()["running"] == 0, "the first body ends")
    assert started == [0]
    (attempt,) = held.attempts()
    assert attempt.outcome is Outcome.CANCELLED


async def test_a_pause_gives_the_held_jobs_it_matches_back_within_a_second(
    queue: Queue, clock: ManualClock, gates: dict[int, threading.Event]
) -> None:
    """SPEC §13: no job of a paused queue starts more than 1 s after the pause -- also
    one claimed ahead of a free slot before it: the held job goes back unstarted (no
    attempt) at the worker's next read of the pauses, and runs after the resume."""
    started: list[int] = []
    gated = gated_task(queue, gates, started)
    worker = make_worker(queue, prefetch=2)
    gate = threading.Event()
    async with running(worker, gate):
        first = gated.delay(0)
        await until(lambda: started == [0], "the first body runs")
        held = [gated.delay(1), gated.delay(2)]
        await until(lambda: worker.stats()["prefetched"] == 2, "two jobs are held")
        queue.pause(queue="default")  # read within a second (of real time: I/O pacing)
        await until(lambda: worker.stats()["prefetched"] == 0, "the held jobs go back", 1.5)
        assert [h.status() for h in held] == [JobState.QUEUED, JobState.QUEUED]
        assert [h.attempts() for h in held] == [[], []]
        gates[0].set()
        await until(lambda: first.status() is JobState.SUCCEEDED, "the running body ends")
        assert started == [0]  # paused: neither held job started
        queue.resume(queue="default")
        gates[1].set()
        gates[2].set()
        await until(lambda: started == [0, 1, 2], "they run after the resume, in order")


async def test_a_flow_pause_gives_back_the_held_steps_of_that_flow_only(
    queue: Queue, storage: CountingStorage, gates: dict[int, threading.Event]
) -> None:
    """A held flow step of another flow stays held while one flow is paused (it was
    released, with a ``lost``/``worker_shutdown`` record, at every read of the pauses);
    a pause of its own flow still sends it back within a second."""
    started: list[str] = []
    flow = queue.flow("a")

    @flow.step(id="s1")
    def s1() -> str:
        started.append("s1")
        gates[0].wait(30)
        return "s1"

    @flow.step(id="s2")
    def s2() -> str:
        started.append("s2")
        return "s2"

    other = queue.flow("b")
    other.step(id="x")(lambda: "x")
    worker = make_worker(queue, prefetch=1)
    gate = threading.Event()
    async with running(worker, gate):
        execution = flow.start({})
        await until(lambda: started == ["s1"], "s1 runs")
        await until(lambda: worker.stats()["prefetched"] == 1, "s2 is held")
        queue.pause(flow="b")
        reads = storage.pause_reads
        await until(lambda: storage.pause_reads >= reads + 2, "the pauses read twice", 3.0)
        assert worker.stats()["prefetched"] == 1
        steps = {s.step_id: s for s in execution.steps()}
        # still its one held attempt: no release, no lost record
        assert [a.outcome for a in steps["s2"].attempts] == [None]
        queue.pause(flow="a")
        await until(lambda: worker.stats()["prefetched"] == 0, "s2 goes back", 1.5)
        gates[0].set()
        await until(lambda: execution.steps()[0].state.value == "succeeded", "s1 ends")
        assert started == ["s1"]  # paused: s2 did not start
        queue.resume(flow="a")
        await until(lambda: execution.status().value == "succeeded", "s2 runs after resume")


async def test_prefetch_zero_claims_for_free_slots_only(
    queue: Queue, storage: CountingStorage, gates: dict[int, threading.Event]
) -> None:
    started: list[int] = []
    gated = gated_task(queue, gates, started)
    worker = make_worker(queue, prefetch=0)
    gate = threading.Event()
    async with running(worker, gate):
        gated.delay(0)
        waiting = gated.delay(1)
        await until(lambda: started == [0], "the first body runs")
        await anyio.sleep(0.05)  # a claim ahead would have come by now
        assert waiting.status() is JobState.QUEUED and storage.ahead == 0
        gates[0].set()
        gates[1].set()
        await until(lambda: started == [0, 1], "the second job runs once the slot frees")
