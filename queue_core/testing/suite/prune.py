"""Contract: prune -- finished jobs go after the retention; dead letters stay."""

from __future__ import annotations

from queue_core.records.jobs import JobState, QueueStats
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    DAY,
    SEC,
    T0,
    claim_one,
    complete_end,
    dead_end,
    enqueue_one,
    new_job,
)
from queue_core.testing.suite._base import ContractBase, StorageWithRetention, job_of


class PruneContract(ContractBase):
    """``prune`` against the class's ``retention_ms``, and storages built with a given
    ``?retention=`` (the ``storage_with_retention`` fixture)."""

    def test_prune_deletes_finished_jobs_at_the_retention_boundary(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0)
        storage.finish([complete_end(got.ref)], now=T0 + SEC)
        assert storage.prune(now=T0 + SEC + self.retention_ms - 1) == 0
        assert storage.get_job(job_id) is not None
        assert storage.prune(now=T0 + SEC + self.retention_ms) == 1
        assert storage.get_job(job_id) is None
        assert storage.list_attempts(job_id) == []

    def test_prune_keeps_queued_and_running_jobs(self, storage: Storage) -> None:
        queued = enqueue_one(storage, run_at=T0 + 10 * self.retention_ms)
        running = enqueue_one(storage)
        claim_one(storage, now=T0)
        assert storage.prune(now=T0 + 5 * self.retention_ms) == 0
        assert job_of(storage, queued).state is JobState.QUEUED
        assert job_of(storage, running).state is JobState.RUNNING

    def test_prune_deletes_cancelled_and_skipped_jobs(self, storage: Storage) -> None:
        cancelled = enqueue_one(storage)
        storage.cancel(cancelled, now=T0)
        skipped = enqueue_one(
            storage, concurrency_key="s", concurrency_limit=1, concurrency_skip=True
        )
        extra = new_job(concurrency_key="s", concurrency_limit=1, concurrency_skip=True)
        assert storage.enqueue([extra], now=T0) == [JobState.SKIPPED]
        assert storage.prune(now=T0 + self.retention_ms) == 2
        assert storage.get_job(cancelled) is None
        assert storage.get_job(extra.id) is None
        assert job_of(storage, skipped).state is JobState.QUEUED

    def test_prune_keeps_dead_letter_entries(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0)
        storage.finish([dead_end(got.ref)], now=T0)
        dead_id = job_of(storage, job_id).dead_id
        assert dead_id is not None
        assert storage.prune(now=T0 + self.retention_ms) == 1
        assert storage.get_job(job_id) is None
        entry = storage.get_dead(dead_id)
        assert entry is not None and entry.job_id == job_id
        assert len(entry.attempts) == 1
        new_id = storage.retry_dead(dead_id, now=T0 + self.retention_ms)
        assert job_of(storage, new_id).replay_of == dead_id

    def test_pruned_jobs_leave_stats_and_count_pending(self, storage: Storage) -> None:
        done = enqueue_one(storage, queue="gone")
        got = claim_one(storage, now=T0, queues=["gone"])
        storage.finish([complete_end(got.ref)], now=T0)
        enqueue_one(storage, queue="kept", run_at=T0 + 10 * self.retention_ms)
        later = T0 + self.retention_ms
        assert storage.prune(now=later) == 1
        assert storage.get_job(done) is None
        assert storage.stats(now=later) == [QueueStats(queue="kept", scheduled=1)]
        assert storage.count_pending(["gone", "kept"], 0, now=later) == 0

    def test_prune_respects_limit(self, storage: Storage) -> None:
        ids = [enqueue_one(storage) for _ in range(5)]
        for job_id in ids:
            storage.cancel(job_id, now=T0)
        later = T0 + self.retention_ms
        assert storage.prune(now=later, limit=2) == 2
        assert storage.prune(now=later, limit=2) == 2
        assert storage.prune(now=later, limit=2) == 1
        assert storage.prune(now=later, limit=2) == 0
        assert all(storage.get_job(i) is None for i in ids)

    def test_retention_zero_keeps_no_finished_job(
        self, storage_with_retention: StorageWithRetention
    ) -> None:
        """``retention=0``: a finished job stays readable until the next prune, which
        deletes every job finished at or before its ``now``."""
        storage = storage_with_retention("0")
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0)
        assert storage.finish([complete_end(got.ref, b"r")], now=T0 + SEC) == [True]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.result) == (JobState.SUCCEEDED, b"r")
        assert len(storage.list_attempts(job_id)) == 1
        assert storage.prune(now=T0 + SEC - 1) == 0
        assert storage.prune(now=T0 + SEC) == 1
        assert storage.get_job(job_id) is None
        assert storage.list_attempts(job_id) == []
        assert storage.stats(now=T0 + SEC) == []

    def test_retention_zero_keeps_dead_letters_and_unfinished_jobs(
        self, storage_with_retention: StorageWithRetention
    ) -> None:
        storage = storage_with_retention("0")
        dead = enqueue_one(storage)
        got = claim_one(storage, now=T0)
        storage.finish([dead_end(got.ref)], now=T0)
        dead_id = job_of(storage, dead).dead_id
        assert dead_id is not None
        running = enqueue_one(storage)
        claim_one(storage, now=T0)
        queued = enqueue_one(storage)
        assert storage.prune(now=T0 + SEC) == 1
        assert storage.get_job(dead) is None
        assert job_of(storage, running).state is JobState.RUNNING
        assert job_of(storage, queued).state is JobState.QUEUED
        entry = storage.get_dead(dead_id)
        assert entry is not None and entry.job_id == dead
        assert len(entry.attempts) == 1
        assert job_of(storage, storage.retry_dead(dead_id, now=T0 + SEC)).replay_of == dead_id

    def test_retention_counted_in_days(self, storage_with_retention: StorageWithRetention) -> None:
        storage = storage_with_retention("1d")
        job_id = enqueue_one(storage)
        storage.cancel(job_id, now=T0)
        assert storage.prune(now=T0 + DAY - 1) == 0
        assert job_of(storage, job_id).state is JobState.CANCELLED
        assert storage.prune(now=T0 + DAY) == 1
        assert storage.get_job(job_id) is None
