"""Contract: claim -- what a claim hands out, order, readiness and limits."""

from __future__ import annotations

from queue_core.records.jobs import JobState, dt_from_ms
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    LEASE,
    MIN,
    SEC,
    T0,
    claim_one,
    enqueue_one,
    new_job,
    retry_end,
)
from queue_core.testing.suite._base import (
    ContractBase,
    job_of,
    numbered,
    order_says,
    running_record,
)

ORDER = "claim hands out ready jobs by higher priority, then earlier ready time, then enqueue order"


class ClaimContract(ContractBase):
    """``claim``: fields, state change, ordering, delays, queues and limits."""

    def test_claim_hands_out_every_field(self, storage: Storage) -> None:
        job = new_job(
            task_name="t.claim",
            priority=2,
            max_attempts=3,
            timeout_ms=50 * SEC,
            heartbeat_ms=10 * SEC,
            options='{"o": true}',
        )
        storage.enqueue([job], now=T0)
        now = T0 + 5 * SEC
        got = claim_one(storage, now=now, lease_ms=20 * SEC)
        assert (got.id, got.task_name, got.queue) == (job.id, "t.claim", "default")
        assert got.payload == job.payload
        assert got.attempt == 1
        assert isinstance(got.lease_token, str) and got.lease_token
        assert got.lease_expires_at == now + 20 * SEC
        assert got.deadline == now + 50 * SEC
        assert (got.max_attempts, got.priority) == (3, 2)
        assert (got.timeout_ms, got.heartbeat_ms) == (50 * SEC, 10 * SEC)
        assert got.options == '{"o": true}'
        assert got.enqueued_at == T0
        assert got.started_at == now
        assert got.replay_of is None
        assert got.ref.job_id == job.id and got.ref.attempt == 1

    def test_claim_without_timeout_has_no_deadline(self, storage: Storage) -> None:
        enqueue_one(storage)
        got = claim_one(storage, now=T0)
        assert got.deadline is None
        assert got.timeout_ms is None and got.heartbeat_ms is None

    def test_claim_marks_running_and_records_a_running_attempt(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        claim_one(storage, now=T0 + SEC, worker_id="worker-a")
        rec = job_of(storage, job_id)
        assert rec.state is JobState.RUNNING
        assert (rec.attempts, rec.started_at, rec.finished_at) == (1, T0 + SEC, None)
        assert storage.list_attempts(job_id) == [running_record(1, "worker-a", T0 + SEC)]
        assert storage.list_attempts(job_id)[0].started_at == dt_from_ms(T0 + SEC)

    def test_claim_on_empty_storage_returns_nothing(self, storage: Storage) -> None:
        assert storage.claim("w", ["default"], 10, LEASE, now=T0) == []

    def test_a_claimed_job_is_not_claimed_again(self, storage: Storage) -> None:
        enqueue_one(storage)
        claim_one(storage, now=T0)
        assert storage.claim("w2", ["default"], 10, LEASE, now=T0 + SEC) == []

    def test_higher_priority_first(self, storage: Storage) -> None:
        low = enqueue_one(storage, priority=0)
        high = enqueue_one(storage, priority=5)
        mid = enqueue_one(storage, priority=1)
        got = [c.id for c in storage.claim("w", ["default"], 3, LEASE, now=T0)]
        assert got == [high, mid, low], order_says(
            f"{ORDER} (priorities 5, 1, 0)", got, {"high": high, "mid": mid, "low": low}
        )

    def test_negative_priority_after_zero(self, storage: Storage) -> None:
        neg = enqueue_one(storage, priority=-3)
        zero = enqueue_one(storage)
        got = [c.id for c in storage.claim("w", ["default"], 2, LEASE, now=T0)]
        assert got == [zero, neg], order_says(
            f"{ORDER}: priority 0 before -3", got, {"zero": zero, "negative": neg}
        )

    def test_same_priority_earlier_ready_time_first(self, storage: Storage) -> None:
        later = enqueue_one(storage, run_at=T0 - 1 * SEC)
        earlier = enqueue_one(storage, run_at=T0 - 9 * SEC)
        got = [c.id for c in storage.claim("w", ["default"], 2, LEASE, now=T0)]
        assert got == [earlier, later], order_says(
            f"{ORDER}: same priority, ready 9 s ago before ready 1 s ago",
            got,
            {"earlier": earlier, "later": later},
        )

    def test_same_priority_and_ready_time_in_enqueue_order(self, storage: Storage) -> None:
        ids = [enqueue_one(storage, run_at=T0) for _ in range(5)]
        got = [c.id for c in storage.claim("w", ["default"], 5, LEASE, now=T0 + SEC)]
        assert got == ids, order_says(
            f"{ORDER}: same priority and ready time, so first enqueued first",
            got,
            numbered(ids),
        )

    def test_batch_enqueue_order_is_fifo(self, storage: Storage) -> None:
        jobs = [new_job(run_at=T0) for _ in range(4)]
        storage.enqueue(jobs, now=T0)
        got = [c.id for c in storage.claim("w", ["default"], 4, LEASE, now=T0)]
        expected = [j.id for j in jobs]
        assert got == expected, order_says(
            f"{ORDER}: one batch, so in the batch's order", got, numbered(expected)
        )

    def test_order_holds_across_several_queues(self, storage: Storage) -> None:
        a_low = enqueue_one(storage, queue="a", run_at=T0 - 50 * SEC)
        b_high = enqueue_one(storage, queue="b", priority=9, run_at=T0 - 1 * SEC)
        c_low_earlier = enqueue_one(storage, queue="c", run_at=T0 - 90 * SEC)
        a_high = enqueue_one(storage, queue="a", priority=9, run_at=T0 - 1 * SEC)
        b_low_same = enqueue_one(storage, queue="b", run_at=T0 - 50 * SEC)
        got = [c.id for c in storage.claim("w", ["a", "b", "c"], 10, LEASE, now=T0)]
        expected = {
            "b_high": b_high,
            "a_high": a_high,
            "c_low_earlier": c_low_earlier,
            "a_low": a_low,
            "b_low_same": b_low_same,
        }
        assert got == list(expected.values()), order_says(
            f"{ORDER}, across all the named queues at once", got, expected
        )

    def test_claim_takes_only_the_named_queues(self, storage: Storage) -> None:
        enqueue_one(storage, queue="a")
        b = enqueue_one(storage, queue="b")
        enqueue_one(storage, queue="c")
        got = storage.claim("w", ["b", "zzz"], 10, LEASE, now=T0)
        assert [c.id for c in got] == [b]
        assert storage.claim("w", [], 10, LEASE, now=T0) == []

    def test_delayed_job_not_claimable_before_its_ready_time(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, delay_ms=10 * SEC)
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 10 * SEC - 1) == []
        got = claim_one(storage, now=T0 + 10 * SEC)
        assert got.id == job_id
        assert got.started_at == T0 + 10 * SEC

    def test_claim_reports_when_the_job_became_due_if_it_says(self, storage: Storage) -> None:
        """``ClaimedJob.run_at`` is optional (``None``); when given, it is the due time."""
        enqueue_one(storage, delay_ms=10 * SEC)
        got = claim_one(storage, now=T0 + 12 * SEC)
        assert got.run_at is None or got.run_at == T0 + 10 * SEC
        enqueue_one(storage, now=T0 + 20 * SEC)
        got = claim_one(storage, now=T0 + 21 * SEC)
        assert got.run_at is None or got.run_at == T0 + 20 * SEC

    def test_scheduled_job_claimable_at_run_at(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, run_at=T0 + 5 * MIN)
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 5 * MIN - 1) == []
        assert claim_one(storage, now=T0 + 5 * MIN).id == job_id

    def test_delayed_high_priority_does_not_block_ready_low_priority(
        self, storage: Storage
    ) -> None:
        enqueue_one(storage, priority=10, delay_ms=MIN)
        low = enqueue_one(storage, priority=0)
        got = [c.id for c in storage.claim("w", ["default"], 5, LEASE, now=T0 + SEC)]
        assert got == [low], order_says(
            "a delayed job is not ready, whatever its priority: only the ready one is claimed",
            got,
            {"low": low},
        )

    def test_claim_respects_limit(self, storage: Storage) -> None:
        ids = [enqueue_one(storage) for _ in range(5)]
        first = storage.claim("w", ["default"], 2, LEASE, now=T0)
        second = storage.claim("w", ["default"], 2, LEASE, now=T0)
        third = storage.claim("w", ["default"], 2, LEASE, now=T0)
        got = [c.id for c in first + second + third]
        assert got == ids, order_says(
            f"{ORDER}; each claim takes the next ones", got, numbered(ids)
        )
        assert [len(first), len(second), len(third)] == [2, 2, 1], "claim returns <= limit"

    def test_each_attempt_gets_a_fresh_lease_token(self, storage: Storage) -> None:
        enqueue_one(storage, max_attempts=3)
        first = claim_one(storage, now=T0)
        assert storage.finish([retry_end(first.ref, 0)], now=T0 + SEC) == [True]
        second = claim_one(storage, now=T0 + SEC)
        assert second.attempt == 2
        assert second.lease_token != first.lease_token
