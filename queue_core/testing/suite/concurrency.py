"""Contract: concurrency limits -- ``queue`` at claim, ``skip`` at enqueue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queue_core.app.options import concurrency_slot_key
from queue_core.records.jobs import (
    AttemptEnd,
    JobState,
    LeaseRef,
    Reason,
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
    retry_end,
)
from queue_core.testing.suite._base import ContractBase, job_of, order_says


def limited(key: str = "k", limit: int = 1, **fields: Any) -> dict[str, Any]:
    return {"concurrency_key": key, "concurrency_limit": limit, **fields}


def skipping(key: str = "s", limit: int = 1, **fields: Any) -> dict[str, Any]:
    return {"concurrency_key": key, "concurrency_limit": limit, "concurrency_skip": True, **fields}


class ConcurrencyContract(ContractBase):
    """Concurrency slots: acquired atomically at claim (queue) or enqueue (skip)."""

    def test_queue_limit_caps_running_jobs_at_claim(self, storage: Storage) -> None:
        ids = [enqueue_one(storage, **limited(limit=2)) for _ in range(4)]
        got = storage.claim("w", ["default"], 10, LEASE, now=T0)
        assert [c.id for c in got] == ids[:2]
        assert storage.claim("w", ["default"], 10, LEASE, now=T0 + SEC) == []
        assert [job_of(storage, i).state for i in ids] == [
            JobState.RUNNING,
            JobState.RUNNING,
            JobState.QUEUED,
            JobState.QUEUED,
        ]

    def test_blocked_jobs_do_not_block_other_jobs(self, storage: Storage) -> None:
        enqueue_one(storage, **limited(limit=1))
        enqueue_one(storage, priority=5, **limited(limit=1))
        free = enqueue_one(storage)
        got = storage.claim("w", ["default"], 10, LEASE, now=T0)
        assert len(got) == 2
        assert got[1].id == free
        assert got[0].priority == 5

    def test_finish_releases_the_slot_oldest_waiting_first(self, storage: Storage) -> None:
        first = enqueue_one(storage, **limited())
        second = enqueue_one(storage, **limited())
        third = enqueue_one(storage, **limited())
        got = claim_one(storage, now=T0)
        assert got.id == first
        storage.finish([complete_end(got.ref)], now=T0 + SEC)
        after = [claim_one(storage, now=T0 + 2 * SEC).id]
        assert after == [second], order_says(
            "a freed concurrency slot goes to the job of the key that waited longest",
            after,
            {"second": second, "third": third},
        )
        assert job_of(storage, third).state is JobState.QUEUED

    def test_every_kind_of_end_releases_the_slot(self, storage: Storage) -> None:
        ids = [enqueue_one(storage, **limited(max_attempts=2)) for _ in range(4)]
        ends: list[Callable[[LeaseRef], AttemptEnd]] = [
            lambda ref: retry_end(ref, 60 * SEC),
            dead_end,
            cancel_end,
        ]
        for i, make_end in enumerate(ends):
            got = claim_one(storage, now=T0 + i * SEC)
            assert got.id == ids[i]
            assert storage.finish([make_end(got.ref)], now=T0 + i * SEC) == [True]
        assert claim_one(storage, now=T0 + 3 * SEC).id == ids[3]

    def test_reap_releases_the_slot(self, storage: Storage) -> None:
        first = enqueue_one(storage, **limited(max_attempts=2, lost_delay_ms=60 * SEC))
        second = enqueue_one(storage, **limited())
        claim_one(storage, now=T0)
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + SEC) == []
        assert [r.job_id for r in storage.reap(now=T0 + LEASE)] == [first]
        assert claim_one(storage, now=T0 + LEASE).id == second

    def test_a_keyed_slot_of_a_lost_attempt_is_freed_by_reap(self, storage: Storage) -> None:
        # Concurrency(1, key=lambda customer: customer) on task "sync": the core computes
        # one slot key per customer; storage counts each one apart, and a worker killed
        # while holding a keyed slot does not leak it
        def key(customer: str) -> str:
            return customer

        def slot(customer: str) -> str:
            return concurrency_slot_key(key, "sync", (customer,), {})

        c1 = enqueue_one(storage, **limited(slot("c1"), max_attempts=2, lost_delay_ms=0))
        c1_next = enqueue_one(storage, **limited(slot("c1")))
        c2 = enqueue_one(storage, **limited(slot("c2")))
        got = storage.claim("w", ["default"], 10, LEASE, now=T0)
        assert [c.id for c in got] == [c1, c2]
        assert storage.claim("w", ["default"], 10, LEASE, now=T0 + SEC) == []
        storage.finish([complete_end(got[1].ref)], now=T0 + SEC)
        # the worker holding c1's slot is gone: reap frees it, and the key's limit of
        # one still holds for the lost job's retry and the job that waited behind it
        assert [r.job_id for r in storage.reap(now=T0 + LEASE)] == [c1]
        again = storage.claim("w", ["default"], 10, LEASE, now=T0 + LEASE + SEC)
        assert len(again) == 1 and again[0].id in (c1, c1_next)
        assert storage.claim("w", ["default"], 10, LEASE, now=T0 + LEASE + 2 * SEC) == []
        storage.finish([complete_end(again[0].ref)], now=T0 + LEASE + 3 * SEC)
        last = claim_one(storage, now=T0 + LEASE + 4 * SEC)
        assert {again[0].id, last.id} == {c1, c1_next}

    def test_a_keyed_skip_slot_is_freed_by_reap(self, storage: Storage) -> None:
        slots = [concurrency_slot_key(str.upper, "sync", (c,), {}) for c in ("a", "a", "b")]
        assert slots == ["sync:A", "sync:A", "sync:B"]
        first = new_job(**skipping(slots[0], max_attempts=1))
        extra, other = new_job(**skipping(slots[1])), new_job(**skipping(slots[2]))
        storage.enqueue([first, extra, other], now=T0)
        assert job_of(storage, extra.id).state is JobState.SKIPPED
        assert job_of(storage, other.id).state is JobState.QUEUED
        got = storage.claim("w", ["default"], 10, LEASE, now=T0)
        assert first.id in {c.id for c in got}
        assert first.id in {r.job_id for r in storage.reap(now=T0 + LEASE)}
        assert job_of(storage, first.id).state is JobState.DEAD
        late = new_job(**skipping(slots[0]))
        storage.enqueue([late], now=T0 + LEASE + SEC)
        assert job_of(storage, late.id).state is JobState.QUEUED

    def test_a_cancelled_waiting_job_does_not_hold_back_the_next(self, storage: Storage) -> None:
        ids = [enqueue_one(storage, **limited()) for _ in range(3)]
        first = claim_one(storage, now=T0)
        assert first.id == ids[0]
        storage.finish([complete_end(first.ref)], now=T0 + SEC)
        assert storage.cancel(ids[1], now=T0 + 2 * SEC) is JobState.CANCELLED
        assert claim_one(storage, now=T0 + 3 * SEC).id == ids[2]

    def test_an_expired_waiting_job_does_not_hold_back_the_next(self, storage: Storage) -> None:
        first_id = enqueue_one(storage, **limited())
        expiring = enqueue_one(storage, **limited(schedule_to_start_ms=10 * SEC))
        last = enqueue_one(storage, **limited())
        first = claim_one(storage, now=T0)
        assert first.id == first_id
        storage.finish([complete_end(first.ref)], now=T0 + SEC)
        assert [r.job_id for r in storage.reap(now=T0 + 10 * SEC)] == [expiring]
        assert claim_one(storage, now=T0 + 10 * SEC).id == last

    def test_keys_are_independent(self, storage: Storage) -> None:
        a = enqueue_one(storage, **limited("a"))
        enqueue_one(storage, **limited("a"))
        b = enqueue_one(storage, **limited("b"))
        got = storage.claim("w", ["default"], 10, LEASE, now=T0)
        assert [c.id for c in got] == [a, b]

    def test_limit_counts_running_jobs_across_queues(self, storage: Storage) -> None:
        a = enqueue_one(storage, queue="qa", **limited("shared"))
        enqueue_one(storage, queue="qb", **limited("shared"))
        assert claim_one(storage, now=T0, queues=["qa"]).id == a
        assert storage.claim("w", ["qb"], 5, LEASE, now=T0) == []

    def test_skip_limit_stores_the_extra_job_skipped(self, storage: Storage) -> None:
        first = new_job(**skipping(limit=1))
        second = new_job(**skipping(limit=1))
        assert storage.enqueue([first], now=T0) == [JobState.QUEUED]
        assert storage.enqueue([second], now=T0 + SEC) == [JobState.SKIPPED]
        rec = job_of(storage, second.id)
        assert (rec.state, rec.reason) == (JobState.SKIPPED, Reason.CONCURRENCY_LIMIT.value)
        assert (rec.attempts, rec.finished_at) == (0, T0 + SEC), "skipped: finished at enqueue"
        assert claim_one(storage, now=T0 + 2 * SEC).id == first.id
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 2 * SEC) == []

    def test_skip_limit_counts_running_jobs(self, storage: Storage) -> None:
        enqueue_one(storage, **skipping(limit=1))
        claim_one(storage, now=T0)
        assert storage.enqueue([new_job(**skipping(limit=1))], now=T0 + SEC) == [JobState.SKIPPED]

    def test_skip_limit_within_one_batch(self, storage: Storage) -> None:
        jobs = [new_job(**skipping(limit=2)) for _ in range(4)]
        assert storage.enqueue(jobs, now=T0) == [
            JobState.QUEUED,
            JobState.QUEUED,
            JobState.SKIPPED,
            JobState.SKIPPED,
        ]

    def test_skip_slot_frees_when_the_job_finishes(self, storage: Storage) -> None:
        enqueue_one(storage, **skipping(limit=1))
        got = claim_one(storage, now=T0)
        storage.finish([complete_end(got.ref)], now=T0 + SEC)
        assert storage.enqueue([new_job(**skipping(limit=1))], now=T0 + 2 * SEC) == [
            JobState.QUEUED
        ]

    def test_skip_slot_frees_when_a_queued_job_is_cancelled(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, **skipping(limit=1))
        storage.cancel(job_id, now=T0 + SEC)
        assert storage.enqueue([new_job(**skipping(limit=1))], now=T0 + 2 * SEC) == [
            JobState.QUEUED
        ]

    def test_skipped_jobs_do_not_count_against_the_limit(self, storage: Storage) -> None:
        jobs = [new_job(**skipping(limit=1)) for _ in range(3)]
        assert storage.enqueue(jobs, now=T0) == [
            JobState.QUEUED,
            JobState.SKIPPED,
            JobState.SKIPPED,
        ]
        storage.cancel(jobs[0].id, now=T0 + SEC)
        assert storage.enqueue([new_job(**skipping(limit=1))], now=T0 + 2 * SEC) == [
            JobState.QUEUED
        ]
