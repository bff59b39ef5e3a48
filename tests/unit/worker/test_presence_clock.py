"""The presence service and the cancel poll on a manual clock (no sleeping): the worker
registers, refreshes its record with busy/stuck counts every third of its ttl, removes
it on a clean stop; a cancel reaches a running body at the next half-second poll, long
before the next lease renewal."""

from __future__ import annotations

import threading

import anyio
import pytest

from queue_core import JobContext, JobState
from queue_core.records.workers import WorkerInfo
from queue_core.testing import T0, ManualClock
from queue_core.worker import Worker
from tests.unit.worker.conftest import until
from tests.unit.worker.test_services_clock import (  # the fixtures too
    RecordingStorage,
    anyio_backend,
    blocking_task,
    clock,
    gate,
    make_worker,
    queue,
    running,
    storage,
    timer_at,
)

pytestmark = pytest.mark.anyio

__all__ = ["anyio_backend", "clock", "gate", "queue", "storage"]


def timers_at(clock: ManualClock, at: float) -> int:
    """How many timers are set for the monotonic time ``at``."""
    return sum(abs(t - at) < 1e-6 for t in clock.pending_timers())


def only(storage: RecordingStorage) -> WorkerInfo:
    workers = storage.list_workers()
    assert len(workers) == 1, workers
    return workers[0]


async def test_worker_registers_refreshes_and_deregisters(
    queue: object, storage: RecordingStorage, clock: ManualClock, gate: threading.Event
) -> None:
    block = blocking_task(queue, gate)  # type: ignore[arg-type]
    worker = make_worker(queue, presence_ttl="6s", queues="default,mail")  # type: ignore[arg-type]
    done = anyio.Event()

    async def run() -> None:
        await worker.run_async()
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await until(lambda: len(storage.list_workers()) == 1, "the worker registered")
        first = only(storage)
        assert (first.id, first.queues, first.slots, first.busy, first.stuck) == (
            worker.id,
            ("default", "mail"),
            2,
            0,
            0,
        )
        assert (first.started_at, first.last_seen, first.ttl_ms) == (T0, T0, 6000)
        block.delay()
        await until(lambda: worker.stats()["running"] == 1, "the body runs")
        await until(lambda: timer_at(clock, 2.0), "the refresh waits a third of the ttl")
        clock.advance(2.0)
        await until(lambda: only(storage).last_seen == T0 + 2000, "refreshed")
        assert (only(storage).busy, only(storage).started_at) == (1, T0)
        gate.set()
        await until(lambda: worker.stats()["running"] == 0, "the body returned")
        worker.stop()
        await until(done.is_set, "the worker stopped")
    assert storage.list_workers() == []


async def test_a_worker_that_stops_refreshing_drops_out_after_its_ttl(
    queue: object, storage: RecordingStorage, clock: ManualClock, gate: threading.Event
) -> None:
    worker = make_worker(queue, presence_ttl=6)  # type: ignore[arg-type]
    async with running(worker, gate):
        await until(lambda: len(storage.list_workers()) == 1, "the worker registered")
        record = only(storage)
        assert storage.list_workers(now=T0 + 5999) == [record]
        assert storage.list_workers(now=T0 + 6000) == []  # as if killed right after


async def test_cancel_reaches_a_thread_body_at_the_next_poll(
    queue: object, storage: RecordingStorage, clock: ManualClock, gate: threading.Event
) -> None:
    seen: list[bool] = []

    @queue.task(name="spin")  # type: ignore[attr-defined]
    def spin(ctx: JobContext) -> str:
        while not ctx.cancelled and not gate.is_set():
            gate.wait(0.01)
        seen.append(ctx.cancelled)
        return "stopped"

    worker = make_worker(queue)  # lease 3 s: the first renewal is at 1.0
    async with running(worker, gate):
        job = spin.delay()
        await until(lambda: worker.stats()["running"] == 1, "the body runs")
        await until(lambda: timer_at(clock, 0.5), "the cancel poll waits")
        job.cancel()
        clock.advance(0.5)
        await until(lambda: job.status() is JobState.CANCELLED, "the job ends cancelled")
        assert seen == [True]
        assert storage.renewals == []  # the poll, not a renewal, carried the cancel


