"""Contract: optional abilities.

:class:`OptionalAbilitiesContract` (part of ``StorageContract``) skips a test with the
ability's name when the storage lacks it. :class:`WaitClaimContract` is opt-in: a test
module adds it beside ``StorageContract`` for a storage that has ``SupportsWaitClaim``,
so backends without the ability collect no skipped tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from queue_core.records.errors import ConfigError
from queue_core.records.jobs import ClaimedJob, JobState
from queue_core.rules.paging import MAX_PAGE_VALUE
from queue_core.storage.abilities import (
    SupportsJobScan,
    SupportsMigrate,
    SupportsSchemaVersion,
    SupportsWaitClaim,
    SupportsWaitInterrupt,
    SupportsWakeup,
)
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import T0, claim_one, enqueue_one, new_job
from queue_core.testing.suite._base import ContractBase, job_of, lacks, order_says


class OptionalAbilitiesContract(ContractBase):
    """``SupportsJobScan``, ``SupportsWakeup``, ``SupportsWaitInterrupt``,
    ``SupportsMigrate`` and ``SupportsSchemaVersion``."""

    def test_migrate_twice_keeps_what_is_stored(self, storage: Storage) -> None:
        if not isinstance(storage, SupportsMigrate):
            pytest.skip(lacks(SupportsMigrate))
        job_id = enqueue_one(storage)
        storage.migrate()
        storage.migrate()
        assert job_of(storage, job_id).state is JobState.QUEUED
        assert claim_one(storage, now=T0).id == job_id

    def test_schema_version_is_stable_across_migrations(self, storage: Storage) -> None:
        if not isinstance(storage, SupportsSchemaVersion):
            pytest.skip(lacks(SupportsSchemaVersion))
        enqueue_one(storage)  # a storage in use holds its schema
        version = storage.schema_version()
        assert version > 0, "a storage that stored a job has a schema version"
        if isinstance(storage, SupportsMigrate):
            storage.migrate()
        assert storage.schema_version() == version, "migrating an up-to-date schema"

    def test_list_jobs_pages_newest_first_with_filters(self, storage: Storage) -> None:
        if not isinstance(storage, SupportsJobScan):
            pytest.skip(lacks(SupportsJobScan))
        a = enqueue_one(storage, queue="a", now=T0)
        b = enqueue_one(storage, queue="b", now=T0 + 1)
        c = enqueue_one(storage, queue="a", now=T0 + 2)
        claim_one(storage, now=T0 + 3, queues=["b"])
        got = [j.id for j in storage.list_jobs()]
        assert got == [c, b, a], order_says(
            "list_jobs pages jobs newest (last enqueued) first", got, {"c": c, "b": b, "a": a}
        )
        assert [j.id for j in storage.list_jobs(queue="a")] == [c, a]
        assert [j.id for j in storage.list_jobs(state=JobState.RUNNING)] == [b]
        assert [j.id for j in storage.list_jobs(state=JobState.QUEUED, queue="b")] == []
        assert [j.id for j in storage.list_jobs(limit=1, offset=1)] == [b]
        assert storage.list_jobs(offset=3) == []

    @pytest.mark.parametrize(
        ("limit", "offset", "field"),
        [(1, 2**63, "offset"), (2**64, 0, "limit"), (-1, 0, "limit"), (1, -1, "offset")],
    )
    def test_list_jobs_refuses_a_page_out_of_range(
        self, storage: Storage, limit: int, offset: int, field: str
    ) -> None:
        if not isinstance(storage, SupportsJobScan):
            pytest.skip("storage lacks SupportsJobScan")
        job_id = enqueue_one(storage, now=T0)
        for state in (None, JobState.QUEUED):
            with pytest.raises(ConfigError) as info:
                storage.list_jobs(state=state, limit=limit, offset=offset)
            assert (info.value.code, info.value.field) == ("invalid_option", field)
        assert [j.id for j in storage.list_jobs(limit=MAX_PAGE_VALUE)] == [job_id]
        assert storage.list_jobs(offset=MAX_PAGE_VALUE) == []

    def test_wait_for_jobs_wakes_on_enqueue(self, storage: Storage) -> None:
        """A waiter blocked with a long timeout returns ``True`` once a job is enqueued.

        The enqueuer keeps adding jobs until the waiter returns, so a backend whose
        wake-up may miss a notification sent before it started listening still passes.
        """
        if not isinstance(storage, SupportsWakeup):
            pytest.skip(lacks(SupportsWakeup))
        outcome = _wait_prodded(
            storage, "wake", lambda: storage.enqueue([new_job(queue="wake")], now=None), 0.2
        )
        assert outcome == [True]

    def test_wait_for_jobs_ends_when_a_delayed_job_falls_due(self, storage: Storage) -> None:
        """A job stored before the wait with a short delay ends a long wait (no enqueue,
        no other write meanwhile): the wait is bounded by the next due time, not by its
        timeout (20 s here; a generous bound, no timing is asserted beyond it)."""
        if not isinstance(storage, SupportsWakeup):
            pytest.skip(lacks(SupportsWakeup))
        storage.enqueue([new_job(queue="due", delay_ms=300)], now=None)
        storage.wait_for_jobs(["due"], 0.0)  # a first wait may only start listening
        begun = time.monotonic()
        assert storage.wait_for_jobs(["due"], 20.0) is True
        assert time.monotonic() - begun < 10.0, "the wait lasted until its timeout"

    def test_interrupt_waits_ends_a_wait_in_progress(self, storage: Storage) -> None:
        """A waiter blocked with a long timeout and nothing to wake it returns once
        ``interrupt_waits`` is called. The first call comes 0.5 s into the wait, so that
        the waiter is blocked by then, and the call is repeated until the waiter returns
        (an interrupt that comes before the wait began need not end it); a job stored in
        another queue is left as it was."""
        if not isinstance(storage, SupportsWaitInterrupt):
            pytest.skip(lacks(SupportsWaitInterrupt))
        assert isinstance(storage, SupportsWakeup), "SupportsWaitInterrupt needs SupportsWakeup"
        job_id = enqueue_one(storage, queue="elsewhere")
        storage.wait_for_jobs(["idle"], 0.0)  # a first wait may only start listening
        begun = time.monotonic()

        def interrupt() -> None:
            if time.monotonic() - begun >= 0.5:
                storage.interrupt_waits()

        assert _wait_prodded(storage, "idle", interrupt, 0.05) == [True]
        assert time.monotonic() - begun < 5.0, "the wait lasted until its timeout"
        assert job_of(storage, job_id).state is JobState.QUEUED
        assert claim_one(storage, now=T0, queues=["elsewhere"]).id == job_id


def _wait_prodded(
    storage: SupportsWakeup, queue: str, prod: Callable[[], object], every: float
) -> list[bool]:
    """What ``wait_for_jobs([queue], 20.0)``, run in a thread, returned while this thread
    calls ``prod()`` every ``every`` seconds until it returns (10 s at most)."""
    outcome: list[bool] = []
    done = threading.Event()

    def wait() -> None:
        try:
            outcome.append(storage.wait_for_jobs([queue], 20.0))
        finally:
            done.set()

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    for _ in range(int(10.0 / every)):
        prod()
        if done.wait(every):
            break
    thread.join(20.0)
    return outcome


def _wait_claim(storage: Storage) -> SupportsWaitClaim:
    assert isinstance(storage, SupportsWaitClaim), (
        f"{type(storage).__name__} lacks SupportsWaitClaim ({SupportsWaitClaim.__module__}): "
        "add WaitClaimContract only to the test class of a storage that has it"
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
