"""The reaper prunes in small steady batches and keeps pace with a busy queue (issue 30)."""

from __future__ import annotations

import anyio
import pytest

from backends.memory import MemoryStorage
from queue_core.testing import SEC, T0, ManualClock, complete_end, new_job
from queue_core.worker.reaper import PRUNE_BATCH, PRUNE_BATCHES, PRUNE_EVERY, reaper_loop
from queue_core.worker.timing import Timing
from tests.unit.worker.conftest import until


class _PruneLog(MemoryStorage):
    """memory:// on the manual clock, noting each prune call: (clock time, limit, pruned)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock, retention_ms=SEC)
        self.clock = clock
        self.prunes: list[tuple[float, int, int]] = []

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        n = super().prune(now=now, limit=limit)
        self.prunes.append((self.clock.monotonic(), limit, n))
        return n


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_a_pass_prunes_every_due_job_in_batches() -> None:
    clock = ManualClock(start_ms=T0)
    storage = _PruneLog(clock)
    due = 2 * PRUNE_BATCH + PRUNE_BATCH // 2
    storage.enqueue([new_job() for _ in range(due)])
    for c in storage.claim("w", ["default"], due, 60 * SEC):
        assert storage.finish([complete_end(c.ref)]) == [True]
    async with anyio.create_task_group() as tg:
        await tg.start(reaper_loop, storage, 1.0, anyio.CapacityLimiter(1), Timing(clock))
        while clock.monotonic() < PRUNE_EVERY:
            clock.advance(1.0)
            await until(lambda: bool(clock.pending_timers()), "the reaper sleeps again")
        await until(lambda: len(storage.prunes) == 3, "one pass of three batches")
        assert storage.prunes == [
            (PRUNE_EVERY, PRUNE_BATCH, PRUNE_BATCH),
            (PRUNE_EVERY, PRUNE_BATCH, PRUNE_BATCH),
            (PRUNE_EVERY, PRUNE_BATCH, PRUNE_BATCH // 2),
        ]
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_a_pass_stops_after_its_batch_budget() -> None:
    clock = ManualClock(start_ms=T0)
    storage = _PruneLog(clock)
    due = PRUNE_BATCH * PRUNE_BATCHES + 1
    storage.enqueue([new_job() for _ in range(due)])
    for c in storage.claim("w", ["default"], due, 60 * SEC):
        assert storage.finish([complete_end(c.ref)]) == [True]
    async with anyio.create_task_group() as tg:
        await tg.start(reaper_loop, storage, 1.0, anyio.CapacityLimiter(1), Timing(clock))
        while clock.monotonic() < 2 * PRUNE_EVERY:
            clock.advance(1.0)
            await until(lambda: bool(clock.pending_timers()), "the reaper sleeps again")
        await until(lambda: len(storage.prunes) == PRUNE_BATCHES + 1, "two passes")
        first = [p for p in storage.prunes if p[0] == PRUNE_EVERY]
        assert len(first) == PRUNE_BATCHES  # the rest waits for the next pass
        assert storage.prunes[-1] == (2 * PRUNE_EVERY, PRUNE_BATCH, 1)
        tg.cancel_scope.cancel()
