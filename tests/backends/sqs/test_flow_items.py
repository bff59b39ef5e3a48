"""The pure fold of the SQS flows (``backends.sqs.flow_items``): claims and step-end
events not yet folded are judged per step in attempt order, by ``decide``."""

from __future__ import annotations

from typing import Any

from backends.sqs.flow_items import (
    Exec,
    blob_jobs,
    cells_text,
    event_sk,
    exec_item,
    fold,
    jobs_blob,
)
from queue_core.flows import decide
from queue_core.flows.model import ExecutionState, StepState
from queue_core.testing.suite._flows_base import make_execution, make_spec

_S = StepState


def _running_exec(graph: dict[str, list[str]]) -> Exec:
    new = make_execution(make_spec(graph))
    item = exec_item("p#", new, 1, 0)
    x = Exec(item)
    f = fold(x, [], 0, lambda v: decide.start(v, 0))
    item.update(st=f.view.state.value, ss=cells_text(f.cells))
    return Exec(item)


def _event(idx: int, attempt: int, state: StepState, queued: bool = False) -> dict[str, Any]:
    return {"sk": event_sk(idx, attempt, queued), "i": idx, "n": attempt, "st": state.value}


def test_a_retry_claimed_again_before_any_advance_is_running() -> None:
    x = _running_exec({"a": [], "b": ["a"]})
    x.item["r"] = {"0": 2}  # attempt 2 claimed after attempt 1 ended queued (a retry)
    f = fold(x, [_event(0, 1, _S.QUEUED)], 5)
    assert [c[0] for c in f.cells] == [_S.RUNNING, _S.PENDING]
    assert f.ops(x.cells) == []


def test_an_end_after_its_claim_releases_the_dependents() -> None:
    x = _running_exec({"a": [], "b": ["a"]})
    x.item["r"] = {"0": 1}
    f = fold(x, [_event(0, 1, _S.SUCCEEDED)], 5)
    assert [c[0] for c in f.cells] == [_S.SUCCEEDED, _S.QUEUED]
    assert f.ops(x.cells) == [["rel", 1]]


def test_a_step_claimed_while_a_sibling_died_is_not_marked_not_run() -> None:
    x = _running_exec({"a": [], "b": [], "c": ["a", "b"]})
    x.item["r"] = {"1": 1}  # b started; a's death arrives in the same fold
    f = fold(x, [_event(0, 1, _S.DEAD)], 5)
    assert [c[0] for c in f.cells] == [_S.DEAD, _S.RUNNING, _S.NOT_RUN]
    assert f.view.state is ExecutionState.RUNNING and f.view.failed_step == "a"
    assert f.ops(x.cells) == []  # c never had a job; b keeps running


def test_job_parts_round_trip_bytes() -> None:
    items = [{"id": "e.0", "pl": b"\x00\xff", "pr": 3, "opt": None}]
    assert blob_jobs(jobs_blob(items)) == items
