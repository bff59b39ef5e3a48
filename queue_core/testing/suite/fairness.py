"""Contract: ``round_robin`` claims (``SupportsRoundRobin``) and the claim-time and
enqueue-time behaviours ``cancel_in_progress`` / ``latest`` (``SupportsSupersede``),
SPEC §13. Each test skips, naming the ability, on a storage without it."""

from __future__ import annotations

from typing import Any

import pytest

from queue_core.records.jobs import ClaimedJob, Enqueued, JobState, NewJob, Outcome
from queue_core.storage.abilities import SupportsRoundRobin, SupportsSupersede
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    LEASE,
    SEC,
    T0,
    claim_one,
    complete_end,
    new_id,
    new_job,
    run_concurrently,
)
from queue_core.testing.suite._base import ContractBase, job_of, lacks, race_says

__all__ = ["RoundRobinContract", "SupersedeContract"]


def _rr(storage: Storage) -> SupportsRoundRobin:
    if not isinstance(storage, SupportsRoundRobin):
        pytest.skip(lacks(SupportsRoundRobin))
    return storage


def _sup(storage: Storage) -> SupportsSupersede:
    if not isinstance(storage, SupportsSupersede):
        pytest.skip(lacks(SupportsSupersede))
    return storage


def _keys(claimed: list[ClaimedJob], key_of: dict[str, str]) -> list[str]:
    return [key_of[c.id] for c in claimed]


class RoundRobinContract(ContractBase):
    """Claims rotate over a group's keys, the oldest job of each key in turn."""

    @pytest.fixture(autouse=True)
    def _fresh_rr_group(self) -> None:
        self.group = f"tests.fair.{new_id()}"
        self.sup_key_of: dict[str, str] = {}

    def _rr_jobs(self, key: str, n: int, limit: int | None = 100, **fields: Any) -> list[NewJob]:
        jobs = [
            new_job(
                concurrency_key=f"{self.group}:{key}",
                concurrency_limit=limit,
                concurrency_behavior="round_robin",
                concurrency_group=self.group,
                **fields,
            )
            for _ in range(n)
        ]
        self.sup_key_of.update((j.id, key) for j in jobs)
        return jobs

    def _rr_claim(self, storage: Storage, n: int, now: int) -> list[str]:
        return _keys(storage.claim("w", ["default"], n, LEASE, now=now), self.sup_key_of)

    def test_claims_rotate_over_keys_oldest_job_of_each_key_first(self, storage: Storage) -> None:
        _rr(storage)
        a, b, c = self._rr_jobs("a", 3), self._rr_jobs("b", 3), self._rr_jobs("c", 3)
        storage.enqueue(a, now=T0)
        storage.enqueue(b, now=T0 + 1)
        storage.enqueue(c, now=T0 + 2)
        got = [self._rr_claim(storage, 1, T0 + SEC + i) for i in range(9)]
        assert got == [["a"], ["b"], ["c"]] * 3, (
            f"one claim at a time must serve the keys in turn (a, b, c, a, b, c, ...): got {got}"
        )
        taken = [c.id for c in storage.claim("w", ["default"], 9, LEASE, now=T0 + 2 * SEC)]
        assert taken == []

    def test_a_new_key_is_served_within_one_round_of_a_backlog(self, storage: Storage) -> None:
        _rr(storage)
        storage.enqueue(self._rr_jobs("a", 1000, limit=None), now=T0)
        assert self._rr_claim(storage, 3, T0 + SEC) == ["a", "a", "a"]
        late = self._rr_jobs("b", 1, limit=None)
        storage.enqueue(late, now=T0 + 2 * SEC)
        got = storage.claim("w", ["default"], 1, LEASE, now=T0 + 3 * SEC)
        assert [c.id for c in got] == [late[0].id], (
            "key b's one job, enqueued after 1,000 jobs of key a, must be claimed by the "
            f"next claim (one round): got keys {_keys(got, self.sup_key_of)}"
        )

    def test_one_claim_of_many_serves_each_key_once_per_round(self, storage: Storage) -> None:
        _rr(storage)
        a, b = self._rr_jobs("a", 4), self._rr_jobs("b", 2)
        storage.enqueue([*a, *b], now=T0)
        claimed = storage.claim("w", ["default"], 6, LEASE, now=T0 + SEC)
        assert _keys(claimed, self.sup_key_of) == ["a", "b", "a", "b", "a", "a"]
        assert [c.id for c in claimed if self.sup_key_of[c.id] == "a"] == [j.id for j in a]

    def test_a_key_at_its_limit_is_passed_over(self, storage: Storage) -> None:
        _rr(storage)
        storage.enqueue([*self._rr_jobs("a", 3, limit=1), *self._rr_jobs("b", 3, limit=1)], now=T0)
        first = storage.claim("w", ["default"], 5, LEASE, now=T0 + SEC)
        assert _keys(first, self.sup_key_of) == ["a", "b"], "each key runs at most its limit"
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + SEC + 1) == []
        a_job = next(c for c in first if self.sup_key_of[c.id] == "a")
        assert storage.finish([complete_end(a_job.ref)], now=T0 + 2 * SEC) == [True]
        assert self._rr_claim(storage, 5, T0 + 3 * SEC) == ["a"]

    def test_round_robin_keys_lists_the_next_turns(self, storage: Storage) -> None:
        rr = _rr(storage)
        storage.enqueue(self._rr_jobs("a", 2), now=T0)
        storage.enqueue(self._rr_jobs("b", 2), now=T0 + 1)
        storage.enqueue(self._rr_jobs("c", 1, limit=1, delay_ms=10 * SEC), now=T0 + 2)

        def turns(now: int) -> list[str]:
            keys = rr.round_robin_keys(self.group, now=now)
            return [k.removeprefix(f"{self.group}:") for k in keys]

        assert turns(T0 + SEC) == ["a", "b"]
        assert self._rr_claim(storage, 1, T0 + SEC) == ["a"]
        assert turns(T0 + SEC) == ["b", "a"]
        assert turns(T0 + 11 * SEC) == ["b", "c", "a"]
        assert rr.round_robin_keys("tests.no-such-group", now=T0 + SEC) == []

    def test_concurrent_claims_hold_each_key_limit(self, storage: Storage) -> None:
        _rr(storage)
        jobs = [j for k in "abcd" for j in self._rr_jobs(k, 5, limit=2)]
        storage.enqueue(jobs, now=T0)
        n = self.race_threads
        results = run_concurrently(
            n, lambda i: storage.claim(f"w{i}", ["default"], 3, LEASE, now=T0 + SEC)
        )
        claimed = [c for r in results if isinstance(r, list) for c in r]
        assert all(isinstance(r, list) for r in results), results
        ids = [c.id for c in claimed]
        assert len(ids) == len(set(ids)), race_says("claim of round_robin jobs", n, ids)
        per_key = {k: _keys(claimed, self.sup_key_of).count(k) for k in "abcd"}
        assert per_key == {k: 2 for k in "abcd"}, (
            f"{n} claimers at once: each key must run exactly its limit of 2, got {per_key}"
        )


