"""ManualClock timers and the worker's Timing on top of them."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from queue_core.app.clock import SupportsTimers, SystemClock
from queue_core.testing import ManualClock
from queue_core.worker.timing import Timing
from tests.unit.worker.conftest import until


def test_manual_clock_timers_fire_in_due_order_once_reached() -> None:
    clock = ManualClock(monotonic_start=10.0)
    fired: list[str] = []
    clock.call_at(12.0, lambda: fired.append("b"))
    clock.call_at(11.0, lambda: fired.append("a"))
    cancel = clock.call_at(11.5, lambda: fired.append("cancelled"))
    clock.call_at(20.0, lambda: fired.append("late"))
    assert clock.pending_timers() == [11.0, 11.5, 12.0, 20.0]
    cancel()
    clock.advance(0.9)
    assert fired == []
    clock.advance(1.1)  # 12.0: both due, earliest first
    assert fired == ["a", "b"]
    assert clock.pending_timers() == [20.0]
    clock.call_at(5.0, lambda: fired.append("now"))  # already due: called at once
    assert fired == ["a", "b", "now"]
    assert isinstance(clock, SupportsTimers)
    assert not isinstance(SystemClock(), SupportsTimers)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_timing_sleeps_on_the_manual_clock(anyio_backend: str) -> None:
    clock = ManualClock()
    timing = Timing(clock)
    woke: list[float] = []

    async def sleeper() -> None:
        await timing.sleep(5.0)
        woke.append(timing.monotonic())

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await until(lambda: clock.pending_timers() == [5.0], "the sleeper waits")
        clock.advance(4.0)
        await anyio.lowlevel.checkpoint()
        assert woke == []
        clock.advance(1.0)
        await until(lambda: woke == [5.0], "the sleeper woke at 5.0")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_timing_wait_ends_early_when_the_event_is_set(anyio_backend: str) -> None:
    clock = ManualClock()
    timing = Timing(clock)
    event = anyio.Event()

    async def waiter() -> None:
        await timing.wait(event, 100.0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await until(lambda: clock.pending_timers() == [100.0], "the waiter waits")
        event.set()
    assert clock.pending_timers() == []  # its timer was cancelled
