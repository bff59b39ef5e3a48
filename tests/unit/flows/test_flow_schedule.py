"""``queue.flow(name, schedule=...)``: the periodic task ``<flow>.schedule`` starts one
execution per tick (two schedulers, manual clock); a tick job that runs again finds the
execution it started; bad schedules are refused naming the value."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from backends.memory import MemoryStorage
from queue_core import ConfigError, JobContext, Queue
from queue_core.records.flows import ExecutionState
from queue_core.testing import T0, ManualClock
from tests.unit.worker.conftest import until
from tests.unit.worker.test_scheduler_clock import make_worker, passed, running

START = T0 + 1_000  # T0 is a multiple of 10 s: the first tick is 9 s after START


def scheduled_queue(storage: MemoryStorage, clock: ManualClock, **schedule: Any) -> Queue:
    queue = Queue(storage=storage, clock=clock)
    flow = queue.flow("nightly", schedule={"every": "10s", "input": {"n": 2}, **schedule})

    @flow.step
    def double(input: dict[str, int]) -> int:
        return input["n"] * 2

    return queue


def test_a_tick_job_that_runs_again_finds_its_execution() -> None:
    queue = scheduled_queue(MemoryStorage(), ManualClock(start_ms=START))
    task = queue.get_task("nightly.schedule")
    assert task is not None and "nightly.schedule" in queue.periodic_tasks
    first = task.func(ctx=JobContext(job_id="tick-job-1"))
    again = task.func(ctx=JobContext(job_id="tick-job-1"))
    other = task.func(ctx=JobContext(job_id="tick-job-2"))
    assert first == again != other
    assert sorted(e.id for e in queue.executions(flow="nightly")) == sorted([first, other])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_two_schedulers_start_one_execution_per_tick() -> None:
    clock = ManualClock(start_ms=START)
    storage = MemoryStorage(clock=clock)
    queue = scheduled_queue(storage, clock)
    workers = [make_worker(queue, queues=["default"]), make_worker(queue, queues=["default"])]
    async with running(workers):
        await until(lambda: passed(workers, 1), "both schedulers wait for tick 1")
        for k in range(1, 4):
            clock.advance_ms(START - 1_000 + k * 10_000 - clock.now_ms())
            await until(lambda k=k: passed(workers, k + 1), f"tick {k} scheduled")  # type: ignore[misc]
            await until(
                lambda k=k: (
                    sum(  # type: ignore[misc]
                        e.state is ExecutionState.SUCCEEDED
                        for e in queue.executions(flow="nightly", limit=50)
                    )
                    == k
                ),
                f"execution {k} succeeded",
            )
            await anyio.lowlevel.checkpoint()
    executions = queue.executions(flow="nightly", limit=50)
    assert len(executions) == 3
    assert {queue.execution(e.id).result(timeout=0)["double"] for e in executions} == {4}


@pytest.mark.parametrize(
    ("schedule", "code"),
    [
        ("every day", "invalid_cron"),
        ("5 parsecs", "invalid_cron"),
        ("0s", "invalid_duration"),
        ({"every": "5m", "cron": "* * * * *"}, "conflicting_options"),
        ({"every": "5m", "at": "noon"}, "invalid_option"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "invalid_option"),
        (42, "invalid_option"),
    ],
)
def test_a_bad_schedule_is_refused_and_registers_nothing(schedule: Any, code: str) -> None:
    queue = Queue("memory://")
    with pytest.raises(ConfigError) as info:
        queue.flow("nightly", schedule=schedule)
    assert info.value.code == code, str(info.value)
    assert queue.periodic_tasks == {} and queue.get_task("nightly.schedule") is None


def test_execution_ids_started_by_one_process_sort_in_start_order() -> None:
    """Promotion goes by (created_at, id): ids made within one millisecond must sort in
    the order the executions were started (random ids made it arbitrary)."""
    from queue_core.flows.api import new_execution_id

    ids = [new_execution_id() for _ in range(2_000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