async def test_cancel_reaches_an_async_body_at_the_next_poll(
    queue: object, storage: RecordingStorage, clock: ManualClock, gate: threading.Event
) -> None:
    @queue.task(name="forever")  # type: ignore[attr-defined]
    async def forever() -> None:
        await anyio.sleep_forever()

    worker = make_worker(queue)
    async with running(worker, gate):
        job = forever.delay()
        await until(lambda: worker.stats()["running"] == 1, "the body runs")
        await until(lambda: timer_at(clock, 0.5), "the cancel poll waits")
        job.cancel()
        clock.advance(0.4)
        await anyio.sleep(0.05)
        assert job.status() is JobState.RUNNING  # not polled yet
        clock.advance(0.1)
        await until(lambda: job.status() is JobState.CANCELLED, "the job ends cancelled")
        assert storage.renewals == []


def test_bad_presence_ttl_is_a_config_error(queue: object) -> None:
    from queue_core.records.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        Worker(queue, presence_ttl="soon")  # type: ignore[arg-type]
    assert err.value.code == "invalid_duration"
    assert "presence_ttl" in str(err.value)


async def test_cancel_execution_reaches_a_running_step_at_the_next_poll(
    queue: object, storage: RecordingStorage, clock: ManualClock, gate: threading.Event
) -> None:
    from queue_core.flows import ExecutionState, StepState

    flow = queue.flow("cancel-running")  # type: ignore[attr-defined]

    @flow.step
    async def wait() -> None:
        await anyio.sleep_forever()

    worker = make_worker(queue)
    async with running(worker, gate):
        execution = flow.start()
        await until(lambda: worker.stats()["running"] == 1, "the step runs")
        await until(lambda: timer_at(clock, 0.5), "the cancel poll waits")
        assert execution.cancel() is ExecutionState.CANCELLING
        clock.advance(0.5)
        await until(lambda: execution.status() is ExecutionState.CANCELLED, "cancelled")
        assert [s.state for s in execution.steps()] == [StepState.CANCELLED]
        assert storage.renewals == []


def test_presence_ttl_comes_from_the_env_and_a_bad_env_value_names_it(
    queue: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from queue_core.records.errors import ConfigError

    monkeypatch.delenv("QUEUE_CORE_WORKER_TTL", raising=False)
    assert Worker(queue).presence_ttl_ms == 15_000  # type: ignore[arg-type]
    monkeypatch.setenv("QUEUE_CORE_WORKER_TTL", "4s")
    assert Worker(queue).presence_ttl_ms == 4_000  # type: ignore[arg-type]
    assert Worker(queue, presence_ttl=9).presence_ttl_ms == 9_000  # type: ignore[arg-type]
    monkeypatch.setenv("QUEUE_CORE_WORKER_TTL", "0")
    with pytest.raises(ConfigError) as err:
        Worker(queue)  # type: ignore[arg-type]
    assert "QUEUE_CORE_WORKER_TTL" in str(err.value) and "'0'" in str(err.value)


async def test_a_stuck_thread_body_shows_in_the_refreshed_record(
    queue: object, storage: RecordingStorage, clock: ManualClock, gate: threading.Event
) -> None:
    block = blocking_task(queue, gate, timeout="1s", max_retries=0)  # type: ignore[arg-type]
    worker = make_worker(queue, presence_ttl="3s")  # type: ignore[arg-type]
    async with running(worker, gate):
        block.delay()
        await until(lambda: worker.stats()["running"] == 1, "the body runs")
        # two timers at 1.0: the body's timeout and the refresh (a third of the ttl); the
        # timeout's alone would let the refresh register after the advance, at 2.0
        await until(lambda: timers_at(clock, 1.0) == 2, "the refresh waits a third of the ttl")
        clock.advance(1.0)  # past the timeout: the thread cannot stop, its slot is stuck
        await until(lambda: worker.stats()["stuck"] == 1, "the slot is stuck")
        await until(lambda: only(storage).last_seen == T0 + 1000, "refreshed at 1.0")
        if only(storage).stuck != 1:  # the refresh ran before the watchdog: next one
            await until(lambda: timer_at(clock, 2.0), "the next refresh waits")
            clock.advance(1.0)
            await until(lambda: only(storage).last_seen == T0 + 2000, "refreshed at 2.0")
        assert (only(storage).busy, only(storage).stuck) == (0, 1)
