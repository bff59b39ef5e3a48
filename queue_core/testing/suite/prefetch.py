"""Contract: claims ahead of free slots (``SupportsPrefetch``) -- a held attempt is bound
by its lease alone until its body starts, then its timeout, heartbeat bound and start
time count from that start (SPEC §4 "never early", §8 ``prefetch``)."""

from __future__ import annotations

import pytest

from queue_core.records.flows import StepState
from queue_core.records.jobs import JobState, LeaseRef, Outcome, Reason, dt_from_ms
from queue_core.rules.leases import REAP_MARGIN_MS as MARGIN
from queue_core.rules.outcomes import MAX_HELD_REFUNDS
from queue_core.storage.abilities import (
    SupportsGiveBack,
    SupportsPrefetch,
    SupportsStartWithFinish,
)
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    LEASE,
    SEC,
    T0,
    complete_end,
    enqueue_one,
    released_end,
)
from queue_core.testing.suite._base import ContractBase, lacks
from queue_core.testing.suite._flows_base import (
    claim_steps,
    flows_of,
    make_execution,
    make_spec,
    states,
)

__all__ = ["PrefetchContract"]


def _ahead(storage: Storage) -> SupportsPrefetch:
    if not isinstance(storage, SupportsPrefetch):
        pytest.skip(lacks(SupportsPrefetch))
    return storage


def _with_finish(storage: Storage) -> SupportsStartWithFinish:
    _ahead(storage)
    if not isinstance(storage, SupportsStartWithFinish):
        pytest.skip(lacks(SupportsStartWithFinish))
    return storage


def _give(storage: Storage) -> tuple[SupportsPrefetch, SupportsGiveBack]:
    ahead = _ahead(storage)
    if not isinstance(storage, SupportsGiveBack):
        pytest.skip(lacks(SupportsGiveBack))
    return ahead, storage


