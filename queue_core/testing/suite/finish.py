"""Contract: finish -- the core's decisions applied, attempt records, fencing."""

from __future__ import annotations

import pytest

from queue_core.records.jobs import (
    AttemptRecord,
    JobState,
    LeaseRef,
    Outcome,
    QueueStats,
    Reason,
    dt_from_ms,
)
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    DEFAULT_PAYLOAD,
    LEASE,
    MIN,
    SEC,
    T0,
    cancel_end,
    claim_one,
    complete_end,
    dead_end,
    enqueue_one,
    error_info,
    new_job,
    released_end,
    retry_end,
    timed_out_end,
)
from queue_core.testing.suite._base import ContractBase, job_of


class FinishContract(ContractBase):
    """``finish`` with each :class:`~queue_core.records.jobs.Action`."""

    def test_complete_stores_result_and_ends_succeeded(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0 + SEC, worker_id="w-ok")
        end = complete_end(got.ref, b'{"value": 42}', mode="async")
        assert storage.finish([end], now=T0 + 3 * SEC) == [True]
        rec = job_of(storage, job_id)
        assert rec.state is JobState.SUCCEEDED
        assert rec.reason is None
        assert rec.result == b'{"value": 42}'
        assert rec.error is None
        assert (rec.attempts, rec.started_at, rec.finished_at) == (1, T0 + SEC, T0 + 3 * SEC)
        assert storage.list_attempts(job_id) == [
            AttemptRecord(
                number=1,
                outcome=Outcome.SUCCEEDED,
                reason=None,
                error_class=None,
                error_type=None,
                message=None,
                traceback=None,
                worker_id="w-ok",
                started_at=dt_from_ms(T0 + SEC),
                finished_at=dt_from_ms(T0 + 3 * SEC),
                mode="async",
            )
        ]

    def test_completed_job_is_not_claimed_again(self, storage: Storage) -> None:
        enqueue_one(storage)
        got = claim_one(storage, now=T0)
        storage.finish([complete_end(got.ref)], now=T0 + SEC)
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 2 * SEC) == []

    def test_finish_batch_returns_one_bool_per_end(self, storage: Storage) -> None:
        enqueue_one(storage)
        enqueue_one(storage)
        a, b = storage.claim("w", ["default"], 2, LEASE, now=T0)
        stale = LeaseRef(a.id, a.attempt, a.lease_token + "x")
        ends = [complete_end(a.ref, b"1"), complete_end(stale, b"2"), complete_end(b.ref, b"3")]
        assert storage.finish(ends, now=T0 + SEC) == [True, False, True]
        assert job_of(storage, a.id).result == b"1"
        assert job_of(storage, b.id).result == b"3"

    def test_finish_with_a_wrong_token_records_nothing(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0, worker_id="w1")
        stale = LeaseRef(got.id, got.attempt, got.lease_token + "x")
        assert storage.finish([complete_end(stale, b"no")], now=T0 + SEC) == [False]
        rec = job_of(storage, job_id)
        assert rec.state is JobState.RUNNING
        assert rec.result is None and rec.finished_at is None
        assert storage.list_attempts(job_id)[0].outcome is None
        assert storage.finish([complete_end(got.ref, b"yes")], now=T0 + 2 * SEC) == [True]
        assert job_of(storage, job_id).result == b"yes"

    def test_second_finish_of_one_attempt_returns_false(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0)
        assert storage.finish([complete_end(got.ref, b"first")], now=T0 + SEC) == [True]
        assert storage.finish([dead_end(got.ref)], now=T0 + 2 * SEC) == [False]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.result, rec.finished_at) == (
            JobState.SUCCEEDED,
            b"first",
            T0 + SEC,
        )
        assert storage.list_dead() == []

    def test_retry_requeues_at_now_plus_delay(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=3)
        got = claim_one(storage, now=T0)
        err = error_info("KeyError", "missing", traceback="tb")
        assert storage.finish([retry_end(got.ref, 30 * SEC, error=err)], now=T0 + 2 * SEC) == [True]
        rec = job_of(storage, job_id)
        assert rec.state is JobState.QUEUED
        assert rec.run_at == T0 + 32 * SEC
        assert rec.attempts == 1
        assert rec.error == err
        assert rec.finished_at is None
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 32 * SEC - 1) == []
        again = claim_one(storage, now=T0 + 32 * SEC, worker_id="w2")
        assert (again.id, again.attempt) == (job_id, 2)
        assert again.payload == DEFAULT_PAYLOAD

    def test_retry_records_the_failed_attempt(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=3)
        got = claim_one(storage, now=T0, worker_id="w-a")
        err = error_info("OSError", "disk full", module="builtins", traceback="tb-1")
        storage.finish([retry_end(got.ref, 0, error=err, mode="process")], now=T0 + 4 * SEC)
        again = claim_one(storage, now=T0 + 5 * SEC, worker_id="w-b")
        storage.finish([complete_end(again.ref)], now=T0 + 6 * SEC)
        first, second = storage.list_attempts(job_id)
        assert first == AttemptRecord(
            number=1,
            outcome=Outcome.FAILED,
            reason=Reason.ERROR.value,
            error_class="OSError",
            error_type="builtins.OSError",
            message="disk full",
            traceback="tb-1",
            worker_id="w-a",
            started_at=dt_from_ms(T0),
            finished_at=dt_from_ms(T0 + 4 * SEC),
            mode="process",
        )
        assert (second.number, second.outcome, second.worker_id) == (
            2,
            Outcome.SUCCEEDED,
            "w-b",
        )
        assert (second.started_at, second.finished_at) == (
            dt_from_ms(T0 + 5 * SEC),
            dt_from_ms(T0 + 6 * SEC),
        )

    def test_retry_with_lost_delay_updates_the_reap_delay(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=3, lost_delay_ms=1 * SEC)
        got = claim_one(storage, now=T0, lease_ms=10 * SEC)
        storage.finish([retry_end(got.ref, 0, lost_delay_ms=45 * SEC)], now=T0 + SEC)
        claim_one(storage, now=T0 + 2 * SEC, lease_ms=10 * SEC)
        assert [r.state for r in storage.reap(now=T0 + 12 * SEC)] == [JobState.QUEUED]
        assert job_of(storage, job_id).run_at == T0 + 57 * SEC

    def test_retry_without_lost_delay_keeps_the_reap_delay(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=3, lost_delay_ms=7 * SEC)
        got = claim_one(storage, now=T0, lease_ms=10 * SEC)
        storage.finish([retry_end(got.ref, 0)], now=T0 + SEC)
        claim_one(storage, now=T0 + 2 * SEC, lease_ms=10 * SEC)
        storage.reap(now=T0 + 12 * SEC)
        assert job_of(storage, job_id).run_at == T0 + 19 * SEC

    def test_an_attempt_that_spends_none_raises_the_budget(self, storage: Storage) -> None:
        # a shutdown release (Decision.spends_attempt false) on the last attempt
        job_id = enqueue_one(storage, max_attempts=1)
        got = claim_one(storage, now=T0, worker_id="w1")
        assert storage.finish([released_end(got.ref)], now=T0 + SEC) == [True]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.attempts, rec.max_attempts) == (JobState.QUEUED, 1, 2)
        assert rec.run_at == T0 + SEC and rec.finished_at is None
        assert storage.list_dead() == []
        [first] = storage.list_attempts(job_id)
        assert (first.outcome, first.reason) == (Outcome.LOST, Reason.WORKER_SHUTDOWN.value)
        again = claim_one(storage, now=T0 + SEC, worker_id="w2")
        assert (again.id, again.attempt, again.max_attempts) == (job_id, 2, 2)
        assert storage.finish([complete_end(again.ref)], now=T0 + 2 * SEC) == [True]
        assert job_of(storage, job_id).state is JobState.SUCCEEDED

    def test_reap_sees_the_attempt_a_release_gave_back(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=2)
        got = claim_one(storage, now=T0)
        storage.finish([released_end(got.ref)], now=T0 + SEC)  # budget 3, 1 used
        claim_one(storage, now=T0 + SEC)
        # attempt 2 is lost: 2 < 3 attempts, queued again (without the release: dead)
        [reaped] = storage.reap(now=T0 + SEC + LEASE)
        assert (reaped.attempt, reaped.state) == (2, JobState.QUEUED)
        third = claim_one(storage, now=T0 + 2 * SEC + LEASE)
        assert (third.attempt, third.max_attempts) == (3, 3)
        [last] = storage.reap(now=T0 + 2 * SEC + 2 * LEASE)
        assert (last.attempt, last.state) == (3, JobState.DEAD)
        assert job_of(storage, job_id).reason == Reason.RETRIES_EXHAUSTED.value

    def test_a_decision_that_spends_an_attempt_keeps_the_budget(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=3)
        got = claim_one(storage, now=T0)
        storage.finish([retry_end(got.ref, 0)], now=T0 + SEC)
        assert job_of(storage, job_id).max_attempts == 3

    def test_dead_decision_writes_a_dead_letter_entry(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, task_name="t.fatal", queue="q1", max_attempts=5)
        got = claim_one(storage, now=T0 + SEC, queues=["q1"], worker_id="w-d")
        err = error_info(
            "TaskError", "no way", module="queue_core.records.errors", traceback="tb-d"
        )
        end = dead_end(got.ref, dead_reason=Reason.FATAL.value, error=err)
        assert storage.finish([end], now=T0 + 2 * SEC) == [True]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.reason, rec.finished_at) == (JobState.DEAD, "fatal", T0 + 2 * SEC)
        assert rec.dead_id is not None
        entry = storage.get_dead(rec.dead_id)
        assert entry is not None
        assert entry.id == rec.dead_id
        assert (entry.job_id, entry.task_name, entry.queue) == (job_id, "t.fatal", "q1")
        assert entry.args == (1, "x")
        assert entry.kwargs == {"k": 2}
        assert entry.payload == DEFAULT_PAYLOAD
        assert (entry.error, entry.error_class, entry.reason) == ("no way", "TaskError", "fatal")
        assert entry.dead_at == dt_from_ms(T0 + 2 * SEC)
        assert entry.replay_of is None
        assert entry.attempts == [
            AttemptRecord(
                number=1,
                outcome=Outcome.FAILED,
                reason=Reason.ERROR.value,
                error_class="TaskError",
                error_type="queue_core.records.errors.TaskError",
                message="no way",
                traceback="tb-d",
                worker_id="w-d",
                started_at=dt_from_ms(T0 + SEC),
                finished_at=dt_from_ms(T0 + 2 * SEC),
                mode="thread",
            )
        ]
        assert storage.claim("w", ["q1"], 5, LEASE, now=T0 + 3 * SEC) == []

    def test_dead_entry_keeps_every_attempt(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=3)
        first = claim_one(storage, now=T0)
        storage.finish([retry_end(first.ref, 0)], now=T0 + SEC)
        second = claim_one(storage, now=T0 + 2 * SEC)
        storage.finish(
            [dead_end(second.ref, dead_reason=Reason.RETRIES_EXHAUSTED.value)], now=T0 + 3 * SEC
        )
        dead_id = job_of(storage, job_id).dead_id
        assert dead_id is not None
        entry = storage.get_dead(dead_id)
        assert entry is not None
        assert entry.reason == "retries_exhausted"
        assert [(a.number, a.outcome) for a in entry.attempts] == [
            (1, Outcome.FAILED),
            (2, Outcome.FAILED),
        ]
        assert entry.attempts == storage.list_attempts(job_id)

    def test_cancel_decision_ends_cancelled(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=3)
        got = claim_one(storage, now=T0)
        assert storage.finish([cancel_end(got.ref)], now=T0 + SEC) == [True]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.reason, rec.finished_at) == (
            JobState.CANCELLED,
            Reason.CANCELLED.value,
            T0 + SEC,
        )
        assert storage.list_attempts(job_id)[0].outcome is Outcome.CANCELLED
        assert storage.list_dead() == []
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 2 * SEC) == []

    def test_time_out_decision_ends_timed_out(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=3)
        got = claim_one(storage, now=T0)
        assert storage.finish([timed_out_end(got.ref)], now=T0 + SEC) == [True]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.finished_at) == (JobState.TIMED_OUT, T0 + SEC)
        assert storage.list_attempts(job_id)[0].outcome is Outcome.TIMED_OUT
        assert storage.list_dead() == []
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 2 * SEC) == []

    def test_dead_decision_without_a_reason_dead_letters_as_fatal(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=3)
        got = claim_one(storage, now=T0)
        assert storage.finish([dead_end(got.ref, dead_reason=None)], now=T0 + SEC) == [True]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.reason, rec.finished_at) == (JobState.DEAD, "fatal", T0 + SEC)
        assert rec.dead_id is not None
        entry = storage.get_dead(rec.dead_id)
        assert entry is not None
        assert (entry.job_id, entry.reason) == (job_id, "fatal")

    @pytest.mark.parametrize(
        ("job_reason", "attempt_reason", "expected"),
        [
            (Reason.FLOW_TIMEOUT.value, Reason.TIMEOUT.value, "flow_timeout"),
            (None, Reason.TIMEOUT.value, "timeout"),
            (None, None, "flow_timeout"),
        ],
    )
    def test_time_out_decision_ends_timed_out_with_its_reason_and_no_dead_letter(
        self,
        storage: Storage,
        job_reason: str | None,
        attempt_reason: str | None,
        expected: str,
    ) -> None:
        """The job reason is the decision's, else the attempt's, else ``flow_timeout``."""
        job_id = enqueue_one(storage, max_attempts=3)
        got = claim_one(storage, now=T0)
        end = timed_out_end(got.ref, job_reason=job_reason, reason=attempt_reason)
        assert storage.finish([end], now=T0 + SEC) == [True]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.reason, rec.finished_at, rec.dead_id) == (
            JobState.TIMED_OUT,
            expected,
            T0 + SEC,
            None,
        )
        attempt = storage.list_attempts(job_id)[0]
        assert (attempt.outcome, attempt.reason) == (Outcome.TIMED_OUT, attempt_reason)
        assert storage.list_dead() == []
        assert storage.stats(now=T0 + SEC) == [QueueStats(queue="default", timed_out=1)]

    def test_one_batch_applies_each_action_to_its_own_job(self, storage: Storage) -> None:
        """Every action in one ``finish`` call: state and job reason per end."""
        ids = [enqueue_one(storage, max_attempts=3) for _ in range(5)]
        claimed = {c.id: c for c in storage.claim("w", ["default"], 5, LEASE, now=T0)}
        refs = [claimed[i].ref for i in ids]
        ends = [
            complete_end(refs[0]),
            retry_end(refs[1], 10 * SEC),
            dead_end(refs[2], dead_reason=Reason.UNKNOWN_TASK.value),
            cancel_end(refs[3]),
            timed_out_end(refs[4], job_reason=Reason.FLOW_TIMEOUT.value),
        ]
        assert storage.finish(ends, now=T0 + SEC) == [True] * 5
        assert [(job_of(storage, i).state, job_of(storage, i).reason) for i in ids] == [
            (JobState.SUCCEEDED, None),
            (JobState.QUEUED, None),
            (JobState.DEAD, "unknown_task"),
            (JobState.CANCELLED, "cancelled"),
            (JobState.TIMED_OUT, "flow_timeout"),
        ]
        assert [e.job_id for e in storage.list_dead()] == [ids[2]]
        assert storage.stats(now=T0 + SEC) == [
            QueueStats(queue="default", scheduled=1, succeeded=1, dead=1, cancelled=1, timed_out=1)
        ]

    def test_finish_of_nothing_is_empty(self, storage: Storage) -> None:
        assert storage.finish([], now=T0) == []

    def test_a_job_id_with_dots_is_an_ordinary_job_id(self, storage: Storage) -> None:
        """The core names flow step jobs ``<execution>.<idx>``, but a ``NewJob`` id is any
        string: a plain job whose id has a dot (even one shaped like a step job's)
        finishes, is fenced and is cancelled as any other, beside a plain job in one batch."""
        done, queued = new_job(id="not.a.step"), new_job(id="also.0", delay_ms=MIN)
        storage.enqueue([done], now=T0)
        (c,) = storage.claim("w", ["default"], 1, LEASE, now=T0)
        plain = new_job()
        storage.enqueue([queued, plain], now=T0 + 1)
        (p,) = storage.claim("w", ["default"], 5, LEASE, now=T0 + 2)
        assert p.id == plain.id
        ends = [complete_end(p.ref), complete_end(c.ref, b'"dotted"')]
        assert storage.finish(ends, now=T0 + 3) == [True, True]
        assert (job_of(storage, done.id).state, job_of(storage, done.id).result) == (
            JobState.SUCCEEDED,
            b'"dotted"',
        )
        assert job_of(storage, plain.id).state is JobState.SUCCEEDED
        assert storage.finish([complete_end(c.ref)], now=T0 + 4) == [False]
        assert storage.cancel(queued.id, now=T0 + 5) is JobState.CANCELLED
        assert job_of(storage, queued.id).state is JobState.CANCELLED
