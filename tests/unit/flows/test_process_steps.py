"""Process-isolated flow steps (``isolation="process"``) on a real burst worker: the
child's ``ctx`` names its execution and step, and at the flow's deadline the child's
process group gets SIGTERM, then SIGKILL after ``kill_grace``, the attempt ending
``timed_out`` / ``flow_timeout`` and not retried."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_core import ExecutionFailed, Outcome, Queue, RetryPolicy
from queue_core.flows import ExecutionReason, ExecutionState, StepState
from tests.unit.flows import process_steps


@pytest.fixture
def queue() -> Iterator[Queue]:
    q = Queue("memory://")
    yield q
    q.close()


def drain(q: Queue) -> None:
    q.run_worker(burst=True, reap_interval=0.1, install_signal_handlers=False)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat.rpartition(b")")[2].split()[0] not in (b"Z", b"X")


def test_a_process_step_ctx_carries_the_execution_and_step(queue: Queue) -> None:
    flow = queue.flow("probed")
    flow.step(id="probe", isolation="process")(process_steps.probe)
    execution = flow.start({"x": 1})
    drain(queue)
    execution_id, step_id, job_id, attempt, pid = execution.result(timeout=5)["probe"]
    assert (execution_id, step_id, attempt) == (execution.id, "probe", 1)
    assert job_id == execution.steps()[0].job_id
    assert pid != os.getpid()


def test_the_flow_deadline_sigterms_then_sigkills_a_process_step(
    queue: Queue, tmp_path: Path
) -> None:
    # a child takes a second or two to start on a loaded box: a quick step first leaves
    # a started one in the pool, so the deadline finds the stubborn body running
    flow = queue.flow("stubborn", timeout="4s", retry=RetryPolicy(max_attempts=3))
    warm = flow.step(id="warm", isolation="process")(process_steps.warm)
    hold = flow.step(id="hold", depends_on=[warm], isolation="process", kill_grace="0.5s")
    hold(process_steps.stubborn)
    execution = flow.start({"dir": str(tmp_path)})
    started = time.monotonic()
    drain(queue)
    took = time.monotonic() - started
    with pytest.raises(ExecutionFailed) as failed:
        execution.result(timeout=5)
    assert (failed.value.state, failed.value.reason) == (
        ExecutionState.TIMED_OUT,
        ExecutionReason.FLOW_TIMEOUT,
    )
    warm_run, step = execution.steps()
    assert warm_run.state is StepState.SUCCEEDED
    assert step.state is StepState.TIMED_OUT
    # one attempt only: a flow_timeout is never retried, though the flow allows 3
    assert [(a.outcome, a.reason) for a in step.attempts] == [(Outcome.TIMED_OUT, "flow_timeout")]
    # recorded by the worker that stopped the child (the reaper's record has no mode)
    assert step.attempts[0].mode == "process"
    # SIGTERM came (the body noted it and went on), then SIGKILL after the grace
    pid = int((tmp_path / "pid-1").read_text())
    assert (tmp_path / "sigterm-1").exists()
    assert not (tmp_path / "pid-2").exists()
    assert not _alive(pid)
    term_at = float((tmp_path / "sigterm-1").read_text())
    last_alive = float((tmp_path / "alive-1").read_text().split()[-1])
    record = queue.execution(execution.id).info()
    assert record.started_at is not None
    # SIGTERM at the deadline (never before it), SIGKILL a grace later
    assert 0.0 <= term_at - (record.started_at.timestamp() + 4.0) < 1.0
    assert 0.4 <= last_alive - term_at < 0.5 + 1.0
    assert 4.0 <= took < 4.0 + 0.5 + 3.0  # deadline + kill_grace + slack (loaded box)
