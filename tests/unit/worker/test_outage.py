"""Outage: one WARNING when storage becomes unavailable, one INFO when it answers again,
DEBUG in between; other storage errors are left to their caller."""

from __future__ import annotations

import functools
import logging

import anyio
import pytest

from backends.memory import MemoryStorage
from queue_core.records.errors import StorageError, StorageUnavailable
from queue_core.records.jobs import ReapedJob
from queue_core.testing import T0, ManualClock
from queue_core.worker.outage import Outage
from queue_core.worker.reaper import reaper_loop
from queue_core.worker.timing import Timing
from tests.unit.worker.conftest import until


def test_an_outage_is_two_lines_however_many_calls_fail(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    outage = Outage(lambda: now[0])
    caplog.set_level(logging.DEBUG, logger="queue_core.worker")
    outage.ok()  # nothing to end
    for what in ("claim", "finish", "claim", "reaper"):
        assert outage.failed(what, StorageUnavailable("db: connection refused"))
        now[0] += 0.5
    assert outage.down
    outage.ok()
    outage.ok()
    assert not outage.down
    levels = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [lvl for lvl, _ in levels] == ["WARNING", "DEBUG", "DEBUG", "DEBUG", "INFO"]
    assert "storage unavailable (claim failed: db: connection refused)" in levels[0][1]
    assert "available again after 2.0 s (4 calls failed meanwhile)" in levels[-1][1]
    assert caplog.records[-1].event["event"] == "storage_up"  # type: ignore[attr-defined]

    # a stale pooled connection failing 3 s later belongs to the same outage: DEBUG only
    caplog.clear()
    now[0] += 3.0
    assert outage.failed("count_pending", StorageUnavailable("terminating connection"))
    outage.ok()
    assert [r.levelname for r in caplog.records] == ["DEBUG", "DEBUG"]

    # a failure long after is a new outage: a new pair of lines
    caplog.clear()
    now[0] += Outage.AFTERMATH + 1
    assert outage.failed("renew", StorageUnavailable("again"))
    outage.ok()
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]


