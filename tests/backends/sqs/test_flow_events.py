"""Claims and step-end events the SQS flows fold together (``folding.fold``), and the job
operations they keep for later (``td``).

Each advance normally follows the write that recorded its event; here the callers' advances
are lost (as if each caller died right after its transaction), so several claims and
events are pending when the next reap (``REAP_MARGIN_MS`` after the last of them) folds them at
once.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from backends.sqs.flow_items import Exec, cells_text, pack
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import JobState, Outcome, Reason
from queue_core.rules.flows import plan
from queue_core.rules.leases import REAP_MARGIN_MS as M
from queue_core.storage.flows import step_job_id
from queue_core.testing.fixtures import LEASE, T0, complete_end, dead_end, retry_end
from queue_core.testing.suite._flows_base import claim_steps, make_execution, make_spec, states
from tests.backends.sqs.conftest import Factory

S = StepState


def _no_advance(storage: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage.flows, "after_ends", lambda eids, now: [])


def _stored(storage: Any, execution_id: str) -> tuple[dict[str, S], dict[int, int]]:
    """Each step's stored state (claims not overlaid) and the claims not folded yet."""
    x = storage.flows._read(execution_id)
    return {sid: cell[0] for (sid, _), cell in zip(x.steps, x.cells, strict=True)}, x.claims


