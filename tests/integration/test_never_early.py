"""SPEC §4 "Never early", end to end: a deadline is acted on at its moment, never before.

A real worker (a thread of the test process, the system clock) on a real SQLite file
runs bodies that sleep past a 1.5 s bound and note when they were stopped: a task with
``timeout=1.5``, a flow step with ``timeout=1.5`` and a flow with ``timeout=1.5``. Each
must have run at least 1.5 s -- by the body's own clock and by its attempt record --
and be recorded by the worker that stopped it (mode ``async``), not by the reaper.
The worker's choice of when to stop is unit-tested on a manual clock
(tests/unit/worker/test_services_clock.py); this checks the real timers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_core import JobState, Outcome, Queue
from queue_core.records.flows import ExecutionState
from tests.integration.helpers.timeout_app import FLOWS, build, worker_thread

BOUND = 1.5


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Queue]:
    q = build(f"sqlite:///{tmp_path / 'jobs.db'}")
    yield q
    q.close()


@pytest.fixture
def markers(tmp_path: Path) -> str:
    path = tmp_path / "markers"
    path.mkdir()
    return str(path)


def _ran(markers: str) -> float:
    """Seconds the body ran before it was stopped, by its own clock."""
    return float(Path(markers, "stopped-1").read_text())


def test_a_task_with_timeout_1_5_runs_at_least_1_5_s(queue: Queue, markers: str) -> None:
    job = queue.enqueue("until_stopped", args=(markers,))
    with worker_thread(queue, slots=1, reap_interval=0.1):
        with pytest.raises(Exception):  # noqa: B017 - dead-lettered: JobFailed
            job.result(timeout=15)
    assert job.status() is JobState.DEAD
    (attempt,) = job.attempts()
    assert (attempt.outcome, attempt.reason, attempt.mode) == (
        Outcome.TIMED_OUT,
        "timeout",
        "async",
    )
    assert attempt.started_at is not None and attempt.finished_at is not None
    assert (attempt.finished_at - attempt.started_at).total_seconds() >= BOUND
    assert _ran(markers) >= BOUND


def test_a_flow_step_with_timeout_1_5_runs_at_least_1_5_s(queue: Queue, markers: str) -> None:
    execution = FLOWS[id(queue), "step"].start({"markers": markers})
    with worker_thread(queue, slots=1, reap_interval=0.1):
        with pytest.raises(Exception):  # noqa: B017 - ExecutionFailed (step_failed)
            execution.result(timeout=15)
    (step,) = execution.steps()
    (attempt,) = step.attempts
    assert (attempt.outcome, attempt.reason, attempt.mode) == (
        Outcome.TIMED_OUT,
        "timeout",
        "async",
    )
    assert attempt.started_at is not None and attempt.finished_at is not None
    assert (attempt.finished_at - attempt.started_at).total_seconds() >= BOUND
    assert _ran(markers) >= BOUND


def test_a_flow_with_timeout_1_5_runs_at_least_1_5_s(queue: Queue, markers: str) -> None:
    execution = FLOWS[id(queue), "flow"].start({"markers": markers})
    with worker_thread(queue, slots=1, reap_interval=0.1):
        with pytest.raises(Exception):  # noqa: B017 - ExecutionFailed (flow_timeout)
            execution.result(timeout=15)
    info = execution.info()
    assert info.state is ExecutionState.TIMED_OUT
    assert info.started_at is not None and info.finished_at is not None
    assert (info.finished_at - info.started_at).total_seconds() >= BOUND
    (step,) = execution.steps()
    (attempt,) = step.attempts
    # stopped by the worker at the flow's deadline (the reaper's record has no mode)
    assert (attempt.outcome, attempt.reason, attempt.mode) == (
        Outcome.TIMED_OUT,
        "flow_timeout",
        "async",
    )
    stopped_at = float(Path(markers, "started-at-1").read_text()) + _ran(markers)
    assert stopped_at - info.started_at.timestamp() >= BOUND