class SupersedeContract(ContractBase):
    """``cancel_in_progress`` cancels the oldest active job; ``latest`` keeps one queued."""

    @pytest.fixture(autouse=True)
    def _fresh_sup_key(self) -> None:
        self.sup_key = f"tests.sup:{new_id()}"

    def _sup_job(self, behavior: str, limit: int = 1, **fields: Any) -> NewJob:
        return new_job(
            concurrency_key=self.sup_key,
            concurrency_limit=limit,
            concurrency_behavior=behavior,
            **fields,
        )

    def _sup_one(self, storage: Storage, job: NewJob, now: int) -> Enqueued:
        (got,) = _sup(storage).enqueue_superseding([job], now=now)
        return got

    def test_cancel_in_progress_cancels_the_running_job_and_takes_its_place(
        self, storage: Storage
    ) -> None:
        old, new = self._sup_job("cancel_in_progress"), self._sup_job("cancel_in_progress")
        assert self._sup_one(storage, old, T0) == Enqueued(old.id, JobState.QUEUED)
        running = claim_one(storage, now=T0 + SEC)
        got = self._sup_one(storage, new, T0 + 2 * SEC)
        assert got == Enqueued(new.id, JobState.QUEUED, superseded=(old.id,))
        record = job_of(storage, old.id)
        assert (record.state, record.reason, record.finished_at) == (
            JobState.CANCELLED,
            "superseded",
            T0 + 2 * SEC,
        )
        (attempt,) = storage.list_attempts(old.id)
        assert (attempt.outcome, attempt.reason) == (Outcome.CANCELLED, "superseded")
        assert storage.finish([complete_end(running.ref)], now=T0 + 3 * SEC) == [False]
        assert storage.renew([running.ref], LEASE, now=T0 + 3 * SEC).lost == [running.ref]
        assert claim_one(storage, now=T0 + 3 * SEC).id == new.id

    def test_cancel_in_progress_cancels_a_queued_job_too(self, storage: Storage) -> None:
        jobs = [self._sup_job("cancel_in_progress", limit=2) for _ in range(4)]
        got = [self._sup_one(storage, j, T0 + i) for i, j in enumerate(jobs)]
        assert [g.superseded for g in got] == [(), (), (jobs[0].id,), (jobs[1].id,)]
        states = [job_of(storage, j.id).state for j in jobs]
        assert states == [JobState.CANCELLED] * 2 + [JobState.QUEUED] * 2
        assert job_of(storage, jobs[0].id).reason == "superseded"
        assert storage.list_attempts(jobs[0].id) == []

    def test_cancel_in_progress_racing_the_finish_of_the_running_job(
        self, storage: Storage
    ) -> None:
        _sup(storage)
        old, new = self._sup_job("cancel_in_progress"), self._sup_job("cancel_in_progress")
        self._sup_one(storage, old, T0)
        running = claim_one(storage, now=T0 + SEC)
        results = run_concurrently(
            2,
            lambda i: (
                storage.finish([complete_end(running.ref)], now=T0 + 2 * SEC)
                if i == 0
                else self._sup_one(storage, new, T0 + 2 * SEC)
            ),
        )
        took, enqueued = results
        assert isinstance(took, list) and isinstance(enqueued, Enqueued), results
        state = job_of(storage, old.id).state
        if took == [True]:  # the finish came first: nothing left to supersede
            assert state is JobState.SUCCEEDED and enqueued.superseded == (), results
        else:
            assert took == [False] and enqueued.superseded == (old.id,), results
            assert state is JobState.CANCELLED
        assert job_of(storage, new.id).state is JobState.QUEUED

    def test_concurrent_enqueues_never_exceed_the_limit(self, storage: Storage) -> None:
        _sup(storage)
        n = self.race_threads
        jobs = [self._sup_job("cancel_in_progress", limit=2) for _ in range(n)]
        results = run_concurrently(n, lambda i: self._sup_one(storage, jobs[i], T0))
        assert all(isinstance(r, Enqueued) for r in results), results
        active = [j.id for j in jobs if job_of(storage, j.id).state is JobState.QUEUED]
        assert len(active) == 2, race_says(
            f"{n} enqueue_superseding of one cancel_in_progress key (limit 2): 2 stay", n, active
        )
        ended = sorted(i for r in results if isinstance(r, Enqueued) for i in r.superseded)
        assert ended == sorted(set(j.id for j in jobs) - set(active))

    def test_latest_replaces_the_queued_job_and_keeps_the_running_ones(
        self, storage: Storage
    ) -> None:
        first, second, third = (self._sup_job("latest") for _ in range(3))
        self._sup_one(storage, first, T0)
        running = claim_one(storage, now=T0 + SEC)
        assert self._sup_one(storage, second, T0 + 2 * SEC).superseded == ()
        assert self._sup_one(storage, third, T0 + 3 * SEC).superseded == (second.id,)
        record = job_of(storage, second.id)
        assert (record.state, record.reason) == (JobState.SKIPPED, "superseded")
        assert job_of(storage, first.id).state is JobState.RUNNING
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 4 * SEC) == [], (
            "latest: at most `limit` (1) running per key"
        )
        assert storage.finish([complete_end(running.ref)], now=T0 + 5 * SEC) == [True]
        assert claim_one(storage, now=T0 + 6 * SEC).id == third.id

    def test_plain_enqueue_supersedes_too(self, storage: Storage) -> None:
        _sup(storage)
        old, new = self._sup_job("latest"), self._sup_job("latest")
        storage.enqueue([old], now=T0)
        assert storage.enqueue([new], now=T0 + SEC) == [JobState.QUEUED]
        assert job_of(storage, old.id).state is JobState.SKIPPED

    def test_a_batch_counts_its_earlier_jobs(self, storage: Storage) -> None:
        a, b, c = (self._sup_job("cancel_in_progress") for _ in range(3))
        got = _sup(storage).enqueue_superseding([a, b, c], now=T0)
        assert [g.superseded for g in got] == [(), (a.id,), (b.id,)]
        assert [job_of(storage, j.id).state for j in (a, b, c)] == [
            JobState.CANCELLED,
            JobState.CANCELLED,
            JobState.QUEUED,
        ]
