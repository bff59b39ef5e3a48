"""At-least-once delivery and the parking/hop path, on a real moto server."""

from __future__ import annotations

import time

from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    Decision,
    JobState,
    NewJob,
    Outcome,
)
from tests.backends.sqs.conftest import Factory

MIN = 60_000


def _job(job_id: str, **kw: object) -> NewJob:
    return NewJob(id=job_id, task_name="t", queue="default", payload=b"{}", **kw)  # type: ignore[arg-type]


def _complete(ref: object) -> AttemptEnd:
    return AttemptEnd(
        ref=ref,  # type: ignore[arg-type]
        outcome=Outcome.SUCCEEDED,
        decision=Decision(action=Action.COMPLETE),
        result=b"1",
    )


def test_duplicate_delivery_records_one_attempt(make_storage: Factory) -> None:
    first = make_storage(visibility_s=1)
    second = make_storage(visibility_s=1)
    assert first.enqueue([_job("j1")]) == [JobState.QUEUED]
    assert first.wait_for_jobs(["default"], 5.0) is True
    [got] = first.claim("w1", ["default"], 1, 30_000)
    # the message's 1 s visibility lapses without a renewal: SQS delivers it again
    time.sleep(1.5)
    second.wait_for_jobs(["default"], 3.0)
    assert second.claim("w2", ["default"], 1, 30_000) == []
    assert first.claim("w1", ["default"], 1, 30_000) == []
    assert first.finish([_complete(got.ref)]) == [True]
    attempts = first.list_attempts("j1")
    assert [(a.number, a.outcome, a.worker_id) for a in attempts] == [(1, Outcome.SUCCEEDED, "w1")]
    rec = first.get_job("j1")
    assert rec is not None and rec.state is JobState.SUCCEEDED and rec.attempts == 1


def test_redelivered_hint_of_a_finished_job_is_deleted(make_storage: Factory) -> None:
    s = make_storage(visibility_s=1)
    s.enqueue([_job("j2")])
    [got] = s.claim("w", ["default"], 1, 30_000)
    assert s.finish([_complete(got.ref)]) == [True]
    # the hint was never received; it is now stale: a receive deletes it, no wake-up
    assert s.wait_for_jobs(["default"], 2.0) is False
    url = s.store.delivery.queue_url("default")
    time.sleep(1.2)
    left = s.store.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", [])
    assert left == []


def test_thirty_minute_retry_is_not_run_early(make_storage: Factory) -> None:
    t0 = 1_900_000_000_000
    clock = [t0]
    s = make_storage(clock=lambda: clock[0], hop_s=1)
    s.enqueue([_job("j3", max_attempts=3)])
    [got] = s.claim("w", ["default"], 1, 30_000)
    retry = AttemptEnd(
        ref=got.ref,
        outcome=Outcome.FAILED,
        decision=Decision(action=Action.RETRY, delay_ms=30 * MIN),
        reason="error",
    )
    assert s.finish([retry], now=t0 + 1000) == [True]
    due = t0 + 1000 + 30 * MIN
    # the promoter leaves it parked at every time before its ready time
    for t in (t0 + 2000, t0 + 15 * MIN, due - 1):
        assert s.claim("w", ["default"], 1, 30_000, now=t) == []
        assert s.count_pending(["default"], 0, now=t) == 0
    # SQS hops: the hint comes back early (1 s hops here), the record says "not yet",
    # it is re-sent for the remainder and the worker is not woken
    clock[0] = t0 + 29 * MIN
    assert s.wait_for_jobs(["default"], 2.5) is False
    rec = s.get_job("j3")
    assert rec is not None and rec.state is JobState.QUEUED and rec.attempts == 1
    assert rec.run_at == due
    clock[0] = due
    assert s.wait_for_jobs(["default"], 5.0) is True
    [again] = s.claim("w", ["default"], 1, 30_000)
    assert (again.id, again.attempt, again.started_at) == ("j3", 2, due)
