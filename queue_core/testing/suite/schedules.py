"""Contract: periodic ticks (``SupportsSchedules``, SPEC §11).

Each tick of a schedule enqueues exactly one job however many schedulers race on it,
decided atomically by storage; storage keeps one value per schedule (its last tick),
not a key per tick. Every test skips naming ``SupportsSchedules`` on a storage without
the ability. Times are explicit; nothing sleeps.
"""

from __future__ import annotations

import pytest

from queue_core.records.jobs import JobState, NewJob
from queue_core.storage.abilities import SupportsSchedules
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import LEASE, MIN, T0, new_job, run_concurrently
from queue_core.testing.suite._base import ContractBase, job_of, lacks, race_says

__all__ = ["ScheduleContract"]


def ticks_of(storage: Storage) -> SupportsSchedules:
    """The storage as :class:`SupportsSchedules`; the test skips, naming it, without it."""
    if not isinstance(storage, SupportsSchedules):
        pytest.skip(lacks(SupportsSchedules))
    return storage


class ScheduleContract(ContractBase):
    """``enqueue_tick`` and ``schedule_ticks``."""

    def test_a_first_tick_enqueues_its_job_and_is_the_last_tick(self, storage: Storage) -> None:
        ticks = ticks_of(storage)
        assert ticks.schedule_ticks() == {}
        job = new_job(task_name="tests.every", run_at=T0)
        assert ticks.enqueue_tick("tests.every", T0, job, now=T0 + 5) is True
        record = job_of(storage, job.id)
        assert (record.state, record.task_name) == (JobState.QUEUED, "tests.every")
        assert ticks.schedule_ticks() == {"tests.every": T0}
        claimed = storage.claim("w", ["default"], 5, LEASE, now=T0 + 10)
        assert [c.id for c in claimed] == [job.id]

    def test_the_same_tick_again_stores_nothing(self, storage: Storage) -> None:
        ticks = ticks_of(storage)
        first, second = new_job(run_at=T0), new_job(run_at=T0)
        assert ticks.enqueue_tick("s", T0, first, now=T0) is True
        assert ticks.enqueue_tick("s", T0, second, now=T0 + 1) is False
        assert storage.get_job(second.id) is None
        assert ticks.schedule_ticks() == {"s": T0}

    def test_an_earlier_tick_than_the_last_is_refused(self, storage: Storage) -> None:
        ticks = ticks_of(storage)
        assert ticks.enqueue_tick("s", T0 + MIN, new_job(run_at=T0 + MIN), now=T0) is True
        late = new_job(run_at=T0)
        assert ticks.enqueue_tick("s", T0, late, now=T0) is False
        assert storage.get_job(late.id) is None
        assert ticks.schedule_ticks() == {"s": T0 + MIN}

    def test_a_later_tick_enqueues_again(self, storage: Storage) -> None:
        ticks = ticks_of(storage)
        jobs = [new_job(run_at=T0 + i * MIN) for i in range(3)]
        for i, job in enumerate(jobs):
            assert ticks.enqueue_tick("s", T0 + i * MIN, job, now=T0 + i * MIN) is True
        assert [job_of(storage, j.id).state for j in jobs] == [JobState.QUEUED] * 3
        assert ticks.schedule_ticks() == {"s": T0 + 2 * MIN}

    def test_schedules_are_independent(self, storage: Storage) -> None:
        ticks = ticks_of(storage)
        a, b = new_job(run_at=T0), new_job(run_at=T0)
        assert ticks.enqueue_tick("a", T0, a, now=T0) is True
        assert ticks.enqueue_tick("b", T0, b, now=T0) is True
        assert ticks.schedule_ticks() == {"a": T0, "b": T0}

    def test_racing_schedulers_enqueue_exactly_one_job_per_tick(self, storage: Storage) -> None:
        ticks = ticks_of(storage)
        n = self.race_threads
        for round_ in range(3):
            tick = T0 + round_ * MIN
            jobs = [new_job(run_at=tick) for _ in range(n)]

            def race(i: int, tick: int = tick, jobs: list[NewJob] = jobs) -> bool:
                return ticks.enqueue_tick("race", tick, jobs[i], now=tick)

            results = run_concurrently(n, race)
            assert not [r for r in results if isinstance(r, BaseException)], results
            assert sorted(results, key=bool) == [False] * (n - 1) + [True], race_says(
                "enqueue_tick of one tick", n, results
            )
            stored = [j.id for j in jobs if storage.get_job(j.id) is not None]
            assert stored == [jobs[results.index(True)].id]
        assert ticks.schedule_ticks() == {"race": T0 + 2 * MIN}

    def test_storage_keeps_one_entry_per_schedule_not_per_tick(self, storage: Storage) -> None:
        ticks = ticks_of(storage)
        for i in range(30):
            for name in ("x", "y"):
                assert ticks.enqueue_tick(name, T0 + i * MIN, new_job(), now=T0) is True
        assert ticks.schedule_ticks() == {"x": T0 + 29 * MIN, "y": T0 + 29 * MIN}
        # a tick long gone stays refused: the one stored value decides, no per-tick key
        assert ticks.enqueue_tick("x", T0 + 3 * MIN, new_job(), now=T0) is False

    def test_a_skip_limited_job_still_claims_its_tick(self, storage: Storage) -> None:
        """A periodic task with ``Concurrency(1, "skip")``: a tick whose job is skipped
        (the previous run still active) is still used up."""
        ticks = ticks_of(storage)
        first, second = (
            new_job(concurrency_key="k", concurrency_limit=1, concurrency_skip=True)
            for _ in range(2)
        )
        assert ticks.enqueue_tick("s", T0, first, now=T0) is True
        assert ticks.enqueue_tick("s", T0 + MIN, second, now=T0 + MIN) is True
        assert job_of(storage, second.id).state is JobState.SKIPPED
        assert ticks.schedule_ticks() == {"s": T0 + MIN}
