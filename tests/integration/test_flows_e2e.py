"""Flow acceptance (issue 10, SPEC §7) with real worker processes, once per backend.

Workers are the console script (``queue-core worker …``) running
:mod:`tests.integration.helpers.flows_app`; every step body logs its start and end to a
file, so "never 3 at once", "ran exactly once" and "oldest first" are read from what
actually ran, not from what storage says.

``FLOW_BACKENDS`` lists the backends that implement ``SupportsFlows``; the default run
takes ``sqlite``, the server backends' runs (minutes) are in the soak run (``nox -s
soak``), while the contract suite covers each backend's storage in the default run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from queue_core import ExecutionFailed, Outcome, Queue
from queue_core.flows import ExecutionReason, ExecutionState, StepState
from queue_core.flows.api import ExecutionHandle

# The facade tests of the memory backend (in-process burst worker: YAML script steps,
# cancel, ...) run here too on every flow backend, through this module's ``queue``.
from tests.flowfiles.test_yaml_flows import (
    test_a_script_exiting_non_zero_fails_with_exit_code,
    test_yaml_script_steps_run_with_results_on_stdin,
)
from tests.integration.helpers.flows_app import Flows, Run, declare, read_runs
from tests.unit.flows.test_flows_api import (
    test_a_step_without_retries_fails_the_execution,
    test_an_async_step_is_cancelled_at_the_flow_deadline,
    test_cancel_a_running_execution,
    test_concurrency_queue_and_skip_through_the_facade,
    test_diamond_passes_results_by_parameter_name,
    test_flow_retry_lets_a_flaky_step_succeed_on_attempt_three,
    test_max_parallel_holds_with_a_real_worker,
    test_the_worker_stops_a_step_at_the_flow_deadline,
)

__all__ = [
    "test_a_script_exiting_non_zero_fails_with_exit_code",
    "test_a_step_without_retries_fails_the_execution",
    "test_an_async_step_is_cancelled_at_the_flow_deadline",
    "test_cancel_a_running_execution",
    "test_concurrency_queue_and_skip_through_the_facade",
    "test_diamond_passes_results_by_parameter_name",
    "test_flow_retry_lets_a_flaky_step_succeed_on_attempt_three",
    "test_max_parallel_holds_with_a_real_worker",
    "test_the_worker_stops_a_step_at_the_flow_deadline",
    "test_yaml_script_steps_run_with_results_on_stdin",
]

FLOW_BACKENDS = [
    "sqlite",
    # the same tests again on the server backends take minutes: `nox -s soak` runs them (the
    # contract suite covers each backend's storage in the default run)
    pytest.param("postgresql", marks=pytest.mark.soak),
    pytest.param("redis", marks=pytest.mark.soak),
    pytest.param("redis_cluster", marks=pytest.mark.soak),
    pytest.param("sqs", marks=pytest.mark.soak),
]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.integration.helpers.flows_app:queue"
CLI = str(Path(sys.executable).parent / "queue-core")
REAP = 0.2
"""The workers' reap interval (seconds)."""
SLACK = 1.5
"""Seconds allowed beyond a bound for start-up and scheduling on a loaded 2-core box."""

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.parametrize("url", FLOW_BACKENDS, indirect=True),
]


