"""Contract: renew and heartbeat -- what they extend and how they fence stale refs."""

from __future__ import annotations

import pytest

from queue_core.records.errors import LeaseLost
from queue_core.records.jobs import (
    JobState,
    LeaseRef,
    Outcome,
    ReapedJob,
    Reason,
    RenewResult,
)
from queue_core.rules.leases import REAP_MARGIN_MS as MARGIN
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import LEASE, SEC, T0, claim_one, complete_end, enqueue_one
from queue_core.testing.suite._base import ContractBase


class LeaseContract(ContractBase):
    """``renew`` and ``heartbeat``."""

    def test_renew_extends_the_lease_to_now_plus_lease(self, storage: Storage) -> None:
        enqueue_one(storage, max_attempts=2)
        got = claim_one(storage, now=T0, lease_ms=30 * SEC)
        res = storage.renew([got.ref], 30 * SEC, now=T0 + 20 * SEC)
        assert res == RenewResult(lost=[], cancel_requested=[])
        assert storage.reap(now=T0 + 49_999) == []
        reaped = storage.reap(now=T0 + 50 * SEC)
        assert [(r.job_id, r.reason) for r in reaped] == [(got.id, Reason.LEASE_EXPIRED.value)]

    def test_renew_can_shorten_the_lease(self, storage: Storage) -> None:
        """The new expiry is ``now + lease_ms`` even when that is earlier than before."""
        enqueue_one(storage, max_attempts=2)
        got = claim_one(storage, now=T0, lease_ms=60 * SEC)
        storage.renew([got.ref], 5 * SEC, now=T0 + SEC)
        assert [r.job_id for r in storage.reap(now=T0 + 6 * SEC)] == [got.id]

    def test_renew_reports_refs_that_are_not_current(self, storage: Storage) -> None:
        enqueue_one(storage)
        got = claim_one(storage, now=T0)
        wrong_token = LeaseRef(got.id, got.attempt, got.lease_token + "x")
        wrong_attempt = LeaseRef(got.id, got.attempt + 1, got.lease_token)
        unknown = LeaseRef("0" * 32, 1, got.lease_token)
        res = storage.renew([wrong_token, got.ref, wrong_attempt, unknown], LEASE, now=T0 + SEC)
        assert res == RenewResult(lost=[wrong_token, wrong_attempt, unknown], cancel_requested=[])

    def test_renew_after_finish_reports_lost(self, storage: Storage) -> None:
        enqueue_one(storage)
        got = claim_one(storage, now=T0)
        assert storage.finish([complete_end(got.ref)], now=T0 + SEC) == [True]
        assert storage.renew([got.ref], LEASE, now=T0 + 2 * SEC) == RenewResult(
            lost=[got.ref], cancel_requested=[]
        )

    def test_renew_of_nothing_is_empty(self, storage: Storage) -> None:
        assert storage.renew([], LEASE, now=T0) == RenewResult(lost=[], cancel_requested=[])

    def test_renew_batch_renews_each_current_ref(self, storage: Storage) -> None:
        enqueue_one(storage, max_attempts=2)
        enqueue_one(storage, max_attempts=2)
        a, b = storage.claim("w", ["default"], 2, 10 * SEC, now=T0)
        storage.renew([a.ref, b.ref], 10 * SEC, now=T0 + 8 * SEC)
        assert storage.reap(now=T0 + 17_999) == []
        assert sorted(r.job_id for r in storage.reap(now=T0 + 18 * SEC)) == sorted([a.id, b.id])

    def test_heartbeat_extends_the_heartbeat_deadline(self, storage: Storage) -> None:
        enqueue_one(storage, heartbeat_ms=10 * SEC, max_attempts=2)
        got = claim_one(storage, now=T0, lease_ms=60 * SEC)
        assert storage.heartbeat(got.ref, now=T0 + 8 * SEC) is False
        assert storage.reap(now=T0 + 18 * SEC + MARGIN - 1) == []
        assert storage.reap(now=T0 + 18 * SEC + MARGIN) == [
            ReapedJob(
                job_id=got.id,
                attempt=1,
                outcome=Outcome.TIMED_OUT,
                reason=Reason.HEARTBEAT_TIMEOUT.value,
                state=JobState.QUEUED,
            )
        ]

    def test_heartbeat_does_not_extend_the_lease(self, storage: Storage) -> None:
        enqueue_one(storage, heartbeat_ms=60 * SEC, max_attempts=2)
        got = claim_one(storage, now=T0, lease_ms=30 * SEC)
        storage.heartbeat(got.ref, now=T0 + 20 * SEC)
        reaped = storage.reap(now=T0 + 30 * SEC)
        assert [(r.job_id, r.reason, r.outcome) for r in reaped] == [
            (got.id, Reason.LEASE_EXPIRED.value, Outcome.LOST)
        ]

    def test_renew_does_not_count_as_a_heartbeat(self, storage: Storage) -> None:
        enqueue_one(storage, heartbeat_ms=10 * SEC, max_attempts=2)
        got = claim_one(storage, now=T0, lease_ms=30 * SEC)
        storage.renew([got.ref], 30 * SEC, now=T0 + 5 * SEC)
        storage.renew([got.ref], 30 * SEC, now=T0 + 9 * SEC)
        reaped = storage.reap(now=T0 + 10 * SEC + MARGIN)
        assert [(r.reason, r.outcome) for r in reaped] == [
            (Reason.HEARTBEAT_TIMEOUT.value, Outcome.TIMED_OUT)
        ]

    def test_heartbeat_without_heartbeat_ms_changes_nothing(self, storage: Storage) -> None:
        enqueue_one(storage, max_attempts=2)
        got = claim_one(storage, now=T0, lease_ms=30 * SEC)
        assert storage.heartbeat(got.ref, now=T0 + 25 * SEC) is False
        assert [r.reason for r in storage.reap(now=T0 + 30 * SEC)] == [Reason.LEASE_EXPIRED.value]

    def test_heartbeat_with_a_wrong_token_raises_lease_lost(self, storage: Storage) -> None:
        enqueue_one(storage, heartbeat_ms=10 * SEC)
        got = claim_one(storage, now=T0)
        with pytest.raises(LeaseLost):
            storage.heartbeat(LeaseRef(got.id, 1, got.lease_token + "x"), now=T0 + SEC)
        with pytest.raises(LeaseLost):
            storage.heartbeat(LeaseRef(got.id, 2, got.lease_token), now=T0 + SEC)
        with pytest.raises(LeaseLost):
            storage.heartbeat(LeaseRef("0" * 32, 1, got.lease_token), now=T0 + SEC)
        # the failed heartbeats extended nothing
        assert [r.reason for r in storage.reap(now=T0 + 10 * SEC + MARGIN)] == [
            Reason.HEARTBEAT_TIMEOUT.value
        ]

    def test_heartbeat_after_finish_raises_lease_lost(self, storage: Storage) -> None:
        enqueue_one(storage, heartbeat_ms=10 * SEC)
        got = claim_one(storage, now=T0)
        storage.finish([complete_end(got.ref)], now=T0 + SEC)
        with pytest.raises(LeaseLost):
            storage.heartbeat(got.ref, now=T0 + 2 * SEC)
