"""Durable workflows (SPEC §12) with real worker processes, killed with real signals.

Workers are the console script (``queue-core worker …``) running
:mod:`tests.integration.helpers.workflows_app`; every step and child body logs its start
and end to a file, so "ran once" and "ran again after the kill" are read from what
actually ran.

``WORKFLOW_BACKENDS`` lists the backends with ``SupportsWorkflows``: ``memory_proxy`` (one
memory storage served to every process, :mod:`tests.integration.helpers.memproxy`),
``sqlite``, ``postgres``, ``redis`` and ``sqs``. The default run takes ``memory_proxy`` and
``sqlite``; the server backends' runs take minutes and are in the soak run (``nox -s
soak``), while the contract suite covers each backend's storage in the default run. A
backend that gains the ability adds its id (``pytest.param("redis_cluster",
marks=pytest.mark.soak)``, ...): the ``env`` fixture builds every one of them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from queue_core import ExecutionFailed, Outcome, Queue
from queue_core.flows import ExecutionReason, ExecutionState, StepState
from queue_core.flows.handle import ExecutionHandle
from tests.integration.helpers.memproxy import ENV, connect, serve

WORKFLOW_BACKENDS = [
    "memory_proxy",
    "sqlite",
    # worker processes on the server backends take minutes: `nox -s soak` runs them (the
    # contract suite covers each backend's storage in the default run)
    pytest.param("postgres", marks=pytest.mark.soak),
    pytest.param("redis", marks=pytest.mark.soak),
    pytest.param("sqs", marks=pytest.mark.soak),
]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.integration.helpers.workflows_app:queue"
CLI = str(Path(sys.executable).parent / "queue-core")
LEASE = 2.0
"""The workers' lease (seconds): a SIGKILLed worker's attempt is recovered after it."""

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.parametrize("backend", WORKFLOW_BACKENDS),
]
_E = ExecutionState


class Env:
    """One test's storage, a producer queue with the app's workflows, the log, workers."""

    def __init__(self, env: dict[str, str], queue: Queue, tmp: Path) -> None:
        self.env = env
        self.tmp = tmp
        self.log = tmp / "steps.log"
        (tmp / "marks").mkdir()
        self.env.update(QC_WF_LOG=str(self.log), QC_WF_MARK=str(tmp / "marks"))
        os.environ.update(QC_WF_LOG=str(self.log), QC_WF_MARK=str(tmp / "marks"))
        self.queue = queue
        self.workers: list[subprocess.Popen[bytes]] = []
        import tests.integration.helpers.workflows_app as app

        app.queue._storage = queue.storage()  # the test process starts on the same storage
        self.app = app

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        """Start one worker (stopped by the test or at clean-up) once it is starting."""
        k = len(self.workers)
        err = self.tmp / f"worker{k}.err"
        with open(err, "wb") as out:
            cmd = [CLI, "worker", APP, "--reap-interval", "0.2", "--lease", str(LEASE), *args]
            p = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=out)
        self.workers.append(p)
        self.wait_for(lambda: b" starting: " in err.read_bytes(), f"{err.name} started")
        return p

    def kill(self, p: subprocess.Popen[bytes]) -> None:
        p.send_signal(signal.SIGKILL)
        p.wait(10)

    def errors(self) -> str:
        return "\n".join(
            f"--- worker {k} (exit {p.poll()}):\n"
            + (self.tmp / f"worker{k}.err").read_text(errors="replace")[-3000:]
            for k, p in enumerate(self.workers)
        )

    def wait_for(self, pred: Callable[[], bool], what: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return
            time.sleep(0.02)
        raise AssertionError(f"not within {timeout} s: {what}\n{self.errors()}")

    def runs(self, name: str) -> list[tuple[str, float]]:
        """``(S|E, time)`` of every start and end of body ``name``, in order."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [(k, float(t)) for k, n, _, t in (ln.split() for ln in lines) if n == name]

    def main_outcomes(self, execution: ExecutionHandle) -> list[tuple[Outcome | None, str | None]]:
        return [(a.outcome, a.reason) for a in execution.steps()[0].attempts]

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


