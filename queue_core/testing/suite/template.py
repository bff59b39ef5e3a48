"""Contract: ``SupportsTemplateEnqueue`` (opt-in, like ``WaitClaimContract``).

A test module adds :class:`TemplateEnqueueContract` beside ``StorageContract`` for a
storage that has ``enqueue_template``; the cases compare what it stores with what
:meth:`~queue_core.storage.protocol.Storage.enqueue` stores for the same jobs.
"""

from __future__ import annotations

import dataclasses

import pytest

from queue_core.records.errors import StorageError
from queue_core.records.job_factory import expand_template
from queue_core.records.jobs import JobRecord, JobState
from queue_core.storage.abilities import SupportsTemplateEnqueue
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import T0, new_id, new_job
from queue_core.testing.suite._base import ContractBase, job_of

__all__ = ["TemplateEnqueueContract"]


def _templated(storage: Storage) -> SupportsTemplateEnqueue:
    assert isinstance(storage, SupportsTemplateEnqueue), (
        f"{type(storage).__name__} lacks SupportsTemplateEnqueue "
        f"({SupportsTemplateEnqueue.__module__}): add TemplateEnqueueContract only to the "
        "test class of a storage that has it"
    )
    return storage


def _same_but_identity(a: JobRecord, b: JobRecord) -> None:
    """Every field equal but the id and payload (which each job has its own of)."""
    assert dataclasses.replace(a, id="", payload=b"") == dataclasses.replace(b, id="", payload=b"")


class TemplateEnqueueContract(ContractBase):
    """``SupportsTemplateEnqueue``: add it beside ``StorageContract`` for a storage with it."""

    def test_enqueue_template_stores_what_enqueue_stores(self, storage: Storage) -> None:
        """Records, claim order, payloads and the lost delay and options a claim sees are
        those of the same jobs stored with ``enqueue`` at the same time."""
        sink = _templated(storage)
        template = new_job(
            id="ignored", payload=b"ignored", priority=3, max_attempts=4, timeout_ms=9_000,
            delay_ms=5, queue="tpl", lost_delay_ms=123,
        )  # fmt: skip
        rows = [(new_id(), f'{{"args":[{i}]}}'.encode(), 1_000 + i) for i in range(4)]
        sink.enqueue_template(template, rows[:3], now=T0)
        sink.enqueue_template(template, rows[3:], now=T0)  # a batch of one (a delay())
        reference = dataclasses.replace(template, id=new_id(), queue="ref")
        assert storage.enqueue([reference], now=T0) == [JobState.QUEUED]
        ref = dataclasses.replace(job_of(storage, reference.id), queue="tpl")
        for job_id, payload, _lost in rows:
            record = job_of(storage, job_id)
            assert record.payload == payload and record.state is JobState.QUEUED
            _same_but_identity(record, ref)
        claimed = storage.claim("w1", ["tpl"], 10, 30_000, now=T0 + 5)
        assert [(c.id, c.payload, c.timeout_ms) for c in claimed] == [
            (job_id, payload, 9_000) for job_id, payload, _ in rows
        ]

    def test_enqueue_template_matches_the_expanded_jobs(self, storage: Storage) -> None:
        """``expand_template`` gives the jobs the call stores (each lost delay its own)."""
        template = new_job(queue="tpl", run_at=T0 + 50, heartbeat_ms=4_000)
        rows = [(new_id(), b"[1]", 7), (new_id(), b"[2]", 8)]
        jobs = expand_template(template, rows)
        assert [(j.id, j.payload, j.lost_delay_ms) for j in jobs] == rows
        assert all(dataclasses.replace(j, id="", payload=b"", lost_delay_ms=0)
                   == dataclasses.replace(template, id="", payload=b"", lost_delay_ms=0)
                   for j in jobs)  # fmt: skip
        _templated(storage).enqueue_template(template, rows, now=T0)
        for job in jobs:
            assert job_of(storage, job.id).run_at == T0 + 50

    def test_enqueue_template_is_all_or_nothing(self, storage: Storage) -> None:
        """A repeated id, or one already stored, stores nothing of the batch."""
        sink = _templated(storage)
        template = new_job(queue="tpl")
        held = new_id()
        storage.enqueue([dataclasses.replace(template, id=held)], now=T0)
        fresh = new_id()
        with pytest.raises(StorageError):
            sink.enqueue_template(template, [(fresh, b"[]", 0), (held, b"[]", 0)], now=T0)
        assert storage.get_job(fresh) is None
        twice = new_id()
        with pytest.raises(StorageError):
            sink.enqueue_template(template, [(twice, b"[]", 0), (twice, b"[]", 0)], now=T0)
        assert storage.get_job(twice) is None
        with pytest.raises(StorageError):
            sink.enqueue_template(template, [(held, b"[1]", 0)], now=T0)
        assert job_of(storage, held).payload == template.payload
        sink.enqueue_template(template, [], now=T0)
        assert [c.id for c in storage.claim("w1", ["tpl"], 10, 30_000, now=T0)] == [held]

    def test_a_large_batch_stores_what_enqueue_stores(self, storage: Storage) -> None:
        """200 jobs (a storage may write large batches another way, e.g. ``COPY``): each
        record as ``enqueue`` stores it, claimed in batch order; ``now=None`` takes the
        storage's clock."""
        template = new_job(queue="big", priority=1, max_attempts=2, timeout_ms=60_000)
        rows = [(new_id(), f"[{i}]".encode(), 500 + i) for i in range(200)]
        _templated(storage).enqueue_template(template, rows, now=T0)
        reference = dataclasses.replace(template, id=new_id(), queue="ref")
        storage.enqueue([reference], now=T0)
        ref = dataclasses.replace(job_of(storage, reference.id), queue="big")
        for job_id, payload, _ in rows[::37]:
            record = job_of(storage, job_id)
            assert record.payload == payload
            _same_but_identity(record, ref)
        claimed = storage.claim("w1", ["big"], 250, 30_000, now=T0)
        assert [c.id for c in claimed] == [r[0] for r in rows]
        late = [(new_id(), b"[]", 0) for _ in range(100)]
        _templated(storage).enqueue_template(template, late)
        assert all(job_of(storage, i).enqueued_at > T0 for i, _, _ in late)
