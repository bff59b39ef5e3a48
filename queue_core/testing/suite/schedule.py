"""Contract: schedule-to-start -- a ready job not claimed in time is dead-lettered unrun."""

from __future__ import annotations

from queue_core.records.jobs import (
    JobState,
    ReapedJob,
    Reason,
    dt_from_ms,
)
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import LEASE, SEC, T0, claim_one, enqueue_one, retry_end
from queue_core.testing.suite._base import ContractBase, job_of


class ScheduleToStartContract(ContractBase):
    """``schedule_to_start_ms`` in ``claim`` and ``reap``."""

    def test_claimable_before_the_deadline(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, schedule_to_start_ms=10 * SEC)
        assert claim_one(storage, now=T0 + 10 * SEC - 1).id == job_id

    def test_not_claimable_at_the_deadline(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, schedule_to_start_ms=10 * SEC)
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 10 * SEC) == []
        assert job_of(storage, job_id).state is JobState.QUEUED

    def test_reap_dead_letters_it_without_an_attempt(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, task_name="t.late", schedule_to_start_ms=10 * SEC)
        assert storage.reap(now=T0 + 10 * SEC - 1) == []
        now = T0 + 12 * SEC
        assert storage.reap(now=now) == [
            ReapedJob(
                job_id=job_id,
                attempt=0,
                outcome=None,
                reason=Reason.SCHEDULE_TO_START.value,
                state=JobState.DEAD,
            )
        ]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.reason, rec.attempts, rec.finished_at) == (
            JobState.DEAD,
            "schedule_to_start",
            0,
            now,
        )
        assert storage.list_attempts(job_id) == []
        assert rec.dead_id is not None
        entry = storage.get_dead(rec.dead_id)
        assert entry is not None
        assert (entry.job_id, entry.task_name, entry.reason) == (
            job_id,
            "t.late",
            "schedule_to_start",
        )
        assert (entry.attempts, entry.dead_at) == ([], dt_from_ms(now))
        assert storage.reap(now=now + SEC) == []

    def test_deadline_counts_from_the_ready_time(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, delay_ms=60 * SEC, schedule_to_start_ms=10 * SEC)
        assert storage.reap(now=T0 + 69 * SEC) == []
        assert claim_one(storage, now=T0 + 70 * SEC - 1).id == job_id

    def test_deadline_restarts_when_a_retry_is_queued(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=2, schedule_to_start_ms=10 * SEC)
        got = claim_one(storage, now=T0 + 9 * SEC)
        storage.finish([retry_end(got.ref, 30 * SEC)], now=T0 + 15 * SEC)
        assert storage.reap(now=T0 + 54 * SEC) == []
        again = claim_one(storage, now=T0 + 54 * SEC)
        assert (again.id, again.attempt) == (job_id, 2)

    def test_running_jobs_are_not_subject_to_it(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, schedule_to_start_ms=5 * SEC)
        claim_one(storage, now=T0 + SEC, lease_ms=60 * SEC)
        assert storage.reap(now=T0 + 20 * SEC) == []
        assert job_of(storage, job_id).state is JobState.RUNNING
