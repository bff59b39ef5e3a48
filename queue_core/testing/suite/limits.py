"""Contract: unique jobs (``SupportsUniqueJobs``) and rate limits (``SupportsRateLimits``,
counted by body start: SPEC §11, §13). Each test skips, naming the ability, on a storage
without it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from queue_core.records.jobs import (
    AttemptEnd,
    ClaimedJob,
    Enqueued,
    JobState,
    LeaseRef,
    NewJob,
)
from queue_core.rules.limits import RATE_START_MS, rate_grant
from queue_core.storage.abilities import SupportsRateLimits, SupportsUniqueJobs
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    LEASE,
    MIN,
    SEC,
    T0,
    cancel_end,
    claim_one,
    complete_end,
    dead_end,
    enqueue_one,
    new_id,
    new_job,
    run_concurrently,
)
from queue_core.testing.suite._base import ContractBase, job_of, lacks, race_says

__all__ = ["RateLimitContract", "UniqueContract"]


def _unique(storage: Storage) -> SupportsUniqueJobs:
    if not isinstance(storage, SupportsUniqueJobs):
        pytest.skip(lacks(SupportsUniqueJobs))
    return storage


def _rated(storage: Storage) -> SupportsRateLimits:
    if not isinstance(storage, SupportsRateLimits):
        pytest.skip(lacks(SupportsRateLimits))
    return storage


def _one(storage: SupportsUniqueJobs, job: NewJob, now: int) -> Enqueued:
    (got,) = storage.enqueue_unique([job], now=now)
    return got


class UniqueContract(ContractBase):
    """One job per unique key while it is active or within its ``unique_for``."""

    @pytest.fixture(autouse=True)
    def _fresh_unique_key(self) -> None:
        # a fresh key per test: a storage shared between tests may keep key state
        self.unique_key = f"tests.task:{new_id()}"

    def _keyed(self, key: str | None = None, **fields: Any) -> NewJob:
        return new_job(unique_key=key or self.unique_key, **fields)

    def test_concurrent_enqueues_with_one_key_store_one_job(self, storage: Storage) -> None:
        uniq = _unique(storage)
        jobs = [self._keyed() for _ in range(self.race_threads)]
        results = run_concurrently(self.race_threads, lambda i: _one(uniq, jobs[i], T0 + i))
        errors = [r for r in results if isinstance(r, BaseException)]
        assert not errors, errors
        got = [r for r in results if isinstance(r, Enqueued)]
        n = self.race_threads
        assert len({e.job_id for e in got}) == 1, race_says(
            f"enqueue_unique of {n} jobs with one unique key: all must name one holder", n, got
        )
        assert sum(not e.existing for e in got) == 1, race_says(
            "enqueue_unique of jobs with one key: one is stored", n, got
        )
        winner = got[0].job_id
        stored = [j.id for j in jobs if storage.get_job(j.id) is not None]
        assert stored == [winner]
        assert len(storage.claim("w", ["default"], 20, LEASE, now=T0 + SEC)) == 1

    def test_a_duplicate_returns_the_holder_and_stores_nothing(self, storage: Storage) -> None:
        uniq = _unique(storage)
        first, second = self._keyed(), self._keyed()
        other = self._keyed(self.unique_key + ":other", queue="elsewhere")
        assert _one(uniq, first, T0) == Enqueued(first.id, JobState.QUEUED, existing=False)
        assert _one(uniq, second, T0 + SEC) == Enqueued(first.id, JobState.QUEUED, existing=True)
        assert storage.get_job(second.id) is None
        assert _one(uniq, other, T0 + SEC).existing is False
        assert claim_one(storage, now=T0 + 2 * SEC).id == first.id
        again = _one(uniq, self._keyed(), T0 + 3 * SEC)
        assert again.existing and again.state is JobState.RUNNING

    def test_a_batch_holds_its_own_keys(self, storage: Storage) -> None:
        uniq = _unique(storage)
        a, b, plain = self._keyed(), self._keyed(), new_job()
        got = uniq.enqueue_unique([a, plain, b], now=T0)
        assert [(e.job_id, e.existing) for e in got] == [
            (a.id, False),
            (plain.id, False),
            (a.id, True),
        ]
        assert storage.get_job(b.id) is None

    def test_a_scheduled_job_holds_its_key(self, storage: Storage) -> None:
        uniq = _unique(storage)
        first = self._keyed(delay_ms=MIN)
        _one(uniq, first, T0)
        assert _one(uniq, self._keyed(), T0 + SEC).job_id == first.id

    @pytest.mark.parametrize("end", ["succeeded", "dead", "cancelled"])
    def test_after_the_holder_ends_a_new_job_is_made(self, storage: Storage, end: str) -> None:
        uniq = _unique(storage)
        first = self._keyed()
        _one(uniq, first, T0)
        claimed = claim_one(storage, now=T0 + SEC)
        ending: dict[str, Callable[[LeaseRef], AttemptEnd]] = {
            "succeeded": complete_end,
            "dead": dead_end,
            "cancelled": cancel_end,
        }
        assert storage.finish([ending[end](claimed.ref)], now=T0 + 2 * SEC) == [True]
        assert job_of(storage, first.id).state.value == end
        later = self._keyed()
        assert _one(uniq, later, T0 + 3 * SEC) == Enqueued(later.id, JobState.QUEUED)

    def test_a_cancelled_queued_holder_frees_its_key(self, storage: Storage) -> None:
        uniq = _unique(storage)
        first = self._keyed()
        _one(uniq, first, T0)
        storage.cancel(first.id, now=T0 + SEC)
        assert _one(uniq, self._keyed(), T0 + 2 * SEC).existing is False

    def test_unique_for_holds_the_key_after_the_end_until_the_window_passes(
        self, storage: Storage
    ) -> None:
        uniq = _unique(storage)
        first = self._keyed(unique_for_ms=MIN)
        _one(uniq, first, T0)
        claimed = claim_one(storage, now=T0 + SEC)
        storage.finish([complete_end(claimed.ref)], now=T0 + 2 * SEC)
        inside = _one(uniq, self._keyed(unique_for_ms=MIN), T0 + MIN - 1)
        assert inside == Enqueued(first.id, JobState.SUCCEEDED, existing=True)
        after = self._keyed(unique_for_ms=MIN)
        assert _one(uniq, after, T0 + MIN) == Enqueued(after.id, JobState.QUEUED)

    def test_a_reaped_job_requeued_keeps_its_key(self, storage: Storage) -> None:
        uniq = _unique(storage)
        first = self._keyed(max_attempts=3)
        _one(uniq, first, T0)
        claim_one(storage, now=T0 + SEC, lease_ms=LEASE)  # its worker is then killed
        reaped = storage.reap(now=T0 + SEC + LEASE + SEC)
        assert [r.job_id for r in reaped] == [first.id]
        assert job_of(storage, first.id).state is JobState.QUEUED
        assert _one(uniq, self._keyed(), T0 + 2 * LEASE).job_id == first.id

    def test_plain_enqueue_honours_the_key_too(self, storage: Storage) -> None:
        _unique(storage)
        first, dup = self._keyed(), self._keyed()
        assert storage.enqueue([first], now=T0) == [JobState.QUEUED]
        storage.enqueue([dup], now=T0 + SEC)
        assert storage.get_job(dup.id) is None


def _claimer(storage: Storage, now: int) -> Callable[[int], list[ClaimedJob]]:
    return lambda i: storage.claim(f"w{i}", ["default"], 4, LEASE, now=now)


class RateLimitContract(ContractBase):
    """Claims of a rate key never exceed its limit in any window; jobs wait queued."""

    @pytest.fixture(autouse=True)
    def _fresh_rate_key(self) -> None:
        # a fresh key per test: a storage shared between tests may keep key state
        self.rate_key = f"tests.rated.{new_id()}"

    def _rate_job(self, limit: int = 10, window_ms: int = SEC, **fields: Any) -> NewJob:
        return new_job(rate_key=self.rate_key, rate_limit=limit, rate_window_ms=window_ms, **fields)

    def test_claims_never_exceed_the_rate_across_claimers(self, storage: Storage) -> None:
        _rated(storage)
        storage.enqueue([self._rate_job() for _ in range(30)], now=T0)
        claims: list[tuple[int, int]] = []  # (claim time, start_by): the body starts between
        t = T0
        while len(claims) < 30 and t < T0 + 20 * SEC:
            got = run_concurrently(3, _claimer(storage, t))
            for batch in got:
                assert isinstance(batch, list), batch
                claims.extend((t, c.start_by) for c in batch if c.start_by is not None)
                assert all(c.start_by == t + RATE_START_MS for c in batch), batch
            t += 150
        assert len(claims) == 30, "every job is claimed eventually, with its start_by"
        for x, _ in claims:  # bodies may start anywhere in [claim, start_by]: at worst ...
            could = [c for c in claims if c[0] <= x and c[1] > x - SEC]
            assert len(could) <= 10, (
                f"rate limit 10 per second by body start, claimed by 3 threads at once: "
                f"{len(could)} bodies could start in the second ending at {x}; every "
                f"(claim, start_by): {sorted(claims)}"
            )
        assert max(c for c, _ in claims) >= T0 + 2 * SEC  # 30 jobs at 10/s: 3 windows

    def test_a_claim_counts_until_its_body_may_start(self, storage: Storage) -> None:
        rated = _rated(storage)
        storage.enqueue([self._rate_job(limit=1) for _ in range(2)], now=T0)
        first = claim_one(storage, now=T0)
        assert first.start_by == T0 + RATE_START_MS
        assert rated.rate_usage(self.rate_key, SEC, now=T0 + SEC) == 1, (
            "the body may start as late as start_by: the window ending a second after the "
            "claim still counts it"
        )
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + SEC) == []
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + SEC + RATE_START_MS - 1) == []
        second = claim_one(storage, now=T0 + SEC + RATE_START_MS)
        assert second.start_by == T0 + SEC + 2 * RATE_START_MS
        plain = enqueue_one(storage, now=T0)
        assert claim_one(storage, now=T0 + 2 * SEC).id == plain
        assert job_of(storage, plain).state is JobState.RUNNING

    def test_over_the_rate_jobs_stay_queued_and_plain_jobs_are_not_held(
        self, storage: Storage
    ) -> None:
        rated = _rated(storage)
        limited = [self._rate_job(limit=2, priority=5) for _ in range(4)]
        plain = [new_job() for _ in range(3)]
        storage.enqueue([*limited, *plain], now=T0)
        got = storage.claim("w", ["default"], 10, LEASE, now=T0 + SEC)
        assert len(got) == 5
        assert sum(c.id in {j.id for j in limited} for c in got) == 2
        assert rated.rate_usage(self.rate_key, SEC, now=T0 + SEC) == 2
        left = [j.id for j in limited if job_of(storage, j.id).state is JobState.QUEUED]
        assert len(left) == 2
        free = T0 + 2 * SEC + RATE_START_MS  # the first claims' bodies may start until +100
        assert storage.claim("w", ["default"], 10, LEASE, now=free - 1) == []
        assert {c.id for c in storage.claim("w", ["default"], 10, LEASE, now=free)} == set(left)

    def test_the_rule_is_the_sliding_window(self, storage: Storage) -> None:
        rated = _rated(storage)
        storage.enqueue([self._rate_job(limit=3, window_ms=MIN) for _ in range(6)], now=T0)
        stamps: list[int] = []
        for now in (T0, T0 + 10 * SEC, T0 + 30 * SEC, T0 + 61 * SEC, T0 + 71 * SEC):
            n = len(storage.claim("w", ["default"], 2, LEASE, now=now))
            granted, stamps = rate_grant(stamps, now, 3, MIN, 2)
            assert n == granted, now
        assert rated.rate_usage(self.rate_key, MIN, now=T0 + 71 * SEC) == len(
            [s for s in stamps if s > T0 + 11 * SEC]
        )

    def test_a_replayed_dead_job_keeps_its_rate_limit(self, storage: Storage) -> None:
        _rated(storage)
        first = self._rate_job(limit=1, window_ms=MIN)
        storage.enqueue([first], now=T0)
        claimed = claim_one(storage, now=T0)
        assert storage.finish([dead_end(claimed.ref)], now=T0 + SEC) == [True]
        (entry,) = storage.list_dead(task_name=first.task_name)
        replay = storage.retry_dead(entry.id, now=T0 + SEC)
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 2 * SEC) == []
        later = T0 + MIN + RATE_START_MS
        assert [c.id for c in storage.claim("w", ["default"], 5, LEASE, now=later)] == [replay]
