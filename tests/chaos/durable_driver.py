"""The chaos drain with flows and durable workflows, under SIGKILLs and server faults.

:func:`run_durable_chaos` starts ``flows`` diamond executions and ``workflows`` executions
of :mod:`tests.chaos.durable_app`'s workflow, runs ``workers`` ``queue-core worker``
processes and every 1-3 s (seeded) SIGKILLs one and starts a replacement, until every
execution has ended. Meanwhile it answers each workflow's ``wait_for_event`` from this
process once storage shows the wait open, and (``fault``) restarts the storage server
``restarts`` times, spread over the drain. Then it judges, from storage and the side
channels of body starts and ends:

* every execution ended ``succeeded`` with the result its input fixes (none stuck, none
  failed by a kill or a fault); the flows as :func:`tests.chaos.flows_driver.check_flows`
  says;
* a workflow's function step: attempts numbered 1..n, every one but the last ``lost`` or
  ``suspended``, the last ``succeeded``; it was suspended for a sleep, an event and its
  children; and suspended attempts, and attempts failed by a storage fault (a server
  restart), spent none (its job's attempt budget grew by one for each, so
  ``max_attempts - suspended - storage-faulted`` is the declared 30) -- plus at most
  ``MAX_HELD_REFUNDS`` of its ``lost`` attempts, reaped while held ahead of a free slot
  by a killed worker (SPEC §8: they spent none either);
* each memoized step's body completed at least once, never twice in one attempt, and at
  most once in an attempt that was not ``lost`` (the memo is stored once, with the lease:
  a re-run is explained only by an attempt that died or was reaped before its memo);
* each child job as a flow step: attempts 1..k, earlier ones ``lost``, every body start a
  recorded attempt, duplicates explained by ``lost`` attempts;
* nothing left: no running job, a reaper pass finds nothing, no dead letter.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from queue_core import Outcome, Queue, StorageError
from queue_core.flows import ExecutionState, StepRun, StepState
from queue_core.records.jobs import JobRecord
from queue_core.rules.outcomes import MAX_HELD_REFUNDS
from tests.chaos.driver import Workers, busy_pids, drive
from tests.chaos.durable_app import (
    CHILDREN,
    EVENT,
    MAX_ATTEMPTS,
    STEPS,
    declare_all,
    event_data,
    expected_workflow,
)
from tests.chaos.flows_driver import FlowChaosReport, _check_step, check_flows, storage_fault

APP = "tests.chaos.durable_app:queue"
_OPEN = (ExecutionState.QUEUED, ExecutionState.RUNNING, ExecutionState.WAITING)
_SUSPENDED_FOR = {"sleep", "event", "children"}


@dataclass
class DurableChaosReport:
    """What one drain with flows and workflows did and what the check found."""

    backend: str
    fault: str  # what was done to it: "SIGKILL" or "SIGKILL + <server fault>"
    flows: int
    workflows: int
    kills: int = 0
    restarts: int = 0
    seconds: float = 0.0
    starts: int = 0  # body starts: flow steps, memoized workflow steps, child jobs
    lost_attempts: int = 0  # flow steps, workflow functions and children
    suspended: int = 0  # suspended attempts of workflow functions (each spent none)
    reruns: int = 0  # bodies that ran again (flow steps and children started again, memoized
    # steps completed again), each explained by a lost attempt
    events: int = 0  # events sent that woke a waiter
    fault_failed: int = 0  # function attempts failed by a storage error (spent one each)
    stuck: int = 0  # executions not ended when the drain stopped
    wrong: int = 0  # executions ended in another state or with another result
    # kills that cut a body mid-run, by kind: workflow step / child job / flow step
    cut: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def row(self) -> str:
        return (
            f"| {self.backend} | {self.fault} | {self.flows} | {self.workflows} | "
            f"{self.kills} | {self.cut['step']} / {self.cut['child']} / {self.cut['flow']} | "
            f"{self.restarts} | {self.starts:,} | {self.lost_attempts} | "
            f"{self.suspended} | {self.fault_failed} | {self.reruns} | {self.events} | "
            f"{self.stuck} | "
            f"{self.wrong} | {len(self.violations)} | {self.seconds:.0f} s |"
        )


TABLE_HEADER = (
    "| backend | faults | flows | workflows | kills | kills mid-body (wf step / child / "
    "flow step) | server faults | body starts "
    "| attempts lost | suspended (spent 0) | failed by storage error (spent 0) "
    "| bodies re-run (all explained) | events sent | stuck | wrong end | violations | drain |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def durable_table(reports: Sequence[DurableChaosReport]) -> str:
    """The Markdown table of several reports."""
    return "\n".join([TABLE_HEADER, *(r.row() for r in reports)])


@dataclass
class Target:
    """Where a drain runs: how this process opens the storage, and the workers' env."""

    url: str  # QUEUE_CORE_URL of the workers ("memory://" on the served memory storage)
    open: Callable[[], Queue]
    env: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- the drain


