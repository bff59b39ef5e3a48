"""Where a running attempt's record lives: on the job item until the attempt ends.

A claim of a plain job is one conditional UpdateItem of the job item (1 write unit);
the attempt item is Put by the transaction that ends the attempt, except a success
without concurrency key (a plain job's or a flow step's), which ends inline on the job
item (for a plain job one conditional UpdateItem). These tests check
the writes, the reads of a running attempt, and that an attempt item written at claim
by an earlier version (the old layout) is completed, not duplicated, by the end.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from backends.sqs.codec import encode_item
from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    Decision,
    NewJob,
    Outcome,
)
from tests.backends.sqs.conftest import Factory


def _count(storage: Any) -> Counter[str]:
    calls: Counter[str] = Counter()
    storage.store.ddb.meta.events.register(
        "before-call.dynamodb", lambda model, **_: calls.update([model.name])
    )
    return calls


def _job(job_id: str) -> NewJob:
    return NewJob(id=job_id, task_name="t", queue="default", payload=b"{}")


def _succeed(ref: Any) -> AttemptEnd:
    return AttemptEnd(ref=ref, outcome=Outcome.SUCCEEDED, decision=Decision(action=Action.COMPLETE))


def _attempt_item(storage: Any, job_id: str, n: int) -> dict[str, Any] | None:
    return storage.store.db.get(storage.store.keys.attempt(job_id, n))


def test_claim_of_one_plain_job_is_one_update_and_no_attempt_item(
    make_storage: Factory,
) -> None:
    s = make_storage()
    s.enqueue([_job("a1")])
    calls = _count(s)
    (claimed,) = s.claim("w1", ["default"], 1, 30_000)
    assert calls["UpdateItem"] == 1 and calls["TransactWriteItems"] == 0
    assert _attempt_item(s, "a1", 1) is None
    # the running attempt is read from the job item
    (running,) = s.list_attempts("a1")
    assert (running.number, running.worker_id, running.outcome) == (1, "w1", None)
    assert running.started_at is not None and running.finished_at is None

    calls.clear()
    assert s.finish([_succeed(claimed.ref)]) == [True]
    # a plain success ends inline: one conditional UpdateItem of the job item
    assert calls["UpdateItem"] == 1 and calls["TransactWriteItems"] == 0
    assert _attempt_item(s, "a1", 1) is None
    (done,) = s.list_attempts("a1")
    assert (done.number, done.worker_id, done.outcome) == (1, "w1", Outcome.SUCCEEDED)
    assert done.finished_at is not None and done.started_at == running.started_at


def test_a_success_with_a_concurrency_key_stores_its_attempt_item(
    make_storage: Factory,
) -> None:
    s = make_storage()
    s.enqueue(
        [
            NewJob(
                id="k1",
                task_name="t",
                queue="default",
                payload=b"{}",
                concurrency_key="k",
                concurrency_limit=1,
            )
        ]
    )
    (claimed,) = s.claim("w1", ["default"], 1, 30_000)
    assert _attempt_item(s, "k1", 1) is None
    assert s.finish([_succeed(claimed.ref)]) == [True]
    stored = _attempt_item(s, "k1", 1)
    assert stored is not None and stored["oc"] == "succeeded" and stored["wk"] == "w1"
    (done,) = s.list_attempts("k1")
    assert done.outcome is Outcome.SUCCEEDED


def test_second_attempt_lists_the_ended_first_and_the_running_second(
    make_storage: Factory,
) -> None:
    s = make_storage()
    s.enqueue([_job("b1")])
    (first,) = s.claim("w1", ["default"], 1, 30_000)
    retry = AttemptEnd(
        ref=first.ref, outcome=Outcome.FAILED, decision=Decision(action=Action.RETRY)
    )
    assert s.finish([retry]) == [True]
    failed = _attempt_item(s, "b1", 1)
    assert failed is not None and failed["oc"] == "failed"  # a failure is its own item
    (second,) = s.claim("w2", ["default"], 1, 30_000)
    assert second.ref.attempt == 2
    got = [(a.number, a.worker_id, a.outcome) for a in s.list_attempts("b1")]
    assert got == [(1, "w1", Outcome.FAILED), (2, "w2", None)]
    assert s.finish([_succeed(second.ref)]) == [True]
    got = [(a.number, a.worker_id, a.outcome) for a in s.list_attempts("b1")]
    assert got == [(1, "w1", Outcome.FAILED), (2, "w2", Outcome.SUCCEEDED)]


def test_an_attempt_item_written_at_claim_by_the_old_layout_is_completed(
    make_storage: Factory,
) -> None:
    s = make_storage()
    s.enqueue([_job("c1")])
    (claimed,) = s.claim("w1", ["default"], 1, 30_000)
    job = s.store.db.get(s.store.keys.job("c1"))
    assert job is not None
    old = {"pk": job["pk"], "sk": "A#00001", "n": 1, "wk": "w1", "sa": job["sa"]}
    s.store.ddb.put_item(TableName=s.store.db.name, Item=encode_item(old))
    assert len(s.list_attempts("c1")) == 1  # not listed twice
    assert s.finish([_succeed(claimed.ref)]) == [True]
    (done,) = s.list_attempts("c1")
    assert (done.number, done.worker_id, done.outcome) == (1, "w1", Outcome.SUCCEEDED)


def test_a_stale_candidate_loses_the_single_update_and_claims_nothing(
    make_storage: Factory, monkeypatch: Any
) -> None:
    s, other = make_storage(), make_storage()
    s.enqueue([_job("d1")])
    stale = s.claiming._ready(
        ["default"], 1, s.store.now(None)
    )  # read before the other worker claims
    assert [c["id"] for c in stale] == ["d1"]
    assert len(other.claim("w2", ["default"], 1, 30_000)) == 1
    reads = iter([stale])
    monkeypatch.setattr(s.claiming, "_ready", lambda *a: next(reads, []))
    calls = _count(s)
    assert s.claim("w1", ["default"], 1, 30_000) == []
    assert calls["UpdateItem"] == 1  # the conditional update was sent and refused
    (only,) = s.list_attempts("d1")
    assert only.worker_id == "w2"


def test_a_flow_steps_success_ends_inline_and_is_stored_when_the_step_runs_again(
    make_storage: Factory,
) -> None:
    # A step's end is a transaction anyway (its step-end event); its success keeps the
    # ended attempt on the job item like a plain one (no attempt item: 2 write units a
    # step less). A resume that runs the step again stores it first, in the same write.
    from queue_core.storage.flows import step_job_id
    from queue_core.testing.fixtures import T0, complete_end
    from queue_core.testing.suite._flows_base import claim_steps, make_execution, make_spec

    s = make_storage()
    new = make_execution(make_spec({"a": []}))
    s.start_execution(new, now=T0)
    a = claim_steps(s, T0 + 1)["a"]
    assert s.finish([complete_end(a.ref)], now=T0 + 2) == [True]
    job_id = step_job_id(new.id, 0)
    assert _attempt_item(s, job_id, 1) is None
    assert [x.outcome for x in s.list_attempts(job_id)] == [Outcome.SUCCEEDED]

    assert s.resume_execution(new.id, "a", now=T0 + 3).value == "running"
    stored = _attempt_item(s, job_id, 1)
    assert stored is not None and (stored["oc"], stored["sa"], stored["fa"]) == (
        "succeeded",
        T0 + 1,
        T0 + 2,
    )
