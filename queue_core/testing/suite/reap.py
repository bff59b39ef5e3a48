"""Contract: reap -- lost and overdue attempts, reasons, precedence, fencing after reap."""

from __future__ import annotations

import pytest

from queue_core.records.errors import LeaseLost
from queue_core.records.jobs import (
    AttemptRecord,
    JobState,
    Outcome,
    QueueStats,
    ReapedJob,
    Reason,
    RenewResult,
    dt_from_ms,
)
from queue_core.rules.decide import lost_delay_ms
from queue_core.rules.leases import REAP_MARGIN_MS as MARGIN
from queue_core.rules.retry import RetryPolicy
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    LEASE,
    SEC,
    T0,
    claim_one,
    complete_end,
    enqueue_one,
    error_info,
    retry_end,
)
from queue_core.testing.suite._base import ContractBase, job_of, order_says


class ReapContract(ContractBase):
    """``reap`` of running attempts, and what a late worker sees afterwards."""

    def test_nothing_to_reap_before_the_lease_expires(self, storage: Storage) -> None:
        enqueue_one(storage)
        got = claim_one(storage, now=T0, lease_ms=LEASE)
        assert storage.reap(now=got.lease_expires_at - 1) == []
        assert job_of(storage, got.id).state is JobState.RUNNING

    def test_reap_on_empty_storage_is_empty(self, storage: Storage) -> None:
        assert storage.reap(now=T0) == []

    def test_expired_lease_is_reaped_lost_and_requeued(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=3, lost_delay_ms=5 * SEC)
        claim_one(storage, now=T0, lease_ms=LEASE, worker_id="w-lost")
        now = T0 + LEASE
        assert storage.reap(now=now) == [
            ReapedJob(
                job_id=job_id,
                attempt=1,
                outcome=Outcome.LOST,
                reason=Reason.LEASE_EXPIRED.value,
                state=JobState.QUEUED,
            )
        ]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.run_at, rec.attempts) == (JobState.QUEUED, now + 5 * SEC, 1)
        assert storage.list_attempts(job_id) == [
            AttemptRecord(
                number=1,
                outcome=Outcome.LOST,
                reason=Reason.LEASE_EXPIRED.value,
                error_class=None,
                error_type=None,
                message=None,
                traceback=None,
                worker_id="w-lost",
                started_at=dt_from_ms(T0),
                finished_at=dt_from_ms(now),
                mode=None,
            )
        ]

    def test_reaped_job_runs_again_after_lost_delay_with_attempt_two(
        self, storage: Storage
    ) -> None:
        job_id = enqueue_one(storage, max_attempts=3, lost_delay_ms=5 * SEC)
        claim_one(storage, now=T0, lease_ms=LEASE)
        storage.reap(now=T0 + LEASE)
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + LEASE + 5 * SEC - 1) == []
        again = claim_one(storage, now=T0 + LEASE + 5 * SEC)
        assert (again.id, again.attempt) == (job_id, 2)

    def test_reaped_job_with_lost_delay_0_keeps_its_place_in_line(self, storage: Storage) -> None:
        """A lost delay of 0 requeues the job at its previous ready time and order, so it
        is claimed before jobs enqueued after it (policy.outcomes.reap_ready_at), not
        behind the whole backlog."""
        lost = enqueue_one(storage, max_attempts=3, lost_delay_ms=0)
        claim_one(storage, now=T0)
        same_ms = enqueue_one(storage, now=T0, max_attempts=3)
        later = [enqueue_one(storage, now=T0 + k * SEC, max_attempts=3) for k in (1, 2)]
        now = T0 + LEASE
        assert [(r.job_id, r.state) for r in storage.reap(now=now)] == [(lost, JobState.QUEUED)]
        assert (job_of(storage, lost).state, job_of(storage, lost).run_at) == (
            JobState.QUEUED,
            T0,
        )
        order = []
        for k in range(4):
            got = storage.claim("w", ["default"], 1, LEASE, now=now + k)
            assert len(got) == 1, got
            order.append((got[0].id, got[0].attempt))
        expected = {
            "reaped (attempt 2)": (lost, 2),
            "enqueued the same ms": (same_ms, 1),
            "enqueued 1 s later": (later[0], 1),
            "enqueued 2 s later": (later[1], 1),
        }
        assert order == list(expected.values()), order_says(
            "a job reaped with lost_delay_ms 0 keeps its ready time and enqueue order "
            "(policy.outcomes.reap_ready_at), so it is claimed before jobs enqueued after it",
            order,
            expected,
        )

    def test_reaped_job_keeps_its_place_after_its_default_backoff(self, storage: Storage) -> None:
        """A (issue 26 item 12): A is enqueued first, then B and C; A's worker dies.
        Once its lost backoff (the default policy's) has passed, A is claimed before B
        and C, which were queued after it (policy.outcomes.reap_place_at): a lost attempt
        is the worker's fault, so the reap keeps A's place instead of sending it behind
        every job that was ready by then."""
        lost_delay = lost_delay_ms(RetryPolicy(max_attempts=3), 1, lambda: 0.0)
        assert lost_delay > 0, lost_delay
        a = enqueue_one(storage, max_attempts=3, lost_delay_ms=lost_delay)
        assert claim_one(storage, now=T0).id == a
        b = enqueue_one(storage, now=T0, max_attempts=3, lost_delay_ms=lost_delay)
        c = enqueue_one(storage, now=T0 + SEC, max_attempts=3, lost_delay_ms=lost_delay)
        reaped_at = T0 + LEASE
        assert [(r.job_id, r.state) for r in storage.reap(now=reaped_at)] == [(a, JobState.QUEUED)]
        assert job_of(storage, a).run_at == reaped_at + lost_delay  # its backoff holds
        now = reaped_at + lost_delay
        order = []
        for k in range(3):
            got = storage.claim("w", ["default"], 1, LEASE, now=now + k)
            assert len(got) == 1, got
            order.append((got[0].id, got[0].attempt))
        expected = {
            "A, reaped (attempt 2)": (a, 2),
            "B, enqueued after A": (b, 1),
            "C, enqueued after B": (c, 1),
        }
        assert order == list(expected.values()), order_says(
            "a reaped job keeps its place in line (policy.outcomes.reap_place_at): once "
            "its backoff has passed it is claimed before the jobs enqueued after it",
            order,
            expected,
        )

    def test_reaped_job_is_not_claimed_before_its_backoff(self, storage: Storage) -> None:
        """Keeping its place never makes a reaped job early: before its backoff ends a
        claim takes the jobs behind it, and A comes next once it has."""
        a = enqueue_one(storage, max_attempts=3, lost_delay_ms=5 * SEC)
        claim_one(storage, now=T0)
        b = enqueue_one(storage, now=T0, max_attempts=3)
        c = enqueue_one(storage, now=T0 + SEC, max_attempts=3)
        reaped_at = T0 + LEASE
        storage.reap(now=reaped_at)
        first = storage.claim("w", ["default"], 1, LEASE, now=reaped_at + 5 * SEC - 1)
        assert [j.id for j in first] == [b], "A was claimed before its backoff ended"
        second = storage.claim("w", ["default"], 1, LEASE, now=reaped_at + 5 * SEC)
        third = storage.claim("w", ["default"], 1, LEASE, now=reaped_at + 5 * SEC + 1)
        assert [(j.id, j.attempt) for j in second + third] == [(a, 2), (c, 1)], order_says(
            "a reaped job keeps its place once its backoff has passed",
            [(j.id, j.attempt) for j in second + third],
            {"A (attempt 2)": (a, 2), "C": (c, 1)},
        )

    def test_reaped_job_keeps_its_place_when_reaped_again(self, storage: Storage) -> None:
        """A job reaped twice keeps its first place: its second claim came from that
        place, not from its backoff's ready time."""
        a = enqueue_one(storage, max_attempts=3, lost_delay_ms=5 * SEC)
        claim_one(storage, now=T0)
        b = enqueue_one(storage, now=T0 + SEC, max_attempts=3)
        storage.reap(now=T0 + LEASE)
        again = T0 + LEASE + 5 * SEC
        assert [j.id for j in storage.claim("w", ["default"], 1, LEASE, now=again)] == [a]
        c = enqueue_one(storage, now=again, max_attempts=3)
        storage.reap(now=again + LEASE)
        now = again + LEASE + 5 * SEC
        got = [storage.claim("w", ["default"], 1, LEASE, now=now + k) for k in range(3)]
        order = [(j[0].id, j[0].attempt) for j in got if j]
        expected = {"A (attempt 3)": (a, 3), "B": (b, 1), "C": (c, 1)}
        assert order == list(expected.values()), order_says(
            "a job reaped twice keeps the place it had at its first claim", order, expected
        )

    def test_a_reaped_job_in_its_backoff_counts_as_scheduled(self, storage: Storage) -> None:
        """While its backoff runs, a reaped job that kept its place is queued but not ready
        (``stats``, ``count_pending``); a cancel then takes it out of every count."""
        a = enqueue_one(storage, max_attempts=3, lost_delay_ms=5 * SEC)
        claim_one(storage, now=T0)
        reaped_at = T0 + LEASE
        storage.reap(now=reaped_at)
        assert storage.stats(now=reaped_at) == [QueueStats(queue="default", scheduled=1)]
        assert storage.count_pending(["default"], 0, now=reaped_at) == 0
        assert storage.count_pending(["default"], 5 * SEC, now=reaped_at) == 1
        assert storage.stats(now=reaped_at + 5 * SEC) == [QueueStats(queue="default", ready=1)]
        assert storage.cancel(a, now=reaped_at + SEC) is JobState.CANCELLED
        assert storage.count_pending(["default"], 10 * SEC, now=reaped_at + SEC) == 0
        assert storage.stats(now=reaped_at + SEC) == [QueueStats(queue="default", cancelled=1)]
        assert storage.claim("w", ["default"], 5, LEASE, now=reaped_at + 10 * SEC) == []

    def test_reaped_job_with_schedule_to_start_restarts_its_wait(self, storage: Storage) -> None:
        """Even with a lost delay of 0, a job with a schedule-to-start bound is ready
        again at the reap (its bound counts from there), not at its old ready time, so
        the reap does not expire it."""
        job_id = enqueue_one(
            storage, max_attempts=2, lost_delay_ms=0, schedule_to_start_ms=LEASE + SEC
        )
        claim_one(storage, now=T0 + SEC)
        now = T0 + SEC + LEASE
        storage.reap(now=now)
        assert job_of(storage, job_id).run_at == now
        assert storage.reap(now=now + LEASE) == []
        again = claim_one(storage, now=now + LEASE)
        assert (again.id, again.attempt) == (job_id, 2)

    def test_each_stale_attempt_is_reaped_once(self, storage: Storage) -> None:
        enqueue_one(storage, max_attempts=3, lost_delay_ms=60 * SEC)
        claim_one(storage, now=T0)
        assert len(storage.reap(now=T0 + LEASE)) == 1
        assert storage.reap(now=T0 + LEASE) == []
        assert storage.reap(now=T0 + LEASE + SEC) == []

    def test_exhausted_attempts_dead_letter_with_every_record(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, task_name="t.crash", max_attempts=2)
        claim_one(storage, now=T0, worker_id="w1")
        storage.reap(now=T0 + LEASE)
        claim_one(storage, now=T0 + LEASE, worker_id="w2")
        now = T0 + 2 * LEASE
        assert storage.reap(now=now) == [
            ReapedJob(
                job_id=job_id,
                attempt=2,
                outcome=Outcome.LOST,
                reason=Reason.LEASE_EXPIRED.value,
                state=JobState.DEAD,
            )
        ]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.reason, rec.finished_at) == (
            JobState.DEAD,
            Reason.RETRIES_EXHAUSTED.value,
            now,
        )
        assert rec.dead_id is not None
        entry = storage.get_dead(rec.dead_id)
        assert entry is not None
        assert (entry.job_id, entry.task_name, entry.reason) == (
            job_id,
            "t.crash",
            "retries_exhausted",
        )
        assert entry.dead_at == dt_from_ms(now)
        assert [(a.number, a.outcome, a.reason, a.worker_id) for a in entry.attempts] == [
            (1, Outcome.LOST, "lease_expired", "w1"),
            (2, Outcome.LOST, "lease_expired", "w2"),
        ]
        assert storage.claim("w", ["default"], 5, LEASE, now=now + 60 * SEC) == []

    def test_reap_dead_letter_error_fields_are_empty(self, storage: Storage) -> None:
        """A reaped attempt raised nothing, so the entry's ``error``/``error_class``
        are ``None`` (the attempt records say what happened)."""
        job_id = enqueue_one(storage, max_attempts=1)
        claim_one(storage, now=T0)
        storage.reap(now=T0 + LEASE)
        dead_id = job_of(storage, job_id).dead_id
        assert dead_id is not None
        entry = storage.get_dead(dead_id)
        assert entry is not None
        assert (entry.error, entry.error_class) == (None, None)

    def test_timeout_is_reaped_timed_out_and_consumes_an_attempt(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=2, timeout_ms=10 * SEC, lost_delay_ms=SEC)
        got = claim_one(storage, now=T0, lease_ms=LEASE)
        assert got.deadline == T0 + 10 * SEC
        # the reaper judges a deadline a margin after it: the live worker records it first
        assert storage.reap(now=T0 + 10 * SEC + MARGIN - 1) == []
        assert storage.reap(now=T0 + 10 * SEC + MARGIN) == [
            ReapedJob(
                job_id=job_id,
                attempt=1,
                outcome=Outcome.TIMED_OUT,
                reason=Reason.TIMEOUT.value,
                state=JobState.QUEUED,
            )
        ]
        assert job_of(storage, job_id).run_at == T0 + 11 * SEC + MARGIN
        second = claim_one(storage, now=T0 + 11 * SEC + MARGIN)
        assert second.attempt == 2
        assert [(r.outcome, r.state) for r in storage.reap(now=T0 + 21 * SEC + 2 * MARGIN)] == [
            (Outcome.TIMED_OUT, JobState.DEAD)
        ]

    def test_timeout_is_not_extended_by_renewal(self, storage: Storage) -> None:
        enqueue_one(storage, max_attempts=2, timeout_ms=10 * SEC)
        got = claim_one(storage, now=T0, lease_ms=LEASE)
        storage.renew([got.ref], LEASE, now=T0 + 9 * SEC)
        assert [r.reason for r in storage.reap(now=T0 + 10 * SEC + MARGIN)] == [
            Reason.TIMEOUT.value
        ]

    def test_heartbeat_timeout_is_reaped_timed_out(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=1, heartbeat_ms=5 * SEC)
        claim_one(storage, now=T0, lease_ms=LEASE)
        assert storage.reap(now=T0 + 5 * SEC + MARGIN - 1) == []
        assert storage.reap(now=T0 + 5 * SEC + MARGIN) == [
            ReapedJob(
                job_id=job_id,
                attempt=1,
                outcome=Outcome.TIMED_OUT,
                reason=Reason.HEARTBEAT_TIMEOUT.value,
                state=JobState.DEAD,
            )
        ]
        attempt = storage.list_attempts(job_id)[0]
        assert (attempt.outcome, attempt.reason) == (Outcome.TIMED_OUT, "heartbeat_timeout")

    def test_a_deadline_in_its_margin_is_left_to_the_live_worker(self, storage: Storage) -> None:
        """Never early (SPEC §4): between an attempt's deadline (or heartbeat bound) and
        the margin after it the reaper takes nothing, so the worker that stops the body at
        the deadline records the end itself; its finish is taken."""
        timed = enqueue_one(storage, max_attempts=2, timeout_ms=10 * SEC)
        beat = enqueue_one(storage, max_attempts=2, heartbeat_ms=10 * SEC)
        a, b = storage.claim("w", ["default"], 2, LEASE, now=T0)
        for now in (T0 + 10 * SEC, T0 + 10 * SEC + MARGIN // 2, T0 + 10 * SEC + MARGIN - 1):
            assert storage.reap(now=now) == []
        ends = [retry_end(a.ref, 0), retry_end(b.ref, 0)]
        assert storage.finish(ends, now=T0 + 10 * SEC + MARGIN - 1) == [True, True]
        assert [job_of(storage, j).state for j in (timed, beat)] == [JobState.QUEUED] * 2

    def test_timeout_takes_precedence_over_heartbeat_and_lease(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=2, timeout_ms=20 * SEC, heartbeat_ms=10 * SEC)
        claim_one(storage, now=T0, lease_ms=5 * SEC)
        reaped = storage.reap(now=T0 + 30 * SEC)
        assert [(r.job_id, r.outcome, r.reason) for r in reaped] == [
            (job_id, Outcome.TIMED_OUT, Reason.TIMEOUT.value)
        ]

    def test_heartbeat_timeout_takes_precedence_over_lease(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=2, timeout_ms=60 * SEC, heartbeat_ms=10 * SEC)
        claim_one(storage, now=T0, lease_ms=5 * SEC)
        reaped = storage.reap(now=T0 + 15 * SEC)
        assert [(r.job_id, r.outcome, r.reason) for r in reaped] == [
            (job_id, Outcome.TIMED_OUT, Reason.HEARTBEAT_TIMEOUT.value)
        ]

    @pytest.mark.parametrize(
        ("bound", "reason"),
        [
            ({"timeout_ms": 10 * SEC}, Reason.TIMEOUT.value),
            ({"heartbeat_ms": 10 * SEC}, Reason.HEARTBEAT_TIMEOUT.value),
        ],
    )
    def test_reaped_cancel_requested_job_ends_cancelled_even_with_no_attempt_left(
        self, storage: Storage, bound: dict[str, int], reason: str
    ) -> None:
        """A pending cancel wins over dead-lettering; the attempt still says what
        happened to it (``timed_out`` with the bound's reason)."""
        job_id = enqueue_one(storage, max_attempts=1, **bound)
        claim_one(storage, now=T0, lease_ms=LEASE)
        storage.cancel(job_id, now=T0 + SEC)
        assert storage.reap(now=T0 + 10 * SEC + MARGIN) == [
            ReapedJob(
                job_id=job_id,
                attempt=1,
                outcome=Outcome.TIMED_OUT,
                reason=reason,
                state=JobState.CANCELLED,
            )
        ]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.reason, rec.finished_at, rec.dead_id) == (
            JobState.CANCELLED,
            "cancelled",
            T0 + 10 * SEC + MARGIN,
            None,
        )
        attempt = storage.list_attempts(job_id)[0]
        assert (attempt.outcome, attempt.reason) == (Outcome.TIMED_OUT, reason)
        assert storage.list_dead() == []

    def test_reap_of_the_last_attempt_dead_letters_every_attempt_of_any_kind(
        self, storage: Storage
    ) -> None:
        """An attempt that failed (recorded by ``finish``) and one that timed out
        (recorded by ``reap``) both land in the entry, in order."""
        job_id = enqueue_one(storage, max_attempts=2, timeout_ms=10 * SEC)
        first = claim_one(storage, now=T0, worker_id="w1")
        err = error_info("KeyError", "gone", traceback="tb-1")
        storage.finish([retry_end(first.ref, 0, error=err)], now=T0 + SEC)
        claim_one(storage, now=T0 + 2 * SEC, worker_id="w2")
        now = T0 + 12 * SEC + MARGIN
        assert storage.reap(now=now) == [
            ReapedJob(
                job_id=job_id,
                attempt=2,
                outcome=Outcome.TIMED_OUT,
                reason=Reason.TIMEOUT.value,
                state=JobState.DEAD,
            )
        ]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.reason, rec.finished_at) == (
            JobState.DEAD,
            "retries_exhausted",
            now,
        )
        assert rec.dead_id is not None
        entry = storage.get_dead(rec.dead_id)
        assert entry is not None and entry.reason == "retries_exhausted"
        assert [
            (a.number, a.outcome, a.reason, a.error_class, a.worker_id) for a in entry.attempts
        ] == [
            (1, Outcome.FAILED, "error", "KeyError", "w1"),
            (2, Outcome.TIMED_OUT, "timeout", None, "w2"),
        ]
        assert entry.attempts == storage.list_attempts(job_id)

    def test_reap_respects_limit(self, storage: Storage) -> None:
        for _ in range(5):
            enqueue_one(storage, max_attempts=2, lost_delay_ms=60 * SEC)
        storage.claim("w", ["default"], 5, LEASE, now=T0)
        first = storage.reap(now=T0 + LEASE, limit=2)
        second = storage.reap(now=T0 + LEASE, limit=2)
        third = storage.reap(now=T0 + LEASE, limit=2)
        assert [len(first), len(second), len(third)] == [2, 2, 1]
        assert len({r.job_id for r in first + second + third}) == 5

    def test_late_finish_of_a_reaped_attempt_is_refused(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=3)
        first = claim_one(storage, now=T0)
        storage.reap(now=T0 + LEASE)
        assert storage.finish([complete_end(first.ref, b"late")], now=T0 + LEASE + SEC) == [False]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.result, rec.attempts) == (JobState.QUEUED, None, 1)
        assert storage.list_attempts(job_id)[0].outcome is Outcome.LOST

    def test_retried_attempt_finishes_and_the_stale_one_cannot_overwrite(
        self, storage: Storage
    ) -> None:
        job_id = enqueue_one(storage, max_attempts=3)
        first = claim_one(storage, now=T0)
        storage.reap(now=T0 + LEASE)
        second = claim_one(storage, now=T0 + LEASE + SEC)
        assert storage.finish([complete_end(first.ref, b"stale")], now=T0 + LEASE + 2 * SEC) == [
            False
        ]
        assert storage.finish([complete_end(second.ref, b"fresh")], now=T0 + LEASE + 3 * SEC) == [
            True
        ]
        assert storage.finish([retry_end(first.ref, 0)], now=T0 + LEASE + 4 * SEC) == [False]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.result, rec.attempts) == (JobState.SUCCEEDED, b"fresh", 2)
        assert [a.outcome for a in storage.list_attempts(job_id)] == [
            Outcome.LOST,
            Outcome.SUCCEEDED,
        ]

    def test_renew_of_a_reaped_attempt_reports_lost(self, storage: Storage) -> None:
        enqueue_one(storage, max_attempts=3)
        first = claim_one(storage, now=T0)
        storage.reap(now=T0 + LEASE)
        second = claim_one(storage, now=T0 + LEASE)
        res = storage.renew([first.ref, second.ref], LEASE, now=T0 + LEASE + SEC)
        assert res == RenewResult(lost=[first.ref], cancel_requested=[])

    def test_heartbeat_of_a_reaped_attempt_raises_lease_lost(self, storage: Storage) -> None:
        enqueue_one(storage, max_attempts=3, heartbeat_ms=5 * SEC)
        first = claim_one(storage, now=T0)
        storage.reap(now=T0 + 5 * SEC + MARGIN)
        with pytest.raises(LeaseLost):
            storage.heartbeat(first.ref, now=T0 + 6 * SEC + MARGIN)

    def test_reap_releases_nothing_for_finished_jobs(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=2)
        got = claim_one(storage, now=T0)
        storage.finish([complete_end(got.ref)], now=T0 + SEC)
        assert storage.reap(now=T0 + 10 * LEASE) == []
        assert job_of(storage, job_id).state is JobState.SUCCEEDED
