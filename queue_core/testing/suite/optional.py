"""Contract: optional abilities.

:class:`OptionalAbilitiesContract` (part of ``StorageContract``) skips a test with the
ability's name when the storage lacks it. :class:`WaitClaimContract` is opt-in: a test
module adds it beside ``StorageContract`` for a storage that has ``SupportsWaitClaim``,
so backends without the ability collect no skipped tests.
"""

from __future__ import annotations

import threading
import time

import pytest

from queue_core.model import ClaimedJob, JobState
from queue_core.storage import Storage, SupportsJobScan, SupportsWaitClaim, SupportsWakeup
from queue_core.testing.fixtures import T0, claim_one, enqueue_one, new_job
from queue_core.testing.suite._base import ContractBase


class OptionalAbilitiesContract(ContractBase):
    """``SupportsJobScan`` and ``SupportsWakeup``."""

    def test_list_jobs_pages_newest_first_with_filters(self, storage: Storage) -> None:
        if not isinstance(storage, SupportsJobScan):
            pytest.skip("storage lacks SupportsJobScan")
        a = enqueue_one(storage, queue="a", now=T0)
        b = enqueue_one(storage, queue="b", now=T0 + 1)
        c = enqueue_one(storage, queue="a", now=T0 + 2)
        claim_one(storage, now=T0 + 3, queues=["b"])
        assert [j.id for j in storage.list_jobs()] == [c, b, a]
        assert [j.id for j in storage.list_jobs(queue="a")] == [c, a]
        assert [j.id for j in storage.list_jobs(state=JobState.RUNNING)] == [b]
        assert [j.id for j in storage.list_jobs(state=JobState.QUEUED, queue="b")] == []
        assert [j.id for j in storage.list_jobs(limit=1, offset=1)] == [b]
        assert storage.list_jobs(offset=3) == []

    def test_wait_for_jobs_wakes_on_enqueue(self, storage: Storage) -> None:
        """A waiter blocked with a long timeout returns ``True`` once a job is enqueued.

        The enqueuer keeps adding jobs until the waiter returns, so a backend whose
        wake-up may miss a notification sent before it started listening still passes.
        """
        if not isinstance(storage, SupportsWakeup):
            pytest.skip("storage lacks SupportsWakeup")
        waker: SupportsWakeup = storage
        outcome: list[bool] = []
        done = threading.Event()

        def wait() -> None:
            try:
                outcome.append(waker.wait_for_jobs(["wake"], 20.0))
            finally:
                done.set()

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        for _ in range(100):
            storage.enqueue([new_job(queue="wake")], now=None)
            if done.wait(0.2):
                break
        thread.join(5.0)
        assert outcome == [True]


def _wait_claim(storage: Storage) -> SupportsWaitClaim:
    assert isinstance(storage, SupportsWaitClaim), (
        f"{type(storage).__name__} lacks SupportsWaitClaim: add WaitClaimContract only to the"
        " test class of a storage that has it"
    )
    return storage


class WaitClaimContract(ContractBase):
    """``SupportsWaitClaim``: add it beside ``StorageContract`` for a storage with it."""

    def test_wait_and_claim_claims_a_job_enqueued_while_it_waits(self, storage: Storage) -> None:
        """The waiter (long timeout) returns the job claimed; the enqueuer keeps adding
        jobs until it returns (a wake-up sent before the wait began may be missed), and
        every job it added but the claimed ones is still there for a plain claim."""
        waiter = _wait_claim(storage)
        got: list[ClaimedJob] = []
        done = threading.Event()

        def wait() -> None:
            try:
                for _ in range(50):  # a spurious wake-up claims nothing: wait again
                    got.extend(waiter.wait_and_claim("w1", ["wc"], 1, 30_000, 20.0))
                    if got:
                        return
            finally:
                done.set()

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        ids = []
        for _ in range(100):
            job = new_job(queue="wc")
            storage.enqueue([job], now=None)
            ids.append(job.id)
            if done.wait(0.2):
                break
        thread.join(5.0)
        assert len(got) == 1 and got[0].id in ids and got[0].attempt == 1
        rest = storage.claim("w2", ["wc"], 1000, 30_000)
        assert sorted(j.id for j in rest) == sorted(i for i in ids if i != got[0].id)

    def test_wait_and_claim_takes_ready_jobs_at_once_up_to_the_limit(
        self, storage: Storage
    ) -> None:
        """Ready jobs are claimed without waiting out the timeout, ``limit`` at a time;
        with none left a short wait ends with nothing claimed."""
        waiter = _wait_claim(storage)
        jobs = [new_job(queue="wc") for _ in range(3)]
        storage.enqueue(jobs, now=None)
        begun = time.monotonic()
        first = waiter.wait_and_claim("w1", ["wc", "other"], 2, 30_000, 20.0)
        second = waiter.wait_and_claim("w1", ["wc"], 2, 30_000, 20.0)
        assert time.monotonic() - begun < 15.0  # neither waited for its timeout
        assert [j.id for j in first + second] == [j.id for j in jobs]
        assert waiter.wait_and_claim("w1", ["wc"], 2, 30_000, 0.05) == []
        assert waiter.wait_and_claim("w1", ["wc"], 0, 30_000, 0.05) == []
