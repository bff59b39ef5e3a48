"""``memory://`` is parts composed on one store (issue 22): few backend-owned classes in
``MemoryStorage``'s MRO, a flows part built on first use (a storage that never runs a flow
loads no flow module), and flow step ends applied from the core's plan -- a wide
execution's step ends take the plan's fast path instead of judging every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from backends.memory import MemoryStorage
from queue_core.records.flows import ExecutionState, StepState
from queue_core.rules.flows import decide
from queue_core.storage.flows import NewExecution
from queue_core.testing import SEC, T0
from queue_core.testing.fixtures import complete_end, dead_end
from queue_core.testing.suite._flows_base import claim_steps, make_execution, make_spec, states

ROOT = Path(__file__).resolve().parents[3]


def test_memory_storage_is_composed_of_parts_not_a_mixin_tower() -> None:
    owned = [k for k in MemoryStorage.__mro__ if k.__module__.startswith("backends")]
    assert len(owned) <= 3, owned
    storage = MemoryStorage()
    assert storage.jobs.store is storage.store is storage.claiming.store


_PLAIN_JOB = """
import json, sys
from backends.memory import MemoryStorage
from queue_core.records.jobs import Action, AttemptEnd, Decision, NewJob, Outcome
s = MemoryStorage()
s.enqueue([NewJob(id="j", task_name="t", queue="q", payload=b"[]")], now=1_000)
(c,) = s.claim("w", ["q"], 1, 30_000, now=1_000)
end = AttemptEnd(ref=c.ref, outcome=Outcome.SUCCEEDED, decision=Decision(action=Action.COMPLETE))
assert s.finish([end], now=1_001) == [True]
s.reap(now=1_002)
s.prune(now=1_003)
flow_modules = [m for m in sys.modules if m.startswith(("queue_core.rules.flows",
                "queue_core.storage.flows", "backends.memory.flows"))]
print(json.dumps([sorted(flow_modules), "flows" in vars(s)]))
"""


def test_a_storage_that_runs_no_flow_loads_no_flow_module() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _PLAIN_JOB],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [[], False]


def _fan_out(width: int) -> NewExecution:
    graph: dict[str, list[str]] = {"root": []}
    mids = [f"s{i}" for i in range(width)]
    graph.update({m: ["root"] for m in mids})
    graph["join"] = mids
    return make_execution(make_spec(graph))


def _full_decisions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the step id of every step end judged on the whole execution."""
    judged: list[str] = []
    step_ended = decide.step_ended

    def counted(view: decide.ExecutionView, step_id: str, *a: Any) -> decide.Transition:
        judged.append(step_id)
        return step_ended(view, step_id, *a)

    monkeypatch.setattr(decide, "step_ended", counted)
    return judged


def test_a_wide_fan_out_ends_every_step_without_judging_the_whole_execution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = MemoryStorage()
    new = _fan_out(100)
    storage.start_execution(new, now=T0)
    judged = _full_decisions(monkeypatch)
    t, done = T0, 0
    while got := claim_steps(storage, t + SEC, limit=32):
        t += SEC
        ends = [complete_end(c.ref) for c in got.values()]
        assert storage.finish(ends, now=t) == [True] * len(ends)
        done += len(got)
    assert done == 102
    assert judged == []
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.SUCCEEDED
    assert set(states(storage, new.id).values()) == {StepState.SUCCEEDED}


def test_a_small_execution_checks_each_fast_step_end_against_the_full_decision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Memory stays an independent reference: each fast decision of a small execution is
    also judged on the whole execution (and must be equal); a failure is judged whole."""
    storage = MemoryStorage()
    new = _fan_out(3)
    storage.start_execution(new, now=T0)
    judged = _full_decisions(monkeypatch)
    (root,) = claim_steps(storage, T0 + SEC).values()
    assert storage.finish([complete_end(root.ref)], now=T0 + SEC) == [True]
    mids = claim_steps(storage, T0 + 2 * SEC)
    assert storage.finish([dead_end(mids["s0"].ref)], now=T0 + 2 * SEC) == [True]
    assert judged == ["root", "s0"]
    assert states(storage, new.id)["join"] is StepState.NOT_RUN
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.RUNNING
    assert record.failed_step == "s0"