@pytest.fixture
def env(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    """An empty storage of ``backend`` shared by the test and its worker processes."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("QUEUE_CORE_")}
    base["PYTHONPATH"] = str(ROOT)
    saved = {k: os.environ.get(k) for k in ("QC_WF_LOG", "QC_WF_MARK")}
    if backend == "memory_proxy":
        with serve() as address:
            e = Env({**base, ENV: address}, Queue(storage=connect(address)), tmp_path)  # type: ignore[arg-type]
            try:
                yield e
            finally:
                e.close()
    else:
        from tests.integration._backends import backend_url

        url = backend_url(request, tmp_path, backend)
        base.update((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))  # moto's
        queue = Queue(url)
        queue.migrate()
        e = Env({**base, "QUEUE_CORE_URL": url}, queue, tmp_path)
        try:
            yield e
        finally:
            e.close()
            queue.close()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_a_sigkilled_worker_reruns_only_the_unfinished_step(env: Env) -> None:
    first = env.spawn()
    execution = env.app.three_steps.start()
    env.wait_for(lambda: env.runs("b") != [], "step b started")
    env.kill(first)
    env.spawn()
    assert execution.result(timeout=60) == ["a", "b", "c"]
    assert [k for k, _ in env.runs("a")] == ["S", "E"]  # finished before the kill: kept
    assert [k for k, _ in env.runs("b")] == ["S", "S", "E"]  # unfinished: run again
    assert [k for k, _ in env.runs("c")] == ["S", "E"]
    # the re-run is explained by a lost attempt, which spent one of the budget
    assert env.main_outcomes(execution) == [
        (Outcome.LOST, "lease_expired"),
        (Outcome.SUCCEEDED, None),
    ]


def test_a_worker_killed_while_the_workflow_sleeps_loses_nothing(env: Env) -> None:
    first = env.spawn()
    execution = env.app.naps.start(2.0, 1)
    env.wait_for(lambda: execution.status() is _E.WAITING, "the workflow sleeps")
    env.kill(first)
    env.spawn()
    assert execution.result(timeout=60) == 1
    assert [k for k, _ in env.runs("before-0")] == ["S", "E"]
    assert env.main_outcomes(execution) == [
        (Outcome.SUSPENDED, "sleep"),
        (Outcome.SUCCEEDED, None),
    ]
    # never early: the sleep began after the first attempt started (the test sees it
    # asleep only later, by up to its polling and the storage's latency: on SQS once
    # more than the 0.5 s this bound allows for clocks)
    asleep, resumed = (a.started_at for a in execution.steps()[0].attempts)
    assert asleep is not None and resumed is not None
    assert resumed.timestamp() >= asleep.timestamp() + 2.0 - 0.5


def test_children_survive_a_worker_killed_while_they_run(env: Env) -> None:
    first = env.spawn()
    execution = env.app.fan_out.start(3)
    env.wait_for(lambda: env.runs("child-1") != [], "child 1 runs")
    # the kill comes once the quick children's ends are stored: an end still being
    # written when the worker dies is rightly run again (a slower storage takes longer)
    env.wait_for(lambda: _done(execution, "child#0", "child#2"), "children 0 and 2 stored")
    env.kill(first)
    env.spawn()
    assert execution.result(timeout=60) == [0, 1, 2]
    assert [k for k, _ in env.runs("fan-before")] == ["S", "E"]
    steps = {s.step_id.split(".")[-1]: s for s in execution.steps()}
    killed = steps["child#1"]
    assert [a.outcome for a in killed.attempts] == [Outcome.LOST, Outcome.SUCCEEDED]
    for other in ("child#0", "child#2"):
        assert len(env.runs(f"child-{other[-1]}")) == 2  # ran once, start and end
    assert all(s.state is StepState.SUCCEEDED for s in steps.values())


def _done(execution: ExecutionHandle, *step_ids: str) -> bool:
    """Whether the children ``step_ids`` (their ids' suffix) have succeeded, as stored."""
    states = {s.step_id.split(".")[-1]: s.state for s in execution.steps()}
    return all(states.get(i) is StepState.SUCCEEDED for i in step_ids)


def test_the_slot_is_free_while_a_workflow_sleeps(env: Env) -> None:
    env.spawn("--slots", "1")
    execution = env.app.naps.start(3.0, 1)
    env.wait_for(lambda: execution.status() is _E.WAITING, "the workflow sleeps")
    handles = [env.app.plain.delay(i) for i in range(3)]
    for h in handles:
        assert h.result(timeout=2.5) in range(3)  # before the workflow wakes: its slot is free
    assert execution.status() is _E.WAITING
    assert execution.result(timeout=60) == 1


def test_suspended_attempts_spend_no_attempt(env: Env) -> None:
    env.spawn()
    execution = env.app.naps.start(0.3, 3)  # max_attempts=1, suspended three times
    assert execution.result(timeout=60) == 3
    assert env.main_outcomes(execution) == [(Outcome.SUSPENDED, "sleep")] * 3 + [
        (Outcome.SUCCEEDED, None)
    ]
    job = env.queue.storage().get_job(execution.steps()[0].job_id or "")
    assert job is not None and job.max_attempts == 4


def test_an_event_from_another_process_wakes_the_workflow(env: Env) -> None:
    env.spawn()
    execution = env.app.approval.start("42")
    env.wait_for(lambda: execution.status() is _E.WAITING, "the workflow waits")
    assert env.queue.send_event("approve", key="7", data={"by": "bob"}) == 0
    assert env.queue.send_event("approve", key="42", data={"by": "ann"}) == 1
    assert execution.result(timeout=60) == {"by": "ann"}


def test_the_deadline_of_a_sleeping_workflow_is_enforced_without_its_worker(env: Env) -> None:
    first = env.spawn("--queues", "wf-deadline")
    execution = env.app.overdue.start()
    env.wait_for(lambda: execution.status() is _E.WAITING, "the workflow sleeps")
    env.kill(first)
    env.spawn("--queues", "default")  # never claims it; its reaper enforces the deadline
    with pytest.raises(ExecutionFailed) as failed:
        execution.result(timeout=60)
    assert (failed.value.state, failed.value.reason) == (_E.TIMED_OUT, ExecutionReason.FLOW_TIMEOUT)


def test_retry_resumes_a_failed_workflow_at_its_failed_step(env: Env) -> None:
    env.spawn()
    execution = env.app.fails_at_b.start()
    with pytest.raises(ExecutionFailed):
        execution.result(timeout=60)
    assert execution.retry() is _E.RUNNING
    assert execution.result(timeout=60) == ["ra", "rb", "rc"]
    assert [k for k, _ in env.runs("ra")] == ["S", "E"]  # kept
    assert [k for k, _ in env.runs("rb")] == ["S", "S", "E"]
    assert execution.replay("b") is _E.RUNNING  # b and what came after it, a kept
    assert execution.result(timeout=60) == ["ra", "rb", "rc"]
    assert [k for k, _ in env.runs("ra")] == ["S", "E"]
    assert [k for k, _ in env.runs("rc")] == ["S", "E", "S", "E"]
