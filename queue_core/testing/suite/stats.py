"""Contract: stats and count_pending."""

from __future__ import annotations

from queue_core.records.jobs import JobState, QueueStats
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    LEASE,
    SEC,
    T0,
    cancel_end,
    claim_one,
    complete_end,
    dead_end,
    enqueue_one,
    new_job,
)
from queue_core.testing.suite._base import ContractBase


class StatsContract(ContractBase):
    """``stats`` (per queue, sorted) and ``count_pending`` (with a horizon)."""

    def test_stats_of_an_empty_storage_is_empty(self, storage: Storage) -> None:
        assert storage.stats(now=T0) == []

    def test_stats_counts_every_state_per_queue(self, storage: Storage) -> None:
        # queue "b": one of each state; queue "a": one ready job
        for _ in range(4):
            enqueue_one(storage, queue="b")
        got = storage.claim("w", ["b"], 3, LEASE, now=T0)
        storage.finish([complete_end(got[0].ref), dead_end(got[1].ref)], now=T0)
        enqueue_one(storage, queue="b", delay_ms=60 * SEC)
        cancelled = enqueue_one(storage, queue="b", delay_ms=60 * SEC)
        storage.cancel(cancelled, now=T0)
        states = storage.enqueue(
            [
                new_job(queue="b", concurrency_key="k", concurrency_limit=1, concurrency_skip=True)
                for _ in range(2)
            ],
            now=T0,
        )
        assert states == [JobState.QUEUED, JobState.SKIPPED]
        enqueue_one(storage, queue="a")
        assert storage.stats(now=T0 + SEC) == [
            QueueStats(queue="a", ready=1),
            QueueStats(
                queue="b",
                ready=2,
                scheduled=1,
                running=1,
                succeeded=1,
                dead=1,
                cancelled=1,
                skipped=1,
            ),
        ]

    def test_stats_judges_ready_by_now(self, storage: Storage) -> None:
        enqueue_one(storage, delay_ms=10 * SEC)
        assert storage.stats(now=T0 + 10 * SEC - 1) == [QueueStats(queue="default", scheduled=1)]
        assert storage.stats(now=T0 + 10 * SEC) == [QueueStats(queue="default", ready=1)]

    def test_stats_counts_cancelled_attempt_ends(self, storage: Storage) -> None:
        enqueue_one(storage, queue="c")
        got = claim_one(storage, now=T0, queues=["c"])
        storage.finish([cancel_end(got.ref)], now=T0)
        assert storage.stats(now=T0) == [QueueStats(queue="c", cancelled=1)]

    def test_count_pending_counts_running_and_soon_ready_jobs(self, storage: Storage) -> None:
        enqueue_one(storage)  # ready
        enqueue_one(storage)  # will run
        enqueue_one(storage, delay_ms=30 * SEC)  # ready within a 30 s horizon
        enqueue_one(storage, delay_ms=90 * SEC)  # beyond a 60 s horizon
        enqueue_one(storage, queue="other")  # another queue
        done = enqueue_one(storage, priority=9)
        got = storage.claim("w", ["default"], 2, LEASE, now=T0)
        assert got[0].id == done
        storage.finish([complete_end(got[0].ref)], now=T0)
        assert storage.count_pending(["default"], 0, now=T0) == 2
        assert storage.count_pending(["default"], 30 * SEC, now=T0) == 3
        assert storage.count_pending(["default"], 60 * SEC, now=T0) == 3
        assert storage.count_pending(["default"], 90 * SEC, now=T0) == 4
        assert storage.count_pending(["default", "other"], 0, now=T0) == 3
        assert storage.count_pending(["nothing"], 90 * SEC, now=T0) == 0
