"""Contract: optional abilities. Each test skips with the ability's name when absent."""

from __future__ import annotations

import threading

import pytest

from queue_core.model import JobState
from queue_core.storage import Storage, SupportsJobScan, SupportsWakeup
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
