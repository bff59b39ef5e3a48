"""Contract: cancel -- queued jobs at once, running jobs by request."""

from __future__ import annotations

import pytest

from queue_core.records.errors import NotFound
from queue_core.records.jobs import (
    JobState,
    Outcome,
    ReapedJob,
    Reason,
    RenewResult,
)
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
from queue_core.testing.suite._base import ContractBase, job_of


class CancelContract(ContractBase):
    """``cancel`` and how a cancel request reaches the running attempt."""

    def test_cancel_of_a_queued_job_ends_it_at_once(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        assert storage.cancel(job_id, now=T0 + SEC) is JobState.CANCELLED
        rec = job_of(storage, job_id)
        assert (rec.state, rec.reason, rec.finished_at) == (
            JobState.CANCELLED,
            Reason.CANCELLED.value,
            T0 + SEC,
        )
        assert rec.attempts == 0
        assert storage.list_attempts(job_id) == []
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 2 * SEC) == []

    def test_cancel_of_a_delayed_job_ends_it(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, delay_ms=60 * SEC)
        assert storage.cancel(job_id, now=T0) is JobState.CANCELLED
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 61 * SEC) == []

    def test_cancel_of_a_running_job_only_requests_it(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, heartbeat_ms=10 * SEC)
        got = claim_one(storage, now=T0)
        assert storage.cancel(job_id, now=T0 + SEC) is JobState.RUNNING
        rec = job_of(storage, job_id)
        assert (rec.state, rec.cancel_requested, rec.finished_at) == (
            JobState.RUNNING,
            True,
            None,
        )
        assert storage.renew([got.ref], LEASE, now=T0 + 2 * SEC) == RenewResult(
            lost=[], cancel_requested=[got.ref]
        )
        assert storage.heartbeat(got.ref, now=T0 + 3 * SEC) is True

    def test_renew_still_renews_a_cancel_requested_attempt(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=2)
        got = claim_one(storage, now=T0, lease_ms=10 * SEC)
        storage.cancel(job_id, now=T0 + SEC)
        storage.renew([got.ref], 10 * SEC, now=T0 + 9 * SEC)
        assert storage.reap(now=T0 + 18_999) == []
        assert job_of(storage, job_id).state is JobState.RUNNING

    def test_cancel_requested_job_ends_cancelled_when_its_worker_says_so(
        self, storage: Storage
    ) -> None:
        job_id = enqueue_one(storage, max_attempts=3)
        got = claim_one(storage, now=T0)
        storage.cancel(job_id, now=T0 + SEC)
        assert storage.finish([cancel_end(got.ref)], now=T0 + 2 * SEC) == [True]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.reason, rec.finished_at) == (
            JobState.CANCELLED,
            "cancelled",
            T0 + 2 * SEC,
        )

    def test_reaped_cancel_requested_job_ends_cancelled(self, storage: Storage) -> None:
        """The attempt is recorded as what happened to it (``lost``, ``lease_expired``);
        the job ends ``cancelled`` instead of being retried or dead-lettered."""
        job_id = enqueue_one(storage, max_attempts=3)
        claim_one(storage, now=T0)
        storage.cancel(job_id, now=T0 + SEC)
        assert storage.reap(now=T0 + LEASE) == [
            ReapedJob(
                job_id=job_id,
                attempt=1,
                outcome=Outcome.LOST,
                reason=Reason.LEASE_EXPIRED.value,
                state=JobState.CANCELLED,
            )
        ]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.reason, rec.finished_at) == (
            JobState.CANCELLED,
            "cancelled",
            T0 + LEASE,
        )
        assert storage.list_attempts(job_id)[0].outcome is Outcome.LOST
        assert storage.list_dead() == []
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 2 * LEASE) == []

    def test_cancel_of_a_finished_job_leaves_it_as_it_is(self, storage: Storage) -> None:
        done = enqueue_one(storage)
        got = claim_one(storage, now=T0)
        storage.finish([complete_end(got.ref, b"r")], now=T0 + SEC)
        assert storage.cancel(done, now=T0 + 2 * SEC) is JobState.SUCCEEDED
        rec = job_of(storage, done)
        assert (rec.state, rec.result, rec.finished_at, rec.reason) == (
            JobState.SUCCEEDED,
            b"r",
            T0 + SEC,
            None,
        )

    def test_cancel_of_dead_cancelled_and_skipped_jobs_changes_nothing(
        self, storage: Storage
    ) -> None:
        dead = enqueue_one(storage)
        got = claim_one(storage, now=T0)
        storage.finish([dead_end(got.ref)], now=T0)
        cancelled = enqueue_one(storage)
        storage.cancel(cancelled, now=T0)
        blocker = new_job(concurrency_key="s", concurrency_limit=1, concurrency_skip=True)
        skipped = new_job(concurrency_key="s", concurrency_limit=1, concurrency_skip=True)
        assert storage.enqueue([blocker, skipped], now=T0) == [JobState.QUEUED, JobState.SKIPPED]
        assert storage.cancel(dead, now=T0 + SEC) is JobState.DEAD
        assert storage.cancel(cancelled, now=T0 + SEC) is JobState.CANCELLED
        assert storage.cancel(skipped.id, now=T0 + SEC) is JobState.SKIPPED
        assert job_of(storage, dead).reason == "fatal"
        assert job_of(storage, cancelled).finished_at == T0
        assert job_of(storage, skipped.id).reason == "concurrency_limit"

    def test_cancel_of_an_unknown_id_raises_not_found(self, storage: Storage) -> None:
        with pytest.raises(NotFound):
            storage.cancel("0" * 32, now=T0)