FAULT_EVERY_S = 2.0
"""The longest wait, from the drain's start, for each server fault (see _Progress)."""


class _Progress:
    """The open executions, the events still to send, and the faults still to inject,
    advanced once per poll of :func:`tests.chaos.driver.drive`."""

    def __init__(
        self,
        q: Queue,
        flows: dict[str, int],
        workflows: dict[str, int],
        report: DurableChaosReport,
        fault: Callable[[], None] | None,
        restarts: int,
    ) -> None:
        self.q = q
        self.open_flows = list(flows)
        self.open_wfs = list(workflows)
        self.workflows = workflows
        self.total = len(flows) + len(workflows)
        self.unanswered = dict(workflows)
        self.report = report
        self.fault = fault
        self.restarts = restarts
        self.left = self.total
        self.next_events = 0.0
        self.t0: float | None = None

    def __call__(self) -> int:
        if self.t0 is None:
            self.t0 = time.monotonic()
        try:
            if time.monotonic() >= self.next_events:
                self._answer()
                self.next_events = time.monotonic() + 0.3
            _drop_ended(self.q, self.open_flows)
            _drop_ended(self.q, self.open_wfs)
            self.left = len(self.open_flows) + len(self.open_wfs)
        except StorageError:
            pass  # the server is down or just came back: try again at the next poll
        done = self.report.restarts
        if self.fault is not None and done < self.restarts and self.left > 0:  # mid-drain
            # due when its share of the executions ended, or its share of FAULT_EVERY_S
            # passed: only the ended prefix is counted, and one execution stalled by a
            # kill (its lease running out) once held it until all ended at once
            share = (done + 1) / (self.restarts + 1)
            ended = self.total - self.left >= self.total * share
            if ended or time.monotonic() - self.t0 >= FAULT_EVERY_S * (done + 1):
                self.fault()
                self.report.restarts += 1
        return self.left

    def _answer(self) -> None:
        """Send the event of each workflow whose wait storage shows open (a send before
        the wait began would not count: SPEC §12)."""
        for ex_id, n in list(self.unanswered.items()):
            handle = self.q.execution(ex_id)
            if handle.status() is not ExecutionState.WAITING:
                continue
            if not any(h.kind == "wait" and h.state == "waiting" for h in handle.history()):
                continue
            if self.q.send_event(EVENT, key=str(n), data=event_data(n)) >= 1:
                del self.unanswered[ex_id]
                self.report.events += 1


def _drop_ended(q: Queue, open_ids: list[str]) -> None:
    """Drop ended executions from the front until one is open (a read per poll, not one
    per execution)."""
    while open_ids and q.execution(open_ids[0]).status() not in _OPEN:
        open_ids.pop(0)