def test_other_storage_errors_are_not_an_outage(caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage()
    caplog.set_level(logging.DEBUG, logger="queue_core.worker")
    assert not outage.failed("claim", StorageError("constraint violated"))
    assert not outage.down and caplog.records == []


class _ReapLog(MemoryStorage):
    """memory:// on the manual clock, noting the clock time of every reap pass."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.clock = clock
        self.passes: list[float] = []

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        self.passes.append(self.clock.monotonic())
        return super().reap(now=now, limit=limit)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_the_reaper_judges_nothing_during_an_outage_and_one_hold_after() -> None:
    """Right after an outage longer than a lease every attempt looks abandoned: the
    reaper holds off until live workers had a full hold period to renew and beat."""
    clock = ManualClock(start_ms=T0)
    storage = _ReapLog(clock)
    outage = Outage(clock.monotonic)

    def timer_at(at: float) -> bool:
        return any(abs(t - at) < 1e-6 for t in clock.pending_timers())

    async with anyio.create_task_group() as tg:
        await tg.start(
            functools.partial(reaper_loop, outage=outage, hold=30.0),
            storage,
            1.0,
            anyio.CapacityLimiter(1),
            Timing(clock),
        )
        await until(lambda: timer_at(1.0), "the first pass is over")
        assert storage.passes == [0.0]
        outage.failed("claim", StorageUnavailable("down"))
        for _ in range(10):  # 10 s of outage: no pass
            clock.advance(1.0)
            await until(lambda: bool(clock.pending_timers()), "the reaper sleeps again")
        assert storage.passes == [0.0]
        outage.ok()  # storage answers again at 10 s
        while clock.monotonic() < 39.0:
            clock.advance(1.0)
            await until(lambda: bool(clock.pending_timers()), "the reaper sleeps again")
        assert storage.passes == [0.0]  # held until 10 + 30
        clock.advance(1.0)
        await until(lambda: len(storage.passes) == 2, "a pass after the hold")
        assert storage.passes[1] == 40.0
        tg.cancel_scope.cancel()


def test_a_storage_fault_reading_a_steps_inputs_is_no_bad_payload() -> None:
    """Issue 26 item 1: a transient ``StorageUnavailable`` from ``get_step_inputs`` gives
    the attempt back without spending it; the step runs and the execution succeeds. (The
    read with the claim fails first: the call reads its own inputs, and meets the fault.)"""
    from typing import Any

    from queue_core import Queue, RetryPolicy

    class Flaky(MemoryStorage):
        faults = 1

        def get_step_inputs_batch(self, steps: Any) -> Any:
            if any(sid == "b" for _, sid in steps) and self.faults:
                raise StorageUnavailable("the read with the claim fails too")
            return super().get_step_inputs_batch(steps)

        def get_step_inputs(self, execution_id: str, step_id: str) -> Any:
            if step_id == "b" and self.faults:
                self.faults -= 1
                raise StorageUnavailable("terminating connection due to administrator command")
            return super().get_step_inputs(execution_id, step_id)

    storage = Flaky()
    queue = Queue(storage=storage)
    flow = queue.flow("etl", retry=RetryPolicy(max_attempts=1))

    @flow.step()
    def a() -> int:
        return 1

    @flow.step(depends_on=[a])
    def b(a: int) -> int:
        return a + 1

    execution = flow.start()
    queue.run_worker(burst=True, install_signal_handlers=False)
    assert execution.result(timeout=5) == {"a": 1, "b": 2}
    [step] = [s for s in execution.steps() if s.step_id == "b"]
    assert [(r.outcome, r.error_class) for r in step.attempts] == [
        ("failed", "StorageUnavailable"),
        ("succeeded", None),
    ]
    assert queue.dead_letters() == []


@pytest.mark.parametrize("body", ["sync", "async"])
def test_a_step_call_that_cannot_be_built_is_dead_lettered_as_bad_payload(body: str) -> None:
    """A code step whose body (after a deploy) wants a parameter no dependency gives: the
    attempt ends ``bad_payload`` at once, on the body thread's path (sync) as on the
    loop's (async), and the execution fails."""
    from queue_core import Queue, RetryPolicy
    from queue_core.records.flows import ExecutionState

    queue = Queue(storage=MemoryStorage())
    flow = queue.flow("etl", retry=RetryPolicy(max_attempts=3))
    ran: list[int] = []

    @flow.step()
    def a() -> int:
        return 1

    if body == "sync":

        @flow.step(depends_on=[a])
        def b(a: int, c: int) -> int:
            ran.append(a)
            return a + c

    else:

        @flow.step(depends_on=[a])
        async def b(a: int, c: int) -> int:
            ran.append(a)
            return a + c

    execution = flow.start()
    queue.run_worker(burst=True, install_signal_handlers=False)
    assert execution.status() is ExecutionState.FAILED
    assert ran == []
    [step] = [s for s in execution.steps() if s.step_id == "b"]
    assert [(r.outcome, r.reason, r.error_class) for r in step.attempts] == [
        ("failed", "bad_payload", "TypeError"),
    ]
    assert [d.reason for d in queue.dead_letters()] == ["bad_payload"]


def test_claimed_steps_get_their_inputs_in_one_read_with_the_claim() -> None:
    """Issue 28: a worker reads the inputs of the code steps it claimed together with one
    ``get_step_inputs_batch`` on the claim thread; their calls read nothing more and get
    the same arguments."""
    from typing import Any

    from queue_core import Queue

    asked: list[list[tuple[str, str]]] = []
    alone: list[str] = []

    class Counting(MemoryStorage):
        def get_step_inputs_batch(self, steps: Any) -> Any:
            asked.append(list(steps))
            return super().get_step_inputs_batch(steps)

        def get_step_inputs(self, execution_id: str, step_id: str) -> Any:
            alone.append(step_id)
            return super().get_step_inputs(execution_id, step_id)

    queue = Queue(storage=Counting())
    flow = queue.flow("fan")

    @flow.step()
    def a() -> int:
        return 1

    def mid(i: int) -> Any:
        def body(a: int) -> int:
            return a + i

        body.__name__ = body.__qualname__ = f"b{i}"
        return flow.step(depends_on=[a])(body)

    mids = [mid(i) for i in range(5)]

    @flow.step(depends_on=mids)
    def c(b0: int, b1: int, b2: int, b3: int, b4: int) -> int:
        return b0 + b1 + b2 + b3 + b4

    execution = flow.start()
    queue.run_worker(burst=True, install_signal_handlers=False)
    assert execution.result(timeout=5)["c"] == sum(1 + i for i in range(5))
    assert alone == []
    got = sorted(sid for batch in asked for _, sid in batch)
    assert got == sorted(["a", "c", *(f"b{i}" for i in range(5))])
    assert len(asked) < len(got)  # the five b steps are claimed together
