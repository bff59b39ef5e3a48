"""Direct process attempts (``ProcessPool.run_direct``): a whole attempt on the calling thread, with
real children, real process groups and real signals; and the worker starting plain
process jobs that way (no event-loop task per job)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from queue_core import Queue
from queue_core.records.errors import TaskError
from queue_core.worker import Worker
from queue_core.worker.claiming import ClaimLoop
from queue_core.worker.process import ProcessOutcome, ProcessPool, ProcessResult
from queue_core.worker.process.children import request_of
from queue_core.worker.process_runs import _beat
from queue_core.worker.running import Runner
from queue_core.worker.slots import Attempt
from tests.fds import descriptors_past_select_limit
from tests.unit.worker import process_tasks
from tests.unit.worker.conftest import drain, group_exists
from tests.unit.worker.test_process_isolation import SLACK, alive

TASKS = process_tasks.__name__


def direct(
    pool: ProcessPool,
    qualname: str,
    *args: Any,
    timeout: float | None = 5.0,
    kill_grace: float = 0.5,
    heartbeat: Callable[[], object] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    wants_ctx: bool = False,
) -> ProcessResult:
    """One direct attempt of ``process_tasks.<qualname>`` on this thread."""
    request = request_of(
        TASKS,
        qualname,
        args,
        {},
        job_id="job-1",
        attempt=1,
        timeout=timeout,
        heartbeat_every=0.01,
        wants_ctx=wants_ctx,
        execution_id=None,
        step_id=None,
        carried=(),
    )
    return pool.run_direct(
        request,
        timeout=timeout,
        kill_grace=kill_grace,
        heartbeat=heartbeat,
        cancelled=cancelled,
    )


# -- answers ----------------------------------------------------------------------------


def test_values_keep_their_exact_types_and_one_warm_child_serves(pool: ProcessPool) -> None:
    results = [
        direct(pool, "add", 1, 2),
        direct(pool, "identity", True),
        direct(pool, "identity", b"\x00x"),
        direct(pool, "high"),
        direct(pool, "identity", {"a": [1.5, None]}),
    ]

    assert [r.outcome for r in results] == [ProcessOutcome.RETURNED] * 5
    values = [r.value for r in results]
    assert values == [3, True, b"\x00x", process_tasks.Level.HIGH, {"a": [1.5, None]}]
    assert [type(v) for v in values[:4]] == [int, bool, bytes, process_tasks.Level]
    assert len({r.pid for r in results}) == 1 and pool.pids == [results[0].pid]


def test_a_child_whose_pipes_are_numbered_past_select_limit_is_served() -> None:
    with descriptors_past_select_limit():
        pool = ProcessPool(1)
        try:
            result = direct(pool, "add", 2, 3)
        finally:
            anyio.run(lambda: pool.aclose(grace=1.0))
    assert (result.outcome, result.value) == (ProcessOutcome.RETURNED, 5)


def test_exceptions_come_back_as_themselves(pool: ProcessPool) -> None:
    plain = direct(pool, "raise_value_error")
    fatal = direct(pool, "raise_fatal")

    assert plain.outcome is ProcessOutcome.RAISED and plain.error is not None
    assert type(plain.error.exception) is ValueError
    assert "raise_value_error" in plain.error.traceback
    assert fatal.error is not None and isinstance(fatal.error.exception, TaskError)
    assert fatal.error.exception.non_retryable is True
    assert plain.pid == fatal.pid  # a body that raised leaves its child warm


# -- stops ------------------------------------------------------------------------------


def test_spinning_body_is_stopped_at_the_deadline() -> None:
    pool = ProcessPool(1)
    try:
        warm = direct(pool, "noop")
        started = time.monotonic()
        result = direct(pool, "spin", timeout=1, kill_grace=0.5)
        elapsed = time.monotonic() - started

        assert result.outcome is ProcessOutcome.TIMED_OUT
        assert result.signal == signal.SIGTERM and not result.sigkill and result.group_gone
        assert not group_exists(result.pid)  # gone when the call returns
        assert 1 <= elapsed < 1 + 0.5 + SLACK
        following = direct(pool, "add", 1, 2)
        assert following.value == 3 and result.pid == warm.pid != following.pid
    finally:
        anyio.run(pool.aclose)


def test_body_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    pool = ProcessPool(1)
    try:
        marker = tmp_path / "ignoring"
        direct(pool, "noop")
        started = time.monotonic()
        result = direct(pool, "ignore_sigterm", str(marker), timeout=1, kill_grace=0.5)
        elapsed = time.monotonic() - started

        assert marker.read_text() == "ignoring"
        assert result.outcome is ProcessOutcome.TIMED_OUT
        assert result.sigkill and result.signal == signal.SIGKILL
        assert not group_exists(result.pid)
        assert 1 + 0.5 <= elapsed < 1 + 0.5 + SLACK
    finally:
        anyio.run(pool.aclose)


def test_cancel_stops_the_group_within_a_poll(pool: ProcessPool) -> None:
    asked = threading.Event()
    threading.Timer(0.3, asked.set).start()
    started = time.monotonic()
    result = direct(pool, "spin", timeout=None, cancelled=asked.is_set)

    assert result.outcome is ProcessOutcome.CANCELLED
    assert 0.3 <= time.monotonic() - started < 0.3 + SLACK
    assert not group_exists(result.pid) and pool.pids == []


def test_an_attempt_cancelled_before_it_starts_takes_no_child(pool: ProcessPool) -> None:
    first = direct(pool, "add", 1, 2)
    result = direct(pool, "spin", timeout=None, cancelled=lambda: True)

    assert result.outcome is ProcessOutcome.CANCELLED and result.pid == 0
    assert pool.pids == [first.pid] and alive(first.pid)


def test_closing_the_pool_stops_a_running_direct_attempt() -> None:
    pool = ProcessPool(1)
    box: list[ProcessResult] = []
    runner = threading.Thread(target=lambda: box.append(direct(pool, "spin", timeout=None)))
    runner.start()
    deadline = time.monotonic() + 10
    while not pool.children.direct and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the child runs the body
    pid = pool.pids[0]
    anyio.run(lambda: pool.aclose(grace=1.0))  # returns once the attempt stopped its child
    runner.join(5)

    assert box and box[0].outcome is ProcessOutcome.CANCELLED and box[0].pid == pid
    assert pool.pids == [] and not group_exists(pid)
    with pytest.raises(RuntimeError, match="closed"):
        direct(pool, "noop")


# -- crashes ----------------------------------------------------------------------------


def test_os_exit_fails_only_its_attempt_and_the_child_is_replaced(pool: ProcessPool) -> None:
    result = direct(pool, "exit_code", 3)

    assert result.outcome is ProcessOutcome.DIED and result.exit_code == 3
    assert not group_exists(result.pid)
    again = direct(pool, "add", 2, 2)
    assert again.value == 4 and again.pid != result.pid


def test_child_killed_by_a_signal_is_a_died_child_with_that_signal(pool: ProcessPool) -> None:
    result = direct(pool, "kill_self", signal.SIGKILL)

    assert result.outcome is ProcessOutcome.DIED and result.signal == signal.SIGKILL


def test_dead_child_whose_grandchild_holds_the_pipe_is_seen_at_once(
    pool: ProcessPool, tmp_path: Path
) -> None:
    pid_file = tmp_path / "grandchild"
    began = time.monotonic()
    result = direct(pool, "fork_then_exit", str(pid_file), timeout=30)

    assert result.outcome is ProcessOutcome.DIED and result.exit_code == 3
    assert time.monotonic() - began < SLACK  # not the 30 s timeout
    assert not alive(int(pid_file.read_text()))


# -- heartbeats, retirement -----------------------------------------------------------------


def test_heartbeats_are_passed_on_on_the_calling_thread(pool: ProcessPool) -> None:
    threads: list[int] = []
    result = direct(
        pool,
        "beat",
        3,
        0.05,
        heartbeat=lambda: threads.append(threading.get_ident()),
        wants_ctx=True,
    )

    assert result.outcome is ProcessOutcome.RETURNED
    assert result.value["job_id"] == "job-1" and result.value["cancelled"] is False
    assert len(threads) >= 2 and set(threads) == {threading.get_ident()}


def test_a_failing_heartbeat_callback_ends_the_attempt_and_the_child(
    pool: ProcessPool,
) -> None:
    def fail() -> None:
        raise RuntimeError("storage is gone")

    with pytest.raises(RuntimeError, match="storage is gone"):
        direct(pool, "beat", 3, 0.05, heartbeat=fail, wants_ctx=True)
    assert pool.pids == []


def test_max_tasks_per_child_retires_the_child() -> None:
    pool = ProcessPool(1, max_tasks_per_child=2)
    try:
        pids = [direct(pool, "count_calls").value for _ in range(3)]
    finally:
        anyio.run(pool.aclose)

    assert [count for count, _ in pids] == [1, 2, 1]
    assert pids[0][1] == pids[1][1] != pids[2][1]


# -- through the worker -----------------------------------------------------------------------


def test_the_worker_starts_plain_process_jobs_without_a_loop_task(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    through_loop: list[str] = []
    run = Runner._run

    async def counted(self: Runner, att: Any) -> None:
        through_loop.append(att.job.task_name)
        await run(self, att)

    monkeypatch.setattr(Runner, "_run", counted)
    task = queue.task(name="add", isolation="process")(process_tasks.add)
    plain = [task.delay(i, 1) for i in range(5)]
    # a job with per-call options goes through the loop (its call is prepared there)
    overridden = task.apply(args=(1, 1), dont_retry_on=[ValueError])
    drain(queue, slots=2)

    assert [h.result(timeout=5) for h in plain] == [1, 2, 3, 4, 5]
    assert overridden.result(timeout=5) == 2
    assert through_loop == ["add"]  # only the job with per-call options
    assert {a.mode for h in plain for a in h.attempts()} == {"process"}


def test_an_idle_worker_starts_process_jobs_from_the_claim_thread(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[int] = []
    waits: list[int] = []
    start_direct, wait_then_claim = ClaimLoop._start_direct, ClaimLoop._wait_then_claim

    def counted(self: ClaimLoop, jobs: list[Any]) -> tuple[int, list[Any]]:
        done = start_direct(self, jobs)
        started.append(done[0])
        return done

    def waiting(self: ClaimLoop, free: int, longest: float) -> tuple[int, list[Any]]:
        waits.append(free)
        return wait_then_claim(self, free, longest)

    monkeypatch.setattr(ClaimLoop, "_start_direct", counted)
    monkeypatch.setattr(ClaimLoop, "_wait_then_claim", waiting)
    add = queue.task(name="add", isolation="process")(process_tasks.add)
    spin = queue.task(name="spin", isolation="process", timeout=1, kill_grace=0.5)(
        process_tasks.spin
    )
    worker = Worker(queue, install_signal_handlers=False, reap_interval=0.1)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        idle(waits, 0)
        summed = add.delay(2, 3)
        assert summed.result(timeout=10) == 5
        idle(waits, len(waits))
        began = time.monotonic()
        spun = spin.delay()
        ended(spun)
        took = time.monotonic() - began
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive() and worker._parts is not None
    pool = worker._parts.runner.process.pool
    assert pool is not None and pool.pids == []
    assert sum(started) == 2  # both started from the claim thread
    record = spun.attempts()[0]
    assert record.outcome == "timed_out" and record.mode == "process"
    assert 0.8 <= took < 1 + 0.5 + SLACK


def idle(waits: list[int], seen: int) -> None:
    """Until the claim thread waits for a wake-up again (more than ``seen`` waits)."""
    limit = time.monotonic() + 10
    while len(waits) <= seen:
        assert time.monotonic() < limit, "the worker never went idle"
        time.sleep(0.002)


def ended(handle: Any) -> None:
    limit = time.monotonic() + 10
    while not handle.attempts() or handle.attempts()[0].outcome is None:
        assert time.monotonic() < limit, f"no attempt of {handle.id} ended"
        time.sleep(0.01)


def test_heartbeats_of_a_direct_process_job_keep_it_alive() -> None:
    queue = Queue("memory://", serializer="pickle")  # the body returns a datetime
    task = queue.task(name="beat", isolation="process", heartbeat="1s", max_retries=0)(
        process_tasks.beat
    )
    noop = queue.task(name="noop", isolation="process", priority=9)(process_tasks.noop)
    noop.delay()  # first: silence counts from the claim, so the beats get a warm child
    handle = task.delay(20, 0.1)  # 2 s of beats; one reaches the worker every 1/3 s
    drain(queue, slots=1)

    record = handle.attempts()[0]
    assert record.outcome == "succeeded", record.message
    assert handle.result(timeout=5)["job_id"] == handle.id
    queue.close()


def test_a_cancel_reported_by_a_heartbeat_write_stops_the_attempt() -> None:
    att = Attempt(ClaimedJobStub(), None)  # type: ignore[arg-type]
    _beat(att, lambda: False)
    assert not att.stop_requested()
    _beat(att, lambda: True)
    assert att.cancel_requested and att.stop_requested()


class ClaimedJobStub:
    ref = ("job-1", 1)
