"""queue_core.rules.flows.dag and .model: graph refusals, order, and the stored JSON form."""

from __future__ import annotations

import json

import pytest

from queue_core.records.errors import ConfigError
from queue_core.records.flows import (
    ExecutionInfo,
    ExecutionReason,
    ExecutionState,
    StepRun,
    StepState,
)
from queue_core.records.jobs import dt_from_ms
from queue_core.rules import RetryPolicy
from queue_core.rules.flows import dag
from queue_core.rules.flows.spec import ConcurrencySpec, FlowSpec, StepSpec

N = dag.Node


@pytest.mark.parametrize(
    ("nodes", "path", "words"),
    [
        ([], "steps", "at least one step"),
        ([N("a"), N("b"), N("a")], "steps[2].id", "duplicate step id 'a' (first used by steps[0])"),
        ([N("")], "steps[0].id", "invalid step id ''"),
        ([N("-x")], "steps[0].id", "invalid step id"),
        ([N("a b")], "steps[0].id", "invalid step id"),
        ([N("a"), N("b", ("a", "zz"))], "steps[1].depends_on[1]", "unknown step id 'zz'"),
        ([N("a", ("a",))], "steps[0].depends_on[0]", "depends on itself"),
        ([N("a"), N("b", ("a", "a"))], "steps[1].depends_on[1]", "listed twice"),
        ([N("input"), N("load", ("input",))], "steps[1].depends_on[0]",
         "'input' is the parameter of the execution input"),
        ([N("ctx"), N("load", ("ctx",))], "steps[1].depends_on[0]",
         "'ctx' is the parameter of the job context"),
        (
            [N("a", ("c",)), N("b", ("a",)), N("c", ("b",)), N("d")],
            "steps[0].depends_on[0]",
            "dependency cycle: a -> c -> b -> a",
        ),
        (
            [N("x"), N("p", ("x", "q")), N("q", ("p",))],
            "steps[1].depends_on[1]",
            "dependency cycle: p -> q -> p",
        ),
    ],
)
def test_validate_refusals(nodes: list[dag.Node], path: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        dag.validate(nodes)
    assert info.value.code == "invalid_flow"
    assert info.value.field == path
    assert str(info.value).startswith(path + ": ")
    assert words in str(info.value)


def _grown_refusal(nodes: list[dag.Node]) -> str | None:
    """What ``check_next`` says of each node added in turn, the first refusal."""
    seen: dict[str, int] = {}
    for node in nodes:
        try:
            dag.check_next(node, seen)
        except ConfigError as exc:
            return f"{exc.field}|{exc}"
        seen[node.id] = len(seen)
    return None


@pytest.mark.parametrize(
    "nodes",
    [
        [N("a"), N("b"), N("a")],
        [N("a"), N("-x")],
        [N("a"), N("b", ("a", "zz"))],
        [N("a"), N("b", ("b",))],
        [N("a"), N("b", ("a", "a"))],
        [N("input"), N("load", ("input",))],
        [N("ctx"), N("load", ("ctx",))],
        [N("a"), N("b", ("a",)), N("c", ("b", "a")), N("d", ("c", "e"))],
        [N("a"), N("b", ("a",)), N("c", ("a", "b"))],
    ],
)
def test_a_flow_grown_step_by_step_is_refused_as_validate_refuses_it(
    nodes: list[dag.Node],
) -> None:
    # ``Flow.step`` checks each step as it is added (a 1,000-step flow in linear time);
    # the refusal must be the one the whole definition gets, path and words alike
    try:
        dag.validate(nodes)
        whole = None
    except ConfigError as exc:
        whole = f"{exc.field}|{exc}"
    assert _grown_refusal(nodes) == whole


def test_script_steps_may_depend_on_ids_that_are_not_identifiers() -> None:
    dag.validate([N("extract-orders"), N("load", ("extract-orders",), results_as_parameters=False)])


@pytest.mark.parametrize("dep", ["fetch-users", "class", "v1.2"])
def test_any_step_may_depend_on_an_id_no_parameter_can_take(dep: str) -> None:
    # SPEC §7: only an id a step takes as a parameter must be an identifier; these can
    # never be a parameter's name, so a dependent just does not receive them by name
    dag.validate([N(dep), N("report", (dep,))])


def test_collection_name_is_used_in_paths() -> None:
    with pytest.raises(ConfigError, match=r"^tasks\[1\]\.depends_on\[0\]: unknown"):
        dag.validate([N("a"), N("b", ("nope",))], collection="tasks")


def test_find_cycle_and_order() -> None:
    assert dag.find_cycle([N("a"), N("b", ("a",))]) is None
    assert dag.find_cycle([N("a", ("b",)), N("b", ("a",))]) == ["a", "b", "a"]
    nodes = [N("d", ("b", "c")), N("c", ("a",)), N("b", ("a",)), N("a"), N("e")]
    # among ready steps the earliest defined goes first
    assert dag.topological_order(nodes) == ["a", "c", "b", "d", "e"]
    assert dag.dependents(nodes) == {"d": (), "c": ("d",), "b": ("d",), "a": ("c", "b"), "e": ()}
    with pytest.raises(ConfigError, match="cycle: a -> b -> a"):
        dag.topological_order([N("a", ("b",)), N("b", ("a",))])


# --------------------------------------------------------------------------- model


def spec() -> FlowSpec:
    return FlowSpec(
        name="sync-orders",
        concurrency=ConcurrencySpec(1, "queue"),
        max_parallel=4,
        timeout_ms=7_200_000,
        retry={"max_attempts": 3, "backoff": "exponential", "initial": "30s", "max_delay": "10m"},
        queue="etl",
        steps=(
            StepSpec(id="extract", kind="code", task="app.extract", timeout_ms=1_800_000),
            StepSpec(
                id="load", kind="code", task="app.load", depends_on=("extract",),
                retry={"max_attempts": 1}, isolation="process", retry_on=("builtins.OSError",),
            ),
            StepSpec(id="report", kind="script", file="/srv/report.sh", depends_on=("load",)),
        ),
    )


def test_json_round_trip_is_stable_and_lossless() -> None:
    s = spec()
    text = s.to_json()
    assert FlowSpec.from_json(text) == s
    assert FlowSpec.from_json(text.encode()).to_json() == text
    data = json.loads(text)
    assert data["format"] == 1
    assert list(data) == sorted(data)  # sorted keys: equal specs give equal text
    assert data["retry"] == {
        "backoff": "exponential", "initial": 30.0, "max_attempts": 3, "max_delay": 600.0
    }
    assert " " not in text.replace("sync-orders", "")


def test_step_policy_merges_queue_flow_step_field_by_field() -> None:
    s = spec()
    queue_defaults = RetryPolicy(max_attempts=5, jitter=0.0, coefficient=3.0)
    load = s.step_policy("load", queue_defaults)
    assert (load.max_attempts, load.initial, load.coefficient, load.jitter) == (1, 30.0, 3.0, 0.0)
    extract = s.step_policy("extract", queue_defaults)
    assert extract.max_attempts == 3
    assert s.order() == ["extract", "load", "report"]


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.update(format=2), "format"),
        (lambda d: d.update(color="red"), "color"),
        (lambda d: d.update(max_parallel=-1), "max_parallel"),
        (lambda d: d.update(timeout_ms=0), "timeout_ms"),
        (lambda d: d.update(retry={"max_attempts": 0}), "retry.max_attempts"),
        (lambda d: d.update(concurrency={"limit": 1, "behavior": "drop"}), "concurrency.behavior"),
        (lambda d: d["steps"][0].update(kind="docker"), "steps[0].kind"),
        (lambda d: d["steps"][0].update(extra=1), "steps[0].extra"),
        (lambda d: d["steps"][2].update(file=None), "steps[2].file"),
        (lambda d: d["steps"][1].update(depends_on=["ghost"]), "steps[1].depends_on[0]"),
        (lambda d: d["steps"][1].update(timeout_ms=-5), "steps[1].timeout_ms"),
    ],
)
def test_from_json_refuses_bad_definitions(mutate: object, path: str) -> None:
    data = spec().to_dict()
    mutate(data)  # type: ignore[operator]
    with pytest.raises(ConfigError) as info:
        FlowSpec.from_json(json.dumps(data))
    assert info.value.code == "invalid_flow"
    assert info.value.field == path


