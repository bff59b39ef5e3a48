"""``give_back`` on the SQL backend (SupportsGiveBack): what the contract leaves to the
storage -- the jobs it refuses, the queued expiry it restores, one flag per ref."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from backends.sql import SQLStorage
from queue_core.records.jobs import JobState
from queue_core.testing import SEC, T0, new_job
from queue_core.testing.fixtures import LEASE, complete_end
from queue_core.testing.suite._flows_base import make_execution, make_spec


def _row(storage: SQLStorage, job_id: str) -> dict[str, object]:
    (row,) = storage.store.fetch("get_job", {"id": job_id})
    return dict(row)


def test_the_queued_expiry_comes_back_and_the_place_stays(storage: SQLStorage) -> None:
    job = new_job(schedule_to_start_ms=10 * SEC, delay_ms=SEC, timeout_ms=5 * SEC)
    storage.enqueue([job], now=T0)
    before = _row(storage, job.id)
    (got,) = storage.claim_ahead("w", ["default"], 5, LEASE, now=T0 + 2 * SEC)
    assert _row(storage, job.id)["expires_at"] is None
    assert storage.give_back([got.ref], now=T0 + 3 * SEC) == [True]
    after = _row(storage, job.id)
    cols = ("state", "attempt", "run_at", "place_at", "expires_at", "worker_id",
            "lease_token", "lease_expires_at", "deadline", "heartbeat_expires_at",
            "started_at", "reason", "seq")  # fmt: skip
    assert {c: after[c] for c in cols} == {c: before[c] for c in cols}
    assert after["expires_at"] == T0 + SEC + 10 * SEC


def test_one_flag_per_ref_in_order_and_a_ref_named_twice_is_given_back_once(
    storage: SQLStorage,
) -> None:
    a, b = new_job(), new_job()
    storage.enqueue([a, b], now=T0)
    got = {c.id: c for c in storage.claim_ahead("w", ["default"], 5, LEASE, now=T0)}
    stale = replace(got[a.id].ref, lease_token="0" * 24)
    refs = [got[b.id].ref, stale, got[a.id].ref, got[b.id].ref]
    assert storage.give_back(refs, now=T0 + 1) == [True, False, True, False]
    assert storage.give_back([], now=T0 + 1) == []
    for job_id in (a.id, b.id):
        record = storage.get_job(job_id)
        assert record is not None and (record.state, record.attempts) == (JobState.QUEUED, 0)


def test_a_step_a_round_robin_turn_and_a_cancel_requested_are_refused(
    storage: SQLStorage,
) -> None:
    """Refused and left running with their leases: the worker releases them."""
    execution = make_execution(make_spec({"a": []}))
    storage.start_execution(execution, now=T0)
    rr = new_job(concurrency_behavior="round_robin", concurrency_group="tests.fair",
                 concurrency_key="tests.fair:a", concurrency_limit=5)  # fmt: skip
    cancelled, plain = new_job(), new_job()
    storage.enqueue([rr, cancelled, plain], now=T0)
    got = {c.id: c for c in storage.claim_ahead("w", ["default"], 10, LEASE, now=T0 + 1)}
    (step,) = [c for c in got.values() if c.execution_id is not None]
    assert storage.cancel(cancelled.id, now=T0 + 2) is JobState.RUNNING
    refs = [got[step.id].ref, got[rr.id].ref, got[cancelled.id].ref, got[plain.id].ref]
    assert storage.give_back(refs, now=T0 + 3) == [False, False, False, True]
    assert storage.renew(refs[:3], LEASE, now=T0 + 4).lost == []
    record = storage.get_job(plain.id)
    assert record is not None and record.state is JobState.QUEUED
    assert storage.finish([complete_end(r) for r in refs[:3]], now=T0 + 5) == [True] * 3


def test_a_job_given_back_wakes_an_idle_worker(storage: SQLStorage) -> None:
    """As an enqueue does (PostgreSQL: ``NOTIFY``; SQLite: the waiter sees the commit)."""
    storage.enqueue([new_job()])
    (got,) = storage.claim_ahead("w", ["default"], 5, LEASE)
    storage.wait_for_jobs(["default"], 0.0)  # starts listening
    assert storage.wait_for_jobs(["default"], 0.05) is False
    th = threading.Timer(0.2, lambda: storage.give_back([got.ref]))
    th.start()
    try:
        t0 = time.monotonic()
        assert storage.wait_for_jobs(["default"], 30.0) is True
        assert time.monotonic() - t0 < 10.0
    finally:
        th.join()
    record = storage.get_job(got.id)
    assert record is not None and record.state is JobState.QUEUED
