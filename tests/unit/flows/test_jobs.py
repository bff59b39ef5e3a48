"""Step jobs are computed once by the core: options merged queue defaults → flow → step."""

from __future__ import annotations

import json

from queue_core.app.steps.jobs import SCRIPT_TASK, build_execution, step_job
from queue_core.rules import RetryPolicy
from queue_core.rules.flows.spec import FlowSpec, StepSpec


def _spec() -> FlowSpec:
    return FlowSpec(
        name="f",
        queue="flows",
        retry={"max_attempts": 3, "initial": 2.0},
        steps=(
            StepSpec(id="a", kind="code", task="m.a"),
            StepSpec(
                id="b",
                kind="code",
                task="m.b",
                depends_on=("a",),
                retry={"max_attempts": 1},
                timeout_ms=0,
                queue="own",
                priority=5,
                isolation="process",
            ),
            StepSpec(
                id="c",
                kind="script",
                file="/bin/true",
                depends_on=("a",),
                timeout_ms=1500,
                kill_grace_ms=2000,
            ),
        ),
    )


def _job(idx: int, defaults: RetryPolicy | None = None):  # type: ignore[no-untyped-def]
    return step_job(
        _spec(),
        idx,
        execution_id="e1",
        payload=b"{}",
        queue_defaults=defaults,
        default_timeout_ms=300_000,
        rng=lambda: 0.5,
    )


def test_retry_merges_queue_then_flow_then_step() -> None:
    defaults = RetryPolicy(max_attempts=7, backoff="fixed")
    a, b = _job(0, defaults), _job(1, defaults)
    assert (a.max_attempts, b.max_attempts) == (3, 1)
    assert a.lost_delay_ms == 1900  # flow initial 2 s, queue fixed backoff, jitter 0.1 * 0.5
    assert json.loads(a.options or "{}") == {"policy": {"initial": 2.0, "max_attempts": 3}}
    assert json.loads(b.options or "{}") == {
        "isolation": "process",
        "policy": {"initial": 2.0, "max_attempts": 1},
    }


def test_ids_queue_timeout_and_script_task() -> None:
    a, b, c = _job(0), _job(1), _job(2)
    assert [(j.id, j.execution_id, j.step_id) for j in (a, b, c)] == [
        ("e1.0", "e1", "a"),
        ("e1.1", "e1", "b"),
        ("e1.2", "e1", "c"),
    ]
    assert [(j.queue, j.priority, j.timeout_ms) for j in (a, b, c)] == [
        ("flows", 0, 300_000),
        ("own", 5, None),
        ("flows", 0, 1500),
    ]
    assert (a.task_name, c.task_name) == ("m.a", SCRIPT_TASK)
    assert json.loads(c.options or "{}")["kill_grace"] == 2.0
    assert a.flow_deadline_at is None


def test_build_execution_keys_concurrency_by_flow_name() -> None:
    new = build_execution(
        _spec(),
        execution_id="e1",
        input=b"1",
        empty_payload=b"{}",
        queue_defaults=None,
        default_timeout_ms=None,
        rng=lambda: 0.0,
    )
    assert [j.id for j in new.jobs] == ["e1.0", "e1.1", "e1.2"]
    assert new.conc_key is None and new.flow == "f"
    assert [s.depends_on for s in new.steps] == [(), ("a",), ("a",)]