def run_durable_chaos(
    target: Target,
    backend: str,
    flows: int,
    workflows: int,
    folder: Path,
    *,
    fault: Callable[[], None] | None = None,
    fault_name: str = "",
    restarts: int = 0,
    workers: int = 3,
    kill_every: tuple[float, float] = (1.0, 3.0),
    lease: float = 2.0,
    seed: int = 19,
    timeout: float = 600.0,
) -> DurableChaosReport:
    """Run the drain (see the module docstring); return the checked report."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    name = "SIGKILL" + (f" + {fault_name}" if fault is not None else "")
    report = DurableChaosReport(backend, name, flows, workflows)
    q = target.open()
    try:
        q.migrate()
        flow, workflow = declare_all(q)
        started_flows = {flow.start({"n": n}).id: n for n in range(flows)}
        started_wfs = {workflow.start(n).id: n for n in range(workflows)}
        pool = Workers(target.url, folder, workers, lease, 2, app=APP, env=target.env)
        progress = _Progress(q, started_flows, started_wfs, report, fault, restarts)
        run = drive(
            pool,
            rng,
            progress,
            kill_every=kill_every,
            timeout=timeout,
            poll=0.2,
            busy=busy_pids(q),
        )
        report.kills, report.seconds = run.kills, run.seconds
        report.cut = cut_bodies(folder, pool.killed)
        report.violations.extend(run.crashes)
        if fault is not None and report.restarts < restarts:
            report.violations.append(f"{report.restarts} of {restarts} restarts done")
        q.close()
        q = target.open()  # a fresh connection: the old one may have died with the server
        declare_all(q)
        check_durable(q, started_flows, started_wfs, folder, report)
    finally:
        q.close()
    return report


def cut_bodies(folder: Path, killed: Sequence[int]) -> Counter[str]:
    """How many of the ``killed`` worker pids died with a body started and not ended, by
    kind: ``step`` (a workflow's memoized step), ``child`` (a child job), ``flow`` (a flow
    step); a kill that cut several kinds counts in each."""
    out: Counter[str] = Counter()
    for pid in killed:
        kinds = set()
        for prefix in ("wf", "flow"):
            path = folder / f"{prefix}-{pid}.log"
            running: Counter[tuple[str, str, str]] = Counter()
            for line in path.read_text().splitlines() if path.exists() else []:
                kind, ex, step, attempt, _pid = line.split()
                running[(ex, step, attempt)] += 1 if kind == "S" else -1
            for (_ex, step, _attempt), n in running.items():
                if n > 0:
                    kinds.add("flow" if prefix == "flow" else _kind_of(step))
        out.update(kinds)
    return out


def _kind_of(step: str) -> str:
    return "child" if step.startswith("child-") else "step"


# --------------------------------------------------------------------------- the check


def _bodies(folder: Path) -> tuple[dict[tuple[str, str], list[int]], ...]:
    """Body starts and ends per (execution, step): the attempt numbers, in log order."""
    starts: dict[tuple[str, str], list[int]] = defaultdict(list)
    ends: dict[tuple[str, str], list[int]] = defaultdict(list)
    for path in folder.glob("wf-*.log"):
        for line in path.read_text().splitlines():
            kind, ex, step, attempt, _pid = line.split()
            (starts if kind == "S" else ends)[(ex, step)].append(int(attempt))
    return starts, ends


def check_durable(
    q: Queue,
    flows: dict[str, int],
    workflows: dict[str, int],
    folder: Path,
    report: DurableChaosReport,
) -> None:
    """Judge the drain (see the module docstring); fill ``report``."""
    part = FlowChaosReport(report.backend, len(flows))
    check_flows(q, flows, folder, part)
    report.wrong += sum(" ended " in v or ": result " in v for v in part.violations)
    starts, ends = _bodies(folder)
    for ex_id, n in workflows.items():
        _check_workflow(q, ex_id, n, starts, ends, report, part)
    report.starts += part.steps_run
    report.lost_attempts += part.lost_attempts
    report.fault_failed += part.fault_failed
    report.reruns += part.duplicates
    report.violations.extend(part.violations)
    _check_nothing_left(q, report)


def _check_workflow(
    q: Queue,
    ex_id: str,
    n: int,
    starts: dict[tuple[str, str], list[int]],
    ends: dict[tuple[str, str], list[int]],
    report: DurableChaosReport,
    part: FlowChaosReport,
) -> None:
    v = report.violations
    handle = q.execution(ex_id)
    state = handle.status()
    if state is not ExecutionState.SUCCEEDED:
        report.wrong += 1
        report.stuck += state in _OPEN
        v.append(f"workflow {ex_id} (n={n}) ended {state.value}")
        return
    result = handle.result(timeout=5)
    if result != expected_workflow(n):
        report.wrong += 1
        v.append(f"workflow {ex_id}: result {result!r} != {expected_workflow(n)!r}")
    main, *kids = handle.steps()
    job = q.storage().get_job(main.job_id) if main.job_id else None
    outcomes = _check_function(ex_id, main, job, report)
    for step in STEPS:
        _check_memo_step(ex_id, step, outcomes, starts[(ex_id, step)], ends[(ex_id, step)], report)
    if len(kids) != CHILDREN:
        v.append(f"workflow {ex_id}: children {[k.step_id for k in kids]}")
    for k, kid in enumerate(kids):
        _check_step(ex_id, f"child-{k}", kid, starts[(ex_id, f"child-{k}")], part)


def _check_function(
    ex_id: str, main: StepRun, job: JobRecord | None, report: DurableChaosReport
) -> dict[int, Outcome]:
    """The function step ``main`` (its job ``job``); returns each attempt's outcome by
    number, an attempt failed by a storage error counted as ``lost``."""
    v = report.violations
    where = f"workflow {ex_id} function"
    if main.step_id != "main" or main.state is not StepState.SUCCEEDED:
        v.append(f"{where}: step {main.step_id} {main.state.value}")
    attempts = main.attempts
    numbers = [a.number for a in attempts]
    if numbers != list(range(1, len(numbers) + 1)):
        v.append(f"{where}: attempts numbered {numbers}")
    if not attempts or attempts[-1].outcome is not Outcome.SUCCEEDED:
        v.append(f"{where}: last attempt {[a.outcome for a in attempts[-1:]]}")
    earlier = Counter(a.outcome for a in attempts[:-1])
    faulted = [a for a in attempts[:-1] if a.outcome is Outcome.FAILED and storage_fault(a)]
    other = [
        (a.number, a.outcome, a.error_class)
        for a in attempts[:-1]
        if a.outcome not in (Outcome.LOST, Outcome.SUSPENDED) and a not in faulted
    ]
    if other:
        v.append(f"{where}: earlier attempts {other} (only lost/suspended expected)")
    report.fault_failed += len(faulted)
    suspended = earlier[Outcome.SUSPENDED]
    reasons = {str(a.reason) for a in attempts if a.outcome is Outcome.SUSPENDED}
    if not _SUSPENDED_FOR <= reasons:
        v.append(f"{where}: suspended for {sorted(reasons)}, expected {sorted(_SUSPENDED_FOR)}")
    if job is None or job.attempts != len(attempts):
        v.append(f"{where}: job {job and job.attempts} attempts, {len(attempts)} recorded")
    elif (
        not 0
        <= job.max_attempts - suspended - len(faulted) - MAX_ATTEMPTS
        <= min(MAX_HELD_REFUNDS, earlier[Outcome.LOST])
    ):
        # suspended attempts and attempts failed by a storage fault spend none, nor do
        # lost ones reaped while held ahead of a slot (rules.outcomes.reap_verdict, bounded)
        v.append(
            f"{where}: {suspended} suspended, {len(faulted)} storage-fault and "
            f"{earlier[Outcome.LOST]} lost attempts, budget {job.max_attempts}: they spent "
            f"{MAX_ATTEMPTS + suspended + len(faulted) - job.max_attempts}"
        )
    report.suspended += suspended
    report.lost_attempts += earlier[Outcome.LOST]
    return {
        a.number: Outcome.LOST if a in faulted else a.outcome
        for a in attempts
        if a.outcome is not None
    }


def _check_memo_step(
    ex_id: str,
    step: str,
    outcomes: dict[int, Outcome],
    started: list[int],
    ended: list[int],
    report: DurableChaosReport,
) -> None:
    v = report.violations
    where = f"workflow {ex_id} step {step}"
    report.starts += len(started)
    if not ended:
        v.append(f"{where}: its body never completed (started in {started})")
        return
    if len(set(ended)) != len(ended):
        v.append(f"{where}: the body completed twice in one attempt {ended}")
    if not set(started) <= set(outcomes):
        v.append(f"{where}: body starts {started} outside the attempts {sorted(outcomes)}")
    kept = [a for a in ended if outcomes.get(a) is not Outcome.LOST]
    if len(kept) > 1:
        v.append(
            f"{where}: completed in attempts {kept} that were not lost (memo not kept: "
            f"{[(a, outcomes.get(a)) for a in ended]})"
        )
    report.reruns += len(ended) - 1


def _check_nothing_left(q: Queue, report: DurableChaosReport) -> None:
    storage = q.storage()
    running = sum(s.running for s in storage.stats())
    if running:
        report.violations.append(f"{running} jobs still count as running (leaked leases)")
    reaped = storage.reap(limit=1000)
    if reaped:
        report.violations.append(f"a reaper pass after the drain found {len(reaped)} attempts")
    dead = storage.list_dead(100, 0, None)
    if dead:
        reasons = Counter(str(d.reason) for d in dead)
        report.violations.append(f"{len(dead)} dead letters: {dict(reasons)}")