def test_a_retry_claimed_again_before_any_advance_is_running(
    make_storage: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, reaper = make_storage(), make_storage()
    new = make_execution(make_spec({"a": [], "b": ["a"]}), max_attempts=3)
    worker.start_execution(new, now=T0)
    _no_advance(worker, monkeypatch)
    first = claim_steps(worker, T0 + 1)["a"]
    assert worker.finish([retry_end(first.ref, 0)], now=T0 + 2) == [True]
    assert claim_steps(worker, T0 + 3)["a"].attempt == 2
    reaper.reap(now=T0 + 3 + M)
    assert _stored(reaper, new.id) == ({"a": S.RUNNING, "b": S.PENDING}, {})
    assert reaper.get_job(step_job_id(new.id, 1)) is None


def test_a_step_claimed_again_while_a_sibling_died_is_left_to_finish(
    make_storage: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # b (after a in definition order) was retried and claimed again; a died meanwhile.
    # Folded step by step in attempt order, b's retry made it queued when a's death was
    # judged, so it was marked not_run while its second attempt ran.
    worker, reaper = make_storage(), make_storage()
    new = make_execution(make_spec({"a": [], "b": [], "c": ["a", "b"]}), max_attempts=2)
    worker.start_execution(new, now=T0)
    _no_advance(worker, monkeypatch)
    got = claim_steps(worker, T0 + 1)
    assert worker.finish([retry_end(got["b"].ref, 0)], now=T0 + 2) == [True]
    b2 = claim_steps(worker, T0 + 3)["b"]
    assert worker.finish([dead_end(got["a"].ref)], now=T0 + 4) == [True]
    reaper.reap(now=T0 + 4 + M)
    assert _stored(reaper, new.id) == ({"a": S.DEAD, "b": S.RUNNING, "c": S.NOT_RUN}, {})
    record = reaper.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.RUNNING
    assert record.failed_step == "a"
    # b's attempt is not stopped: it finishes, and then the execution fails
    assert reaper.finish([dead_end(b2.ref)], now=T0 + 5 + M) == [True]
    record = reaper.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.FAILED


def test_a_queued_step_cancelled_after_its_retry_ends_the_execution(
    make_storage: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the retry and the cancel are both events of attempt 1: the cancel is the later one
    worker, reaper = make_storage(), make_storage()
    new = make_execution(make_spec({"a": [], "b": ["a"]}), max_attempts=3)
    worker.start_execution(new, now=T0)
    _no_advance(worker, monkeypatch)
    a = claim_steps(worker, T0 + 1)["a"]
    assert worker.finish([retry_end(a.ref, 60_000)], now=T0 + 2) == [True]
    assert worker.cancel(a.id, now=T0 + 3) is JobState.CANCELLED
    reaper.reap(now=T0 + 3 + M)
    assert _stored(reaper, new.id) == ({"a": S.CANCELLED, "b": S.NOT_RUN}, {})
    record = reaper.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.FAILED


def test_step_jobs_keep_payload_bytes_until_released(make_storage: Factory) -> None:
    s = make_storage()
    new = make_execution(make_spec({"a": []}))
    raw = b"\x00\xff binary \x80"
    new = replace(new, jobs=tuple(replace(j, payload=raw) for j in new.jobs))
    s.start_execution(new, now=T0)
    (claimed,) = s.claim("w", ["default"], 1, LEASE, now=T0 + 1)
    assert claimed.payload == raw


def test_job_operations_left_by_the_version_before_the_plan_are_read() -> None:
    new = make_execution(make_spec({"a": [], "b": ["a"], "c": ["a"], "d": ["a"]}))
    steps = '[["a", []], ["b", ["a"]], ["c", ["a"]], ["d", ["a"]]]'
    item = {"id": new.id, "st": "running", "sp": steps, "ss": "\n".join(["pending|0|"] * 4)}
    item["dl"] = T0 + 60_000
    item["td"] = '[["rel", 1], ["nr", 2], ["to", 3], ["cx", 1]]'
    assert Exec(item).todo() == [
        plan.Release("b", 1, T0 + 60_000),
        plan.EndJob("c", 2, JobState.QUEUED, JobState.CANCELLED, Reason.NOT_RUN.value, None),
        plan.EndJob(
            "d",
            3,
            JobState.RUNNING,
            JobState.TIMED_OUT,
            Reason.FLOW_TIMEOUT.value,
            Outcome.TIMED_OUT,
        ),
        plan.RequestCancel("b", 1),
    ]


def _raw_execution(storage: Any, execution_id: str) -> dict[str, Any]:
    key = storage.flows._key("X", execution_id)
    item: dict[str, Any] = storage.store.ddb.get_item(
        TableName=storage.store.db.name, Key=key, ConsistentRead=True
    )["Item"]
    return item


def test_a_wide_execution_is_stored_compressed_and_a_text_one_still_advances(
    make_storage: Factory,
) -> None:
    # An execution item is written again by each batch of step ends and billed by its
    # whole size: a declared flow's step list is its spec's (read from the spec item),
    # long cells are stored compressed (binary). One written by an earlier version (its
    # own step list, text) is read, advanced and written compressed.
    s = make_storage()
    wide = make_execution(make_spec({"root": [], **{f"s{i:03d}": ["root"] for i in range(120)}}))
    s.start_execution(wide, now=T0)
    raw = _raw_execution(s, wide.id)
    assert "sp" not in raw and set(raw["ss"]) == {"B"}

    older = make_execution(make_spec({"root": [], **{f"t{i:03d}": ["root"] for i in range(120)}}))
    s.start_execution(older, now=T0)
    x = s.flows._read(older.id)
    text = {":sp": {"S": json.dumps([[sid, list(deps)] for sid, deps in x.steps])}}
    text[":ss"] = {"S": cells_text(x.cells)}
    s.store.ddb.update_item(
        TableName=s.store.db.name,
        Key=s.flows._key("X", older.id),
        UpdateExpression="SET sp = :sp, ss = :ss",
        ExpressionAttributeValues=text,
    )
    assert set(_raw_execution(s, older.id)["ss"]) == {"S"}
    (root,) = [
        c for c in s.claim("w", ["default"], 10, LEASE, now=T0 + 1) if c.execution_id == older.id
    ]
    assert s.finish([complete_end(root.ref)], now=T0 + 2) == [True]
    after = states(s, older.id)
    assert after["root"] is S.SUCCEEDED
    assert {after[f"t{i:03d}"] for i in range(120)} == {S.QUEUED}
    assert set(_raw_execution(s, older.id)["ss"]) == {"B"}


def test_long_job_operations_left_are_stored_compressed_and_read_back() -> None:
    spec = make_spec({"root": [], **{f"s{i:03d}": ["root"] for i in range(150)}})
    new = make_execution(spec)
    rows = [["rel", i, T0 + 60_000] for i in range(1, 151)]
    packed = pack(json.dumps(rows))
    assert isinstance(packed, bytes) and len(packed) < len(json.dumps(rows)) // 4
    steps = json.dumps([["root", []], *([f"s{i:03d}", ["root"]] for i in range(150))])
    item = {"id": new.id, "st": "running", "sp": steps, "ss": "\n".join(["pending|0|"] * 151)}
    item["td"] = packed
    assert Exec(item).todo() == [
        plan.Release(f"s{i - 1:03d}", i, T0 + 60_000) for i in range(1, 151)
    ]


def test_a_declared_flows_steps_are_read_from_its_spec_by_another_worker(
    make_storage: Factory,
) -> None:
    # The execution item holds no step list: a worker that did not start the execution
    # reads its spec's (the FS# item) and claims, advances and lists from it.
    starter, other = make_storage(), make_storage()
    new = make_execution(make_spec({"a": [], "b": ["a"], "c": ["a", "b"]}))
    starter.start_execution(new, now=T0)
    assert "sp" not in _raw_execution(other, new.id)
    (a,) = other.claim("w", ["default"], 10, LEASE, now=T0 + 1)
    assert other.finish([complete_end(a.ref)], now=T0 + 2) == [True]
    assert states(other, new.id) == {"a": S.SUCCEEDED, "b": S.QUEUED, "c": S.PENDING}
    steps = other.list_steps(new.id)
    assert [(r.step_id, r.depends_on) for r in steps] == [
        ("a", ()),
        ("b", ("a",)),
        ("c", ("a", "b")),
    ]
    assert [r.id for r in other.list_executions()] == [new.id]


def test_an_execution_item_does_not_grow_with_its_declared_steps(make_storage: Factory) -> None:
    # DynamoDB bills each write of the execution item (one per batch of step ends) by the
    # item's whole size: with the step list kept in the spec, a 400-step fan-out's item is
    # about the size of a 4-step one's (it held 2 KB more with the list).
    s = make_storage()
    sizes = []
    for width in (4, 400):
        spec = make_spec({"root": [], **{f"s{i:04d}": ["root"] for i in range(width)}})
        new = make_execution(spec)
        s.start_execution(new, now=T0)
        sizes.append(len(repr(_raw_execution(s, new.id))))
    assert sizes[1] < sizes[0] + 200, sizes