class PrefetchContract(ContractBase):
    """``claim_ahead`` and ``start_claimed`` (and ``start_and_finish``)."""

    def test_a_held_attempt_times_out_only_after_its_start(self, storage: Storage) -> None:
        ahead = _ahead(storage)
        job_id = enqueue_one(storage, timeout_ms=5 * SEC, max_attempts=2)
        (got,) = ahead.claim_ahead("w", ["default"], 5, 60 * SEC, now=T0)
        assert got.id == job_id and got.deadline is None
        assert storage.get_job(job_id).state is JobState.RUNNING  # type: ignore[union-attr]
        storage.renew([got.ref], 60 * SEC, now=T0 + 20 * SEC)
        assert storage.reap(now=T0 + 25 * SEC + MARGIN) == []  # held: no deadline yet
        assert ahead.start_claimed([got.ref], now=T0 + 30 * SEC) == [True]
        assert storage.reap(now=T0 + 35 * SEC + MARGIN - 1) == []
        (reaped,) = storage.reap(now=T0 + 35 * SEC + MARGIN)
        assert (reaped.job_id, reaped.outcome, reaped.reason) == (
            job_id,
            Outcome.TIMED_OUT,
            Reason.TIMEOUT.value,
        )

    def test_a_held_attempt_heartbeat_bound_counts_from_its_start(self, storage: Storage) -> None:
        ahead = _ahead(storage)
        job_id = enqueue_one(storage, heartbeat_ms=10 * SEC, max_attempts=2)
        (got,) = ahead.claim_ahead("w", ["default"], 5, 60 * SEC, now=T0)
        assert storage.reap(now=T0 + 15 * SEC + MARGIN) == []
        assert ahead.start_claimed([got.ref], now=T0 + 20 * SEC) == [True]
        assert storage.reap(now=T0 + 30 * SEC + MARGIN - 1) == []
        (reaped,) = storage.reap(now=T0 + 30 * SEC + MARGIN)
        assert (reaped.job_id, reaped.reason) == (job_id, Reason.HEARTBEAT_TIMEOUT.value)

    def test_a_held_attempt_is_bound_by_its_lease(self, storage: Storage) -> None:
        ahead = _ahead(storage)
        job_id = enqueue_one(storage, timeout_ms=600 * SEC, max_attempts=2)
        (got,) = ahead.claim_ahead("w", ["default"], 5, 10 * SEC, now=T0)
        assert storage.claim("w2", ["default"], 5, 10 * SEC, now=T0 + SEC) == []
        assert storage.reap(now=T0 + 10 * SEC - 1) == []
        (reaped,) = storage.reap(now=T0 + 10 * SEC)
        assert (reaped.job_id, reaped.reason) == (job_id, Reason.LEASE_EXPIRED.value)
        assert ahead.start_claimed([got.ref], now=T0 + 11 * SEC) == [False]

    def test_a_held_attempt_of_a_worker_that_died_spends_no_attempt(self, storage: Storage) -> None:
        """SPEC §8: a job prefetched by a worker that died (killed before its body
        started) is reaped back to its queue at once, its budget whole -- not
        dead-lettered ``retries_exhausted`` without having run; the loss is on record."""
        ahead = _ahead(storage)
        job_id = enqueue_one(storage, max_attempts=1, lost_delay_ms=30 * SEC, timeout_ms=SEC)
        (got,) = ahead.claim_ahead("w", ["default"], 5, 10 * SEC, now=T0)
        (reaped,) = storage.reap(now=T0 + 10 * SEC)
        assert (reaped.job_id, reaped.attempt, reaped.state) == (job_id, 1, JobState.QUEUED)
        assert (reaped.outcome, reaped.reason) == (Outcome.LOST, Reason.LEASE_EXPIRED.value)
        job = storage.get_job(job_id)
        assert job is not None
        assert (job.state, job.attempts, job.max_attempts) == (JobState.QUEUED, 1, 2)
        ((number, outcome, reason),) = [
            (a.number, a.outcome, a.reason) for a in storage.list_attempts(job_id)
        ]
        assert (number, outcome, reason) == (1, Outcome.LOST, Reason.LEASE_EXPIRED.value)
        assert ahead.start_claimed([got.ref], now=T0 + 10 * SEC) == [False]
        # ready at once (no backoff: it never ran), with its whole budget
        (again,) = ahead.claim_ahead("w2", ["default"], 5, 10 * SEC, now=T0 + 10 * SEC + 1)
        assert (again.id, again.attempt, again.max_attempts) == (job_id, 2, 2)
        # started, it spends its attempt as any running one does
        assert ahead.start_claimed([again.ref], now=T0 + 11 * SEC) == [True]
        (last,) = storage.reap(now=T0 + 11 * SEC + SEC + MARGIN)
        assert (last.reason, last.state) == (Reason.TIMEOUT.value, JobState.DEAD)
        job = storage.get_job(job_id)
        assert job is not None and (job.attempts, job.max_attempts) == (2, 2)

    def test_held_attempts_are_reaped_unspent_a_bounded_number_of_times(
        self, storage: Storage
    ) -> None:
        """A worker tells a held body's start a little after it, so a body that kills its
        worker at once may be reaped as held: such refunds are bounded
        (``MAX_HELD_REFUNDS``), and the job still reaches the dead-letter store instead
        of looping (SPEC §5)."""
        ahead = _ahead(storage)
        job_id = enqueue_one(storage, max_attempts=1)
        t = T0
        for _ in range(MAX_HELD_REFUNDS):
            ahead.claim_ahead("w", ["default"], 5, 10 * SEC, now=t)
            t += 10 * SEC
            (refunded,) = storage.reap(now=t)
            assert refunded.state is JobState.QUEUED
            t += 1
        ahead.claim_ahead("w", ["default"], 5, 10 * SEC, now=t)
        (spent,) = storage.reap(now=t + 10 * SEC)
        assert (spent.attempt, spent.state) == (MAX_HELD_REFUNDS + 1, JobState.DEAD)
        job = storage.get_job(job_id)
        assert job is not None
        assert (job.reason, job.max_attempts) == ("retries_exhausted", 1 + MAX_HELD_REFUNDS)
        assert [a.reason for a in storage.list_attempts(job_id)] == [Reason.LEASE_EXPIRED.value] * (
            MAX_HELD_REFUNDS + 1
        )

    def test_a_held_attempt_reaped_with_a_cancel_pending_is_cancelled(
        self, storage: Storage
    ) -> None:
        ahead = _ahead(storage)
        job_id = enqueue_one(storage, max_attempts=3)
        ahead.claim_ahead("w", ["default"], 5, 10 * SEC, now=T0)
        storage.cancel(job_id, now=T0 + SEC)
        (reaped,) = storage.reap(now=T0 + 10 * SEC)
        assert (reaped.job_id, reaped.state) == (job_id, JobState.CANCELLED)
        job = storage.get_job(job_id)
        assert job is not None and job.max_attempts == 3

    def test_a_step_held_by_a_worker_that_died_runs_again_unspent(self, storage: Storage) -> None:
        # SPEC §8: claimed ahead of a free slot, never started, its worker killed: the
        # reap queues it again with its budget whole, and its execution goes on
        ahead = _ahead(storage)
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": [], "b": ["a"]}), max_attempts=1)
        flows.start_execution(new, now=T0)
        (held,) = ahead.claim_ahead("w", ["default"], 5, LEASE, now=T0 + 1)
        assert held.step_id == "a"
        (reaped,) = storage.reap(now=T0 + 1 + LEASE)
        assert (reaped.state, reaped.reason) == (JobState.QUEUED, Reason.LEASE_EXPIRED.value)
        assert states(flows, new.id) == {"a": StepState.QUEUED, "b": StepState.PENDING}
        again = claim_steps(storage, T0 + 2 + LEASE)["a"]
        assert (again.attempt, again.max_attempts) == (2, 2)
        storage.finish([complete_end(again.ref)], now=T0 + 3 + LEASE)
        assert states(flows, new.id)["b"] is StepState.QUEUED

    def test_the_attempt_starts_when_its_body_starts(self, storage: Storage) -> None:
        ahead = _ahead(storage)
        job_id = enqueue_one(storage)
        (got,) = ahead.claim_ahead("w", ["default"], 5, 60 * SEC, now=T0)
        assert ahead.start_claimed([got.ref], now=T0 + 7 * SEC) == [True]
        job = storage.get_job(job_id)
        assert job is not None and job.started_at == T0 + 7 * SEC
        assert storage.finish([complete_end(got.ref)], now=T0 + 8 * SEC) == [True]
        (attempt,) = storage.list_attempts(job_id)
        assert attempt.outcome is Outcome.SUCCEEDED
        assert attempt.started_at == dt_from_ms(T0 + 7 * SEC)
        assert attempt.finished_at == dt_from_ms(T0 + 8 * SEC)

    def test_a_start_told_later_counts_from_when_the_body_started(self, storage: Storage) -> None:
        """``ago_ms``: the body started that long before the call (the worker tells
        storage with its next write); the start, the timeout and the heartbeat bound
        count from then."""
        ahead = _ahead(storage)
        a = enqueue_one(storage, timeout_ms=5 * SEC, max_attempts=2)
        b = enqueue_one(storage, heartbeat_ms=4 * SEC, max_attempts=2)
        got = {j.id: j for j in ahead.claim_ahead("w", ["default"], 5, 60 * SEC, now=T0)}
        refs = [got[a].ref, got[b].ref]
        assert ahead.start_claimed(refs, [3 * SEC, 1 * SEC], now=T0 + 10 * SEC) == [True, True]
        assert storage.get_job(a).started_at == T0 + 7 * SEC  # type: ignore[union-attr]
        assert storage.get_job(b).started_at == T0 + 9 * SEC  # type: ignore[union-attr]
        assert storage.reap(now=T0 + 12 * SEC + MARGIN - 1) == []
        (first,) = storage.reap(now=T0 + 12 * SEC + MARGIN)
        assert (first.job_id, first.reason) == (a, Reason.TIMEOUT.value)
        (second,) = storage.reap(now=T0 + 13 * SEC + MARGIN)
        assert (second.job_id, second.reason) == (b, Reason.HEARTBEAT_TIMEOUT.value)

    def test_start_claimed_reports_and_leaves_refs_that_are_not_current(
        self, storage: Storage
    ) -> None:
        ahead = _ahead(storage)
        a, b = enqueue_one(storage, timeout_ms=5 * SEC), enqueue_one(storage)
        first, second = ahead.claim_ahead("w", ["default"], 5, 60 * SEC, now=T0)
        assert {first.id, second.id} == {a, b}
        storage.finish([complete_end(second.ref)], now=T0 + SEC)
        wrong = LeaseRef(first.id, first.attempt, first.lease_token + "x")
        got = ahead.start_claimed([wrong, second.ref, first.ref], now=T0 + 2 * SEC)
        assert got == [False, False, True]
        job = storage.get_job(second.id)
        assert job is not None and job.state is JobState.SUCCEEDED
        assert ahead.start_claimed([], now=T0 + 3 * SEC) == []

    def test_a_held_attempt_released_at_a_stop_spends_no_attempt(self, storage: Storage) -> None:
        """A stopping worker gives back the jobs it held (``worker_shutdown``)."""
        ahead = _ahead(storage)
        job_id = enqueue_one(storage, max_attempts=1)
        (got,) = ahead.claim_ahead("w", ["default"], 5, 60 * SEC, now=T0)
        assert storage.finish([released_end(got.ref)], now=T0 + SEC) == [True]
        (again,) = storage.claim("w2", ["default"], 5, 60 * SEC, now=T0 + 2 * SEC)
        assert again.id == job_id and again.attempt == 2 and again.max_attempts == 2

    def test_a_held_job_given_back_is_queued_as_before_its_claim(self, storage: Storage) -> None:
        """SPEC §8: a stopping worker gives its held jobs back without spending an
        attempt -- none is counted and none recorded."""
        ahead, give = _give(storage)
        job_id = enqueue_one(storage, max_attempts=1, timeout_ms=30 * SEC)
        (got,) = ahead.claim_ahead("w", ["default"], 5, 60 * SEC, now=T0)
        assert give.give_back([got.ref], now=T0 + SEC) == [True]
        job = storage.get_job(job_id)
        assert job is not None
        assert (job.state, job.attempts, job.max_attempts) == (JobState.QUEUED, 0, 1)
        assert storage.list_attempts(job_id) == []
        [stats] = storage.stats(now=T0 + SEC)
        assert (stats.ready, stats.running) == (1, 0)
        assert storage.renew([got.ref], 60 * SEC, now=T0 + SEC).lost == [got.ref]
        assert give.give_back([got.ref], now=T0 + SEC) == [False]  # not current any more
        assert storage.reap(now=T0 + 200 * SEC) == []  # no lease or deadline left behind
        (again,) = storage.claim("w2", ["default"], 5, 60 * SEC, now=T0 + 2 * SEC)
        assert (again.id, again.attempt, again.max_attempts) == (job_id, 1, 1)
        assert storage.finish([complete_end(again.ref)], now=T0 + 3 * SEC) == [True]
        assert [a.number for a in storage.list_attempts(job_id)] == [1]

    def test_a_job_given_back_frees_its_concurrency_slot_and_keeps_its_place(
        self, storage: Storage
    ) -> None:
        ahead, give = _give(storage)
        key = {"concurrency_key": "k", "concurrency_limit": 1}
        first = enqueue_one(storage, now=T0, **key)
        second = enqueue_one(storage, now=T0 + 1, **key)
        (got,) = ahead.claim_ahead("w", ["default"], 5, 60 * SEC, now=T0 + 2)
        assert got.id == first
        assert storage.claim("w2", ["default"], 5, 60 * SEC, now=T0 + 3) == []  # key full
        assert give.give_back([got.ref], now=T0 + 4) == [True]
        (again,) = storage.claim("w2", ["default"], 5, 60 * SEC, now=T0 + 5)
        assert again.id == first and again.attempt == 1  # ahead of the second, as before
        assert storage.finish([complete_end(again.ref)], now=T0 + 6) == [True]
        (last,) = storage.claim("w2", ["default"], 5, 60 * SEC, now=T0 + 7)
        assert last.id == second

    def test_claim_ahead_takes_jobs_in_claim_order(self, storage: Storage) -> None:
        ahead = _ahead(storage)
        low = enqueue_one(storage, priority=0)
        high = enqueue_one(storage, priority=5)
        later = enqueue_one(storage, priority=0, now=T0 + 1)
        got = ahead.claim_ahead("w", ["default"], 2, 60 * SEC, now=T0 + SEC)
        assert [j.id for j in got] == [high, low]
        assert [j.id for j in storage.claim("w", ["default"], 5, 60 * SEC, now=T0 + SEC)] == [later]

    def test_start_and_finish_stores_each_start_before_the_ends(self, storage: Storage) -> None:
        """A held attempt started and ended in one call has its body's start on record;
        another, only started, counts its timeout from its start; a stale ref changes
        nothing."""
        ahead = _ahead(storage)
        both = _with_finish(storage)
        a = enqueue_one(storage)
        b = enqueue_one(storage, timeout_ms=5 * SEC, max_attempts=2)
        c = enqueue_one(storage)
        got = {j.id: j for j in ahead.claim_ahead("w", ["default"], 5, 60 * SEC, now=T0)}
        stale = LeaseRef(c, got[c].attempt, got[c].lease_token + "x")
        took = both.start_and_finish(
            [got[a].ref, got[b].ref, stale],
            [3 * SEC, 1 * SEC, 0],
            [complete_end(got[a].ref), complete_end(got[c].ref)],
            now=T0 + 10 * SEC,
        )
        assert took == [True, True]
        (attempt,) = storage.list_attempts(a)
        assert attempt.started_at == dt_from_ms(T0 + 7 * SEC)
        assert attempt.finished_at == dt_from_ms(T0 + 10 * SEC)
        assert storage.get_job(b).started_at == T0 + 9 * SEC  # type: ignore[union-attr]
        (c_attempt,) = storage.list_attempts(c)
        assert c_attempt.started_at == dt_from_ms(T0)  # never told: held since its claim
        assert storage.reap(now=T0 + 14 * SEC + MARGIN - 1) == []
        (reaped,) = storage.reap(now=T0 + 14 * SEC + MARGIN)
        assert (reaped.job_id, reaped.reason) == (b, Reason.TIMEOUT.value)

    def test_start_and_finish_with_starts_only_or_ends_only(self, storage: Storage) -> None:
        ahead = _ahead(storage)
        both = _with_finish(storage)
        a, b = enqueue_one(storage), enqueue_one(storage)
        got = {j.id: j for j in ahead.claim_ahead("w", ["default"], 5, 60 * SEC, now=T0)}
        assert both.start_and_finish([got[a].ref], [SEC], [], now=T0 + 5 * SEC) == []
        assert storage.get_job(a).started_at == T0 + 4 * SEC  # type: ignore[union-attr]
        took = both.start_and_finish([], [], [complete_end(got[b].ref)], now=T0 + 6 * SEC)
        assert took == [True]
        job = storage.get_job(b)
        assert job is not None and job.state is JobState.SUCCEEDED and job.started_at == T0