def test_from_json_refuses_text_that_is_not_json() -> None:
    with pytest.raises(ConfigError, match="not JSON") as info:
        FlowSpec.from_json("{nope")
    assert info.value.code == "invalid_flow"


def test_states_reasons_and_records() -> None:
    assert [s.value for s in ExecutionState] == [
        "queued", "running", "waiting", "cancelling", "succeeded", "failed", "timed_out",
        "cancelled", "skipped",
    ]
    assert [s.value for s in StepState] == [
        "pending", "queued", "running", "succeeded", "dead", "cancelled", "skipped",
        "timed_out", "not_run",
    ]
    assert [r.value for r in ExecutionReason] == [
        "step_failed", "flow_timeout", "cancelled", "concurrency_limit", "superseded",
    ]
    assert {s for s in ExecutionState if not s.finished} == {
        ExecutionState.QUEUED, ExecutionState.RUNNING, ExecutionState.WAITING,
        ExecutionState.CANCELLING,
    }
    assert {s for s in StepState if not s.finished} == {
        StepState.PENDING, StepState.QUEUED, StepState.RUNNING
    }
    info = ExecutionInfo(
        id="e1", flow="sync-orders", state=ExecutionState.FAILED,
        reason=ExecutionReason.STEP_FAILED, created_at=dt_from_ms(0),  # type: ignore[arg-type]
        started_at=dt_from_ms(1000), finished_at=None,
    )
    assert list(info) == ["id", "flow", "state", "reason", "created_at", "started_at",
                          "finished_at"]
    assert info.to_dict()["state"] == "failed" and info["reason"] == "step_failed"
    assert info.to_dict()["started_at"] == "1970-01-01T00:00:01+00:00"
    run = StepRun(step_id="load", state=StepState.NOT_RUN, reason="step_failed", job_id=None)
    assert list(run) == ["step_id", "state", "reason", "job_id", "attempts"]
    assert run.attempts == []
