"""The check of the diamond flows the chaos drain runs (the drain itself, with flows and
durable workflows together, is :mod:`tests.chaos.durable_driver`).

The drain starts executions of :data:`tests.chaos.flows_app.FLOW` (``a`` -> ``b``, ``c``
-> ``d``) while worker processes are SIGKILLed; then :func:`check_flows` judges, from
storage and the side channel of step-body starts and ends:

* every execution ended (none stalled) and ``succeeded`` with the expected result;
* every step ``succeeded`` with attempts numbered 1..k once each, all but the last
  ``lost`` (no other cause of failure exists in this flow), the last ``succeeded``;
* no step body ran twice for one attempt (a dependent released twice would start a
  second job for the step: the same attempt number twice), and every body start belongs
  to a recorded attempt;
* at-least-once duplicates (a step's body started more than once) are counted, and each
  is explained: every start but the succeeded attempt's is a ``lost`` attempt.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queue_core import Outcome, Queue
from queue_core.flows import ExecutionState, StepState
from queue_core.records.jobs import AttemptRecord
from tests.chaos.flows_app import STEPS, expected

APP = "tests.chaos.flows_app:queue"
_FINAL = {s for s in ExecutionState if s not in (ExecutionState.QUEUED, ExecutionState.RUNNING)}


@dataclass
class FlowChaosReport:
    """What one chaos drain with flows did and what the check found."""

    backend: str
    executions: int
    kills: int = 0
    seconds: float = 0.0
    steps_run: int = 0  # step-body starts
    lost_attempts: int = 0
    fault_failed: int = 0  # step attempts failed by a storage error (a server fault drain)
    duplicates: int = 0  # step-body starts beyond one per step (each from a lost attempt)
    stalled: int = 0  # executions not ended in time
    violations: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{self.backend}: {self.executions} executions, {self.kills} kills, "
            f"{self.steps_run} step starts, {self.lost_attempts} lost attempts, "
            f"{self.duplicates} duplicate starts, {self.stalled} stalled, "
            f"{len(self.violations)} violations, {self.seconds:.0f} s"
        )


def _starts(folder: Path) -> dict[tuple[str, str], list[int]]:
    """Body starts per (execution, step): the attempt numbers, in log order."""
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for path in folder.glob("flow-*.log"):
        for line in path.read_text().splitlines():
            kind, ex, step, attempt, _pid = line.split()
            if kind == "S":
                out[(ex, step)].append(int(attempt))
    return out


def storage_fault(attempt: AttemptRecord) -> bool:
    """Whether ``attempt`` failed with a storage error (the server was down): raised
    from the worker's own storage calls, not from the body's code."""
    return str(attempt.error_type or "").startswith("queue_core.records.errors.Storage")


def check_flows(q: Queue, started: dict[str, int], folder: Path, report: FlowChaosReport) -> None:
    """Judge the drain (see the module docstring); append violations to ``report``."""
    starts = _starts(folder)
    v = report.violations
    for ex_id, n in started.items():
        handle = q.execution(ex_id)
        state = handle.status()
        if state is not ExecutionState.SUCCEEDED:
            v.append(f"execution {ex_id} (n={n}) ended {state.value}")
            continue
        if handle.result(timeout=5) != expected(n):
            v.append(f"execution {ex_id}: result {handle.result(timeout=5)!r} != {expected(n)!r}")
        runs = {s.step_id: s for s in handle.steps()}
        if sorted(runs) != sorted(STEPS):
            v.append(f"execution {ex_id}: steps {sorted(runs)}")
            continue
        for step in STEPS:
            _check_step(ex_id, step, runs[step], starts.get((ex_id, step), []), report)


def _check_step(
    ex_id: str, step: str, run: Any, started: list[int], report: FlowChaosReport
) -> None:
    v = report.violations
    where = f"execution {ex_id} step {step}"
    if run.state is not StepState.SUCCEEDED:
        v.append(f"{where}: {run.state.value}")
        return
    numbers = [a.number for a in run.attempts]
    outcomes = [a.outcome for a in run.attempts]
    if numbers != list(range(1, len(numbers) + 1)):
        v.append(f"{where}: attempts numbered {numbers}")
    if not outcomes or outcomes[-1] is not Outcome.SUCCEEDED:
        v.append(f"{where}: last attempt {outcomes[-1:]}")
    faulted = {
        a.number for a in run.attempts[:-1] if a.outcome is Outcome.FAILED and storage_fault(a)
    }
    other = [
        (a.number, a.outcome, a.error_type)
        for a in run.attempts[:-1]
        if a.outcome is not Outcome.LOST and a.number not in faulted
    ]
    if other:
        v.append(f"{where}: earlier attempts {other} (only lost or storage-failed expected)")
    report.lost_attempts += sum(o is Outcome.LOST for o in outcomes)
    report.fault_failed += len(faulted)
    report.steps_run += len(started)
    if len(set(started)) != len(started):
        v.append(f"{where}: an attempt's body started twice {started} (released twice?)")
    if not set(started) <= set(numbers):
        v.append(f"{where}: body starts {started} outside the attempts {numbers}")
    if numbers and numbers[-1] not in started:
        v.append(f"{where}: the succeeded attempt {numbers[-1]} never started a body")
    extra = [a for a in started if a != (numbers[-1] if numbers else None)]
    report.duplicates += len(extra)
    lost = {a.number for a in run.attempts if a.outcome is Outcome.LOST} | faulted
    if not set(extra) <= lost:
        v.append(f"{where}: duplicate starts {extra} not explained by lost attempts {lost}")
