"""Contract: enqueue (single and batch), ready times, duplicate ids, reads of a new job."""

from __future__ import annotations

import time

import pytest

from queue_core.records.errors import StorageError
from queue_core.records.jobs import JobState
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import DEFAULT_PAYLOAD, SEC, T0, claim_one, new_job
from queue_core.testing.suite._base import ContractBase, job_of


class EnqueueContract(ContractBase):
    """``enqueue``, ``get_job`` and ``list_attempts`` on fresh jobs."""

    def test_enqueue_stores_every_field(self, storage: Storage) -> None:
        job = new_job(
            task_name="mail.send",
            queue="emails",
            priority=3,
            max_attempts=4,
            lost_delay_ms=5 * SEC,
            timeout_ms=60 * SEC,
            options='{"x": 1}',
        )
        assert storage.enqueue([job], now=T0) == [JobState.QUEUED]
        rec = job_of(storage, job.id)
        assert (rec.id, rec.task_name, rec.queue) == (job.id, "mail.send", "emails")
        assert rec.state is JobState.QUEUED
        assert rec.reason is None
        assert rec.payload == DEFAULT_PAYLOAD
        assert rec.result is None
        assert rec.error is None
        assert (rec.attempts, rec.max_attempts, rec.priority) == (0, 4, 3)
        assert (rec.enqueued_at, rec.run_at) == (T0, T0)
        assert (rec.started_at, rec.finished_at) == (None, None)
        assert rec.options == '{"x": 1}'
        assert rec.replay_of is None
        assert rec.dead_id is None
        assert rec.cancel_requested is False

    def test_enqueue_batch_returns_one_state_per_job_in_order(self, storage: Storage) -> None:
        jobs = [new_job(), new_job(queue="other"), new_job()]
        assert storage.enqueue(jobs, now=T0) == [JobState.QUEUED] * 3
        assert [job_of(storage, j.id).queue for j in jobs] == ["default", "other", "default"]

    def test_enqueue_empty_batch_returns_empty_list(self, storage: Storage) -> None:
        assert storage.enqueue([], now=T0) == []
        assert storage.stats(now=T0) == []

    def test_ready_time_is_now_plus_delay_without_run_at(self, storage: Storage) -> None:
        job = new_job(delay_ms=7 * SEC)
        storage.enqueue([job], now=T0)
        assert job_of(storage, job.id).run_at == T0 + 7 * SEC

    def test_ready_time_is_run_at_plus_delay(self, storage: Storage) -> None:
        job = new_job(run_at=T0 + 100 * SEC, delay_ms=5 * SEC)
        storage.enqueue([job], now=T0)
        rec = job_of(storage, job.id)
        assert rec.run_at == T0 + 105 * SEC
        assert rec.enqueued_at == T0

    def test_run_at_in_the_past_is_ready_at_once(self, storage: Storage) -> None:
        job = new_job(run_at=T0 - 60 * SEC)
        storage.enqueue([job], now=T0)
        assert job_of(storage, job.id).run_at == T0 - 60 * SEC
        assert claim_one(storage, now=T0).id == job.id

    def test_duplicate_id_raises_storage_error_and_keeps_original(self, storage: Storage) -> None:
        original = new_job(task_name="first", payload=b"one")
        storage.enqueue([original], now=T0)
        clash = new_job(id=original.id, task_name="second", payload=b"two", queue="other")
        with pytest.raises(StorageError):
            storage.enqueue([clash], now=T0 + SEC)
        rec = job_of(storage, original.id)
        assert (rec.task_name, rec.payload, rec.queue) == ("first", b"one", "default")
        assert rec.enqueued_at == T0
        assert storage.claim("w", ["other"], 10, 30 * SEC, now=T0 + SEC) == []
        assert claim_one(storage, now=T0 + SEC).payload == b"one"

    def test_duplicate_of_a_finished_job_also_raises(self, storage: Storage) -> None:
        job = new_job()
        storage.enqueue([job], now=T0)
        storage.cancel(job.id, now=T0)
        with pytest.raises(StorageError):
            storage.enqueue([new_job(id=job.id)], now=T0 + SEC)
        assert job_of(storage, job.id).state is JobState.CANCELLED

    def test_get_job_of_unknown_id_is_none(self, storage: Storage) -> None:
        assert storage.get_job("0" * 32) is None

    def test_list_attempts_of_new_and_unknown_jobs_is_empty(self, storage: Storage) -> None:
        job = new_job()
        storage.enqueue([job], now=T0)
        assert storage.list_attempts(job.id) == []
        assert storage.list_attempts("0" * 32) == []

    def test_now_none_reads_the_storage_clock(self, storage: Storage) -> None:
        """With ``now=None`` the storage judges and stamps times by its own clock. The
        servers under test run on this machine, so that clock is within a minute of
        ours; the job is ready at once and its times are close to the local time."""
        before = time.time_ns() // 1_000_000
        job = new_job()
        assert storage.enqueue([job], now=None) == [JobState.QUEUED]
        claimed = storage.claim("w", ["default"], 5, 30 * SEC, now=None)
        after = time.time_ns() // 1_000_000
        assert [c.id for c in claimed] == [job.id]
        got = claimed[0]
        rec = job_of(storage, job.id)
        for stamp in (rec.enqueued_at, rec.run_at, got.started_at):
            assert before - 60 * SEC <= stamp <= after + 60 * SEC
        assert got.lease_expires_at == got.started_at + 30 * SEC

    def test_replay_of_is_stored_verbatim(self, storage: Storage) -> None:
        job = new_job(replay_of="f" * 32)
        storage.enqueue([job], now=T0)
        assert job_of(storage, job.id).replay_of == "f" * 32
        assert claim_one(storage, now=T0).replay_of == "f" * 32