@pytest.fixture
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty storage of the parametrized backend (real servers, a real file)."""
    backend = request.param
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    fixture = {
        "postgresql": "postgres_url",
        "redis": "redis_url",
        "redis_cluster": "redis_cluster_url",
        "sqs": "sqs_url",
    }[backend]
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def queue(url: str) -> Iterator[Queue]:
    """A queue on the parametrized backend, for the imported facade tests."""
    q = Queue(url)
    q.migrate()
    yield q
    q.close()


class Env:
    """One test's storage, its flows on a producer queue, the log and the workers."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url = url
        self.log = tmp / "steps.log"
        self.tmp = tmp
        self.queue = Queue(url)
        self.queue.migrate()
        self.flows: Flows = declare(self.queue)
        self.workers: list[subprocess.Popen[bytes]] = []

    def spawn(self, n: int = 1, *args: str, lease: float = 30.0) -> list[subprocess.Popen[bytes]]:
        """Start ``n`` long-running workers (stopped by the test or at clean-up) and wait
        until each has logged that it is starting (so a deadline the test measures does
        not include a worker's start-up)."""
        env = dict(
            os.environ,
            QUEUE_CORE_URL=self.url,
            QC_FLOW_LOG=str(self.log),
            QC_FLOW_LEASE=str(lease),
            PYTHONPATH=str(ROOT),
        )
        new = []
        for _ in range(n):
            k = len(self.workers)
            with open(self.tmp / f"worker{k}.err", "wb") as err:
                cmd = [CLI, "worker", APP, "--reap-interval", str(REAP), *args]
                p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
            self.workers.append(p)
            new.append(p)
        for p in new:
            err = self.tmp / f"worker{self.workers.index(p)}.err"
            self.wait_for(lambda e=err: b" starting: " in e.read_bytes(), f"{err.name} started")
        return new

    def errors(self) -> str:
        return "\n".join(
            f"--- worker {k} (exit {p.poll()}):\n"
            + (self.tmp / f"worker{k}.err").read_text(errors="replace")[-2000:]
            for k, p in enumerate(self.workers)
        )

    def wait(self, execution: ExecutionHandle, timeout: float = 60) -> ExecutionState:
        """Wait until ``execution`` has ended; its final state."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            state = execution.status()
            if state in _FINAL:
                return state
            time.sleep(0.02)
        raise AssertionError(f"{execution.id} still {execution.status()}:\n{self.errors()}")

    def wait_for(self, pred: object, what: str, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():  # type: ignore[operator]
                return
            time.sleep(0.01)
        raise AssertionError(f"not within {timeout} s: {what}\n{self.errors()}")

    def runs(self, step: str | None = None) -> list[Run]:
        return [r for r in read_runs(self.log) if step is None or r.step == step]

    def close(self) -> None:
        for p in self.workers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.workers:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self.queue.close()


_FINAL = {
    ExecutionState.SUCCEEDED,
    ExecutionState.FAILED,
    ExecutionState.TIMED_OUT,
    ExecutionState.CANCELLED,
    ExecutionState.SKIPPED,
}


@pytest.fixture
def env(url: str, tmp_path: Path) -> Iterator[Env]:
    e = Env(url, tmp_path)
    try:
        yield e
    finally:
        e.close()


def most_at_once(runs: Sequence[Run]) -> int:
    """The most body runs in progress at one instant (a run without an end counts to
    the end of time)."""
    events = sorted(
        [(r.started, 1) for r in runs] + [(r.ended, -1) for r in runs if r.ended is not None],
        key=lambda e: (e[0], e[1]),  # an end before a start at the same instant
    )
    now = most = 0
    for _, delta in events:
        now += delta
        most = max(most, now)
    return most


def test_diamond_passes_both_results_to_the_join(env: Env) -> None:
    env.spawn(2)
    execution = env.flows.diamond.start({"n": 4})
    assert execution.result(timeout=60) == {"a": 4, "b": 5, "c": 40, "d": [5, 40]}
    runs = env.runs()
    assert sorted(r.step for r in runs) == ["a", "b", "c", "d"]
    by_step = {r.step: r for r in runs}
    # d started only after both b and c had returned; b and c after a
    assert by_step["d"].started >= max(by_step["b"].ended or 0, by_step["c"].ended or 0)
    assert min(by_step["b"].started, by_step["c"].started) >= (by_step["a"].ended or 0)


def test_max_parallel_2_across_3_workers_never_runs_3_steps_at_once(env: Env) -> None:
    env.spawn(3, "--slots", "1")
    execution = env.flows.parallel.start()
    result = execution.result(timeout=60)
    assert result == {f"s{i}": f"s{i}" for i in range(6)}
    runs = env.runs()
    assert len(runs) == 6 and all(r.ended is not None for r in runs)
    # never three at once (whether two overlap depends on timing: on SQS+moto under load
    # the hints may arrive one by one)
    assert 1 <= most_at_once(runs) <= 2, runs
    assert all(s.state is StepState.SUCCEEDED for s in execution.steps())


def test_flow_retry_3_with_a_step_of_max_attempts_1(env: Env) -> None:
    env.spawn(1)
    execution = env.flows.retry.start()
    with pytest.raises(ExecutionFailed) as failed:
        execution.result(timeout=60)
    assert (failed.value.state, failed.value.reason, failed.value.step_id) == (
        ExecutionState.FAILED,
        ExecutionReason.STEP_FAILED,
        "broken",
    )
    steps = {s.step_id: s for s in execution.steps()}
    assert [a.outcome for a in steps["flaky"].attempts] == [
        Outcome.FAILED,
        Outcome.FAILED,
        Outcome.SUCCEEDED,
    ]
    assert [a.outcome for a in steps["broken"].attempts] == [Outcome.FAILED]
    assert steps["broken"].state is StepState.DEAD
    assert [(r.step, r.attempt) for r in env.runs()] == [
        ("flaky", 1),
        ("flaky", 2),
        ("flaky", 3),
        ("broken", 1),
    ]


def _assert_flow_timed_out(
    env: Env, execution: ExecutionHandle, mode: str | None, worker_up: float = 0.0
) -> None:
    """Ended ``timed_out`` within 1.5 s + the reap interval (+ slack) of its start (or
    of ``worker_up``, the unix time the only worker left came up, if later), its one
    attempt ``timed_out``/``flow_timeout`` recorded in ``mode`` (``None``: by a reaper),
    not retried, the body never returned."""
    with pytest.raises(ExecutionFailed) as failed:
        execution.result(timeout=1)
    assert (failed.value.state, failed.value.reason) == (
        ExecutionState.TIMED_OUT,
        ExecutionReason.FLOW_TIMEOUT,
    )
    info = execution.info()
    assert info.started_at is not None and info.finished_at is not None
    due = max(info.started_at.timestamp() + 1.5, worker_up)
    late = info.finished_at.timestamp() - due
    assert late <= REAP + SLACK, (info, worker_up)
    (step,) = execution.steps()
    assert step.state is StepState.TIMED_OUT
    assert step.attempts[0].mode == mode
    assert [(a.outcome, a.reason) for a in step.attempts] == [(Outcome.TIMED_OUT, "flow_timeout")]
    runs = env.runs()
    assert [(r.attempt, r.ended) for r in runs] == [(1, None)], runs


@pytest.mark.parametrize("isolation", ["async", "process"])
def test_flow_timeout_stops_a_5s_step_at_1_5s(env: Env, isolation: str) -> None:
    flow = env.flows.timeout_async if isolation == "async" else env.flows.timeout_process
    env.spawn(1, "--slots", "1")
    if isolation == "process":
        # a child process takes a second or two to start on a loaded box: have the
        # worker's pool hold a started one, so the 1.5 s bound the step's running body
        env.flows.warm_process.start().result(timeout=60)
    execution = flow.start()
    assert env.wait(execution, timeout=30) is ExecutionState.TIMED_OUT
    # stopped by the worker (async cancelled / process group SIGTERM), not the reaper
    _assert_flow_timed_out(env, execution, "async" if isolation == "async" else "process")
    # nothing retried it meanwhile (the body would have logged a second start)
    time.sleep(0.5)
    assert [r.attempt for r in env.runs()] == [1]


def test_flow_timeout_with_every_worker_killed_is_ended_by_a_new_workers_reaper(
    env: Env,
) -> None:
    (victim,) = env.spawn(1)  # lease 30 s: only the stored deadline can end it in time
    execution = env.flows.timeout_async.start()
    env.wait_for(lambda: env.runs("hold"), "the step started")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert execution.status() is ExecutionState.RUNNING
    env.spawn(1)
    worker_up = time.time()
    assert env.wait(execution, timeout=30) is ExecutionState.TIMED_OUT
    # the killed worker recorded nothing: the reaper's record carries no mode
    _assert_flow_timed_out(env, execution, None, worker_up)


def test_sigkill_right_after_step_1_succeeds_continues_and_runs_step_1_once(env: Env) -> None:
    (victim,) = env.spawn(1, lease=2.0)
    execution = env.flows.resume.start()

    def first_succeeded() -> bool:
        return execution.steps()[0].state is StepState.SUCCEEDED

    env.wait_for(first_succeeded, "step 1 succeeded")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    env.spawn(1, lease=2.0)
    assert execution.result(timeout=60) == {"first": "one", "second": "one+two"}
    runs = env.runs()
    assert [r.attempt for r in runs if r.step == "first"] == [1]
    assert [r.pid for r in runs if r.step == "first"] == [victim.pid]
    finished = [r for r in runs if r.step == "second" and r.ended is not None]
    assert len(finished) == 1 and finished[0].pid != victim.pid


def test_concurrency_1_queue_runs_3_executions_one_at_a_time_oldest_first(env: Env) -> None:
    flow = env.flows.one_at_a_time
    executions = [flow.start() for _ in range(3)]
    assert [e.status() for e in executions] == [
        ExecutionState.RUNNING,
        ExecutionState.QUEUED,
        ExecutionState.QUEUED,
    ]
    env.spawn(2, "--slots", "1")
    for e in executions:
        assert e.result(timeout=60) == {"work": "work"}
    runs = env.runs()
    assert [r.execution for r in runs] == [e.id for e in executions]  # oldest first
    assert most_at_once(runs) == 1, runs
    infos = [e.info() for e in executions]
    for earlier, later in zip(infos, infos[1:], strict=False):
        assert earlier.finished_at is not None and later.started_at is not None
        assert later.started_at >= earlier.finished_at


def test_concurrency_1_skip_skips_the_2nd_and_3rd(env: Env) -> None:
    flow = env.flows.skipper
    kept, *skipped = [flow.start() for _ in range(3)]
    env.spawn(1)
    assert kept.result(timeout=60) == {"work": "work"}
    for e in skipped:
        with pytest.raises(ExecutionFailed) as refused:
            e.result(timeout=1)
        assert (refused.value.state, refused.value.reason) == (
            ExecutionState.SKIPPED,
            ExecutionReason.CONCURRENCY_LIMIT,
        )
    listed = env.queue.executions(flow=flow, state="skipped")
    assert sorted(e.id for e in listed) == sorted(e.id for e in skipped)
    assert [r.execution for r in env.runs()] == [kept.id]


def test_keyed_concurrency_runs_one_execution_per_customer_at_a_time(env: Env) -> None:
    flow = env.flows.per_customer
    executions = [flow.start({"customer": c}) for c in ("acme", "acme", "bolt", "acme")]
    assert [e.status() for e in executions] == [
        ExecutionState.RUNNING,
        ExecutionState.QUEUED,
        ExecutionState.RUNNING,
        ExecutionState.QUEUED,
    ]
    env.spawn(2, "--slots", "2")
    for e in executions:
        assert e.result(timeout=60) == {"work": "work"}
    runs = {r.execution: r for r in env.runs()}
    acme = [runs[e.id] for e in executions if e is not executions[2]]
    assert [r.execution for r in sorted(acme, key=lambda r: r.started)] == [
        e.id for e in executions if e is not executions[2]
    ]  # oldest first within the key
    assert most_at_once(acme) == 1, acme
    # the other customer's execution ran beside acme's first one, not after it
    assert most_at_once(list(runs.values())) == 2
