"""Contract: atomicity under contention -- N threads behind a barrier, one winner.

Every test calls the same storage object from ``race_threads`` threads released
together by a :class:`threading.Barrier`, with explicit ``now`` times, and asserts that
exactly one caller won.
"""

from __future__ import annotations

from queue_core.records.errors import NotFound
from queue_core.records.jobs import (
    ClaimedJob,
    JobState,
    LeaseRef,
    RenewResult,
)
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    LEASE,
    SEC,
    T0,
    claim_one,
    complete_end,
    dead_end,
    enqueue_one,
    new_job,
    run_concurrently,
)
from queue_core.testing.suite._base import ContractBase, job_of, race_says


def _no_errors(results: list[object]) -> None:
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, f"concurrent calls raised: {errors!r}"


class RaceContract(ContractBase):
    """Claim, reap, finish, retry_dead and concurrency slots under contention."""

    def test_one_job_is_claimed_by_exactly_one_caller(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        n = self.race_threads
        results = run_concurrently(
            n, lambda i: storage.claim(f"w{i}", ["default"], 1, LEASE, now=T0 + SEC)
        )
        _no_errors(list(results))
        winners = [r for r in results if isinstance(r, list) and r]
        assert len(winners) == 1, race_says("claim of one ready job", n, winners)
        assert [c.id for c in winners[0]] == [job_id]
        assert job_of(storage, job_id).attempts == 1
        assert len(storage.list_attempts(job_id)) == 1

    def test_many_jobs_are_each_claimed_once(self, storage: Storage) -> None:
        n = self.race_threads
        ids = {enqueue_one(storage) for _ in range(3 * n)}
        results = run_concurrently(
            n, lambda i: storage.claim(f"w{i}", ["default"], 2, LEASE, now=T0 + SEC)
        )
        _no_errors(list(results))
        claimed = [c.id for r in results if isinstance(r, list) for c in r]
        assert len(claimed) == len(set(claimed)) == 2 * n, (
            f"{n} concurrent claims of 2 each, from {3 * n} ready jobs, must hand out "
            f"{2 * n} distinct jobs (each job to exactly one caller); got {len(claimed)} "
            f"claims of {len(set(claimed))} distinct jobs: {sorted(claimed)}"
        )
        assert set(claimed) <= ids

    def test_a_stale_attempt_is_reaped_by_exactly_one_reaper(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=2, lost_delay_ms=60 * SEC)
        claim_one(storage, now=T0)
        results = run_concurrently(self.race_threads, lambda i: storage.reap(now=T0 + LEASE))
        _no_errors(list(results))
        reaped = [job.job_id for r in results if isinstance(r, list) for job in r]
        assert reaped == [job_id], race_says(
            f"reap of one stale attempt (job {job_id})", self.race_threads, reaped
        )
        assert len(storage.list_attempts(job_id)) == 1
        assert job_of(storage, job_id).state is JobState.QUEUED

    def test_exhausted_attempt_dead_letters_once_under_concurrent_reaps(
        self, storage: Storage
    ) -> None:
        job_id = enqueue_one(storage, max_attempts=1)
        claim_one(storage, now=T0)
        results = run_concurrently(self.race_threads, lambda i: storage.reap(now=T0 + LEASE))
        _no_errors(list(results))
        reaped = [r for r in results if isinstance(r, list) and r]
        assert sum(len(r) for r in reaped) == 1, race_says(
            "reap of an attempt with no attempt left", self.race_threads, reaped
        )
        dead = [e.job_id for e in storage.list_dead()]
        assert dead == [job_id], f"exactly one dead-letter entry for job {job_id}; got {dead}"

    def test_retry_dead_races_yield_one_new_job(self, storage: Storage) -> None:
        enqueue_one(storage)
        got = claim_one(storage, now=T0)
        storage.finish([dead_end(got.ref)], now=T0)
        dead_id = job_of(storage, got.id).dead_id
        assert dead_id is not None
        results = run_concurrently(
            self.race_threads, lambda i: storage.retry_dead(dead_id, now=T0 + SEC)
        )
        new_ids = [r for r in results if isinstance(r, str)]
        not_found = [r for r in results if isinstance(r, NotFound)]
        assert len(new_ids) == 1, race_says("retry_dead of one entry", self.race_threads, results)
        assert len(not_found) == self.race_threads - 1, (
            f"every other retry_dead of the entry raises NotFound; got {results!r}"
        )
        assert job_of(storage, new_ids[0]).replay_of == dead_id
        assert storage.count_pending(["default"], 0, now=T0 + SEC) == 1

    def test_concurrency_limit_of_one_holds_under_concurrent_claims(self, storage: Storage) -> None:
        n = self.race_threads
        for _ in range(n):
            enqueue_one(storage, concurrency_key="one", concurrency_limit=1)
        results = run_concurrently(
            n, lambda i: storage.claim(f"w{i}", ["default"], 2, LEASE, now=T0 + SEC)
        )
        _no_errors(list(results))
        claimed = [c.id for r in results if isinstance(r, list) for c in r]
        assert len(claimed) == 1, race_says(
            f"claim of {n} jobs sharing a concurrency key with limit 1", n, claimed
        )
        assert storage.stats(now=T0 + SEC)[0].running == 1

    def test_skip_limit_holds_under_concurrent_enqueues(self, storage: Storage) -> None:
        n = self.race_threads
        jobs = [
            new_job(concurrency_key="solo", concurrency_limit=1, concurrency_skip=True)
            for _ in range(n)
        ]
        results = run_concurrently(n, lambda i: storage.enqueue([jobs[i]], now=T0))
        _no_errors(list(results))
        states = [s for r in results if isinstance(r, list) for s in r]
        assert sorted(states) == sorted([JobState.QUEUED] + [JobState.SKIPPED] * (n - 1)), (
            race_says(f"enqueue of {n} skip jobs sharing a key with limit 1", n, states)
            + "; the others are stored skipped"
        )
        stored = [job_of(storage, j.id).state for j in jobs]
        assert stored.count(JobState.QUEUED) == 1

    def test_concurrent_finishes_of_one_attempt_take_once(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0)
        results = run_concurrently(
            self.race_threads,
            lambda i: storage.finish([complete_end(got.ref, str(i).encode())], now=T0 + SEC),
        )
        _no_errors(list(results))
        took = [r == [True] for r in results]
        assert took.count(True) == 1, race_says("finish of one attempt", self.race_threads, results)
        winner = took.index(True)
        assert job_of(storage, job_id).result == str(winner).encode()

    def test_finish_racing_reap_records_the_attempt_once(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=2, lost_delay_ms=60 * SEC)
        got = claim_one(storage, now=T0)
        n = self.race_threads

        def act(i: int) -> object:
            if i % 2:
                return storage.finish([complete_end(got.ref)], now=T0 + LEASE)
            return storage.reap(now=T0 + LEASE)

        results = run_concurrently(n, act)
        _no_errors(list(results))
        finished = sum(1 for i in range(1, n, 2) if results[i] == [True])
        reaped = sum(len(r) for r in results[0::2] if isinstance(r, list))
        assert finished + reaped == 1, race_says(
            "finish and reap of one expired attempt (half the threads each)",
            n,
            f"{finished} finish(es) took, {reaped} reap(s) reported it",
        )
        attempts = storage.list_attempts(job_id)
        assert len(attempts) == 1 and attempts[0].outcome is not None
        expected = JobState.SUCCEEDED if finished else JobState.QUEUED
        assert job_of(storage, job_id).state is expected

    def test_renew_racing_reap_either_renews_or_is_lost(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=2, lost_delay_ms=60 * SEC)
        got: ClaimedJob = claim_one(storage, now=T0)
        ref: LeaseRef = got.ref

        def act(i: int) -> object:
            if i % 2:
                return storage.renew([ref], LEASE, now=T0 + LEASE)
            return storage.reap(now=T0 + LEASE)

        results = run_concurrently(self.race_threads, act)
        _no_errors(list(results))
        reaps = [r for r in results if isinstance(r, list)]
        renews = [r for r in results if isinstance(r, RenewResult)]
        reaped = sum(len(r) for r in reaps)
        assert reaped in (0, 1), race_says(
            "renew and reap of one expired attempt", self.race_threads, reaps
        )
        state = job_of(storage, job_id).state
        if reaped:
            assert state is JobState.QUEUED
        else:
            assert state is JobState.RUNNING
            assert all(r.lost == [] for r in renews), (
                f"no reap took the attempt, so every renewal must keep it; got {renews!r}"
            )
