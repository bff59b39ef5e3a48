"""Durable workflows on SQS + DynamoDB: what the published contract cannot see -- the
jobs a workflow holds kept from the job prune and the TTL, nothing of a workflow left
after prune, a suspension too large for one transaction, and a parked function's
ready time."""

from __future__ import annotations

from typing import Any

from backends.sqs import SQSStorage
from queue_core.records.flows import ExecutionState
from queue_core.records.jobs import JobState
from queue_core.records.workflows import PARKED_AT, Suspension
from queue_core.storage.flows import step_job_id
from queue_core.testing.fixtures import DAY, T0, complete_end, dead_end
from queue_core.testing.suite._durable_base import (
    child,
    child_memo,
    claim_function,
    event_wait,
    make_workflow,
    memos_of,
    state_of,
    sub_flow,
    suspended,
)
from queue_core.testing.suite._flows_base import claim_steps
from tests.backends.sqs.conftest import Factory


def _items(s: SQSStorage) -> list[dict[str, Any]]:
    """Every item of the storage's prefix (a Scan: tests only)."""
    p = s.store.keys.p
    pages = s.store.db.client.get_paginator("scan").paginate(
        TableName=s.store.db.name,
        FilterExpression="begins_with(pk, :p)",
        ExpressionAttributeValues={":p": {"S": p}},
    )
    got = [it for page in pages for it in page["Items"]]
    return [{**it, "pk": it["pk"]["S"][len(p) :], "sk": it["sk"]["S"]} for it in got]


def _run_one(s: SQSStorage) -> str:
    """A workflow through a memo, a sub-execution, a child, an event wait and its end."""
    new = make_workflow()
    s.start_execution(new, now=T0)
    fn = claim_function(s, new.id, T0 + 1)
    assert fn is not None
    s.put_memo(fn.ref, new.id, "s:a", b'"A"', now=T0 + 2)
    s.put_memo(fn.ref, new.id, "s:a", b'"A2"', now=T0 + 2)  # a replaced value
    s.start_child_execution(fn.ref, sub_flow(new.id, 1), "sub#0", "c:0", now=T0 + 3)
    kid = child(new.id, 2, 1)
    stop = Suspension(ready_at=None, memos=(child_memo(1, 2),), children=(kid,), awaiting=(1, 2))
    assert s.finish([suspended(fn.ref, stop)], now=T0 + 4) == [True]
    steps = claim_steps(s, T0 + 5)
    s.finish([complete_end(steps["a"].ref), dead_end(steps["tests.child#1"].ref)], now=T0 + 6)
    fn = claim_function(s, new.id, T0 + 7)
    assert fn is not None
    wait = Suspension(ready_at=None, wait=event_wait(2, "go", since=T0 + 7), reason="event")
    assert s.finish([suspended(fn.ref, wait)], now=T0 + 8) == [True]
    assert s.send_event("go", None, b"1", now=T0 + 9) == 1
    fn = claim_function(s, new.id, T0 + 10)
    assert fn is not None
    s.finish([complete_end(fn.ref)], now=T0 + 11)
    return new.id


def test_held_jobs_stay_until_their_execution_and_nothing_is_left_after_prune(
    make_storage: Factory,
) -> None:
    s = make_storage(retention_ms=0)
    eid = _run_one(s)
    record = s.get_execution(eid)
    assert record is not None and record.state is ExecutionState.SUCCEEDED
    held = s.get_job(step_job_id(eid, 2))  # the dead child: no TTL, not in the job prune
    assert held is not None and held.state is JobState.DEAD
    raw = {i["pk"]: i for i in _items(s) if i["sk"] == "J"}
    assert "ttl" not in raw[f"J#{step_job_id(eid, 2)}"]
    assert s.prune(now=T0 + DAY) == 3  # the sub's step job, the function's and the child's
    left = sorted({i["pk"].split("#", 1)[0] for i in _items(s)})
    assert left == ["D", "FS"], left  # the child's dead letter, the specs
    assert s.workflow_state(eid) is None


def test_a_suspension_larger_than_a_transaction_is_stored_whole(make_storage: Factory) -> None:
    s = make_storage()
    new = make_workflow()
    s.start_execution(new, now=T0)
    fn = claim_function(s, new.id, T0 + 1)
    assert fn is not None
    n = 60  # 60 memos, 60 stored children's jobs and 60 releases: more than 100 writes
    stop = Suspension(
        ready_at=None,
        memos=tuple(child_memo(i, i + 1) for i in range(n)),
        children=tuple(child(new.id, i + 1, i) for i in range(n)),
        awaiting=tuple(range(1, n + 1)),
        reason="children",
    )
    assert s.finish([suspended(fn.ref, stop)], now=T0 + 2) == [True]
    state = state_of(s, new.id)
    assert len(state.steps) == n + 1 and len(state.jobs) == n + 1
    assert sorted(memos_of(s, new.id)) == sorted(f"c:{i}" for i in range(n))
    assert {j.state for i, j in state.jobs.items() if i} == {JobState.QUEUED}
    assert state.execution.awaiting == tuple(range(1, n + 1))


def test_a_parked_function_waits_beyond_every_claim(make_storage: Factory) -> None:
    s = make_storage()
    new = make_workflow()
    s.start_execution(new, now=T0)
    fn = claim_function(s, new.id, T0 + 1)
    assert fn is not None
    wait = Suspension(ready_at=None, wait=event_wait(0, "go", since=T0 + 1), reason="event")
    assert s.finish([suspended(fn.ref, wait)], now=T0 + 2) == [True]
    job = {i["pk"]: i for i in _items(s)}[f"J#{fn.id}"]
    assert job["ra"] == {"N": str(PARKED_AT)} and "rq" not in job
    assert s.send_event("go", None, b"1", now=T0 + 3) == 1
    assert claim_function(s, new.id, T0 + 3) is not None


def test_a_sub_execution_started_by_a_lost_attempt_is_taken_by_the_next(
    make_storage: Factory,
) -> None:
    """The first call started the sub-execution, then lost its lease before writing the
    parent's step: the function's next run starts it again and gets that one."""
    s = make_storage()
    new = make_workflow(max_attempts=2)
    s.start_execution(new, now=T0)
    fn = claim_function(s, new.id, T0 + 1)
    assert fn is not None
    sub = sub_flow(new.id, 1)
    s.start_execution(sub, now=T0 + 2)  # the first half of the lost call
    assert s.reap(now=T0 + DAY)  # its lease expired: the function runs again
    again = claim_function(s, new.id, T0 + DAY + 1)
    assert again is not None
    state = s.start_child_execution(again.ref, sub, "sub#0", "c:0", now=T0 + DAY + 2)
    assert state is ExecutionState.RUNNING
    steps = state_of(s, new.id).steps
    assert [(st.idx, st.step_id) for st in steps] == [(0, "main"), (1, "sub#0")]
