"""``isolation="process"``: real child processes, real process groups, real signals."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from queue_core.records.errors import ConfigError, TaskError
from queue_core.rules.classify import error_names
from queue_core.worker.process import (
    ProcessOutcome,
    ProcessPool,
    ProcessResult,
    RemoteError,
    RemoteTaskError,
)
from queue_core.worker.process.child import heartbeat_due
from tests.unit.worker import process_tasks
from tests.unit.worker.conftest import group_exists

pytestmark = pytest.mark.anyio

TASKS = process_tasks.__name__
SLACK = 1.5
"""Seconds allowed beyond a bound for scheduling on a loaded 2-core machine."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def pool():
    pool = ProcessPool(2)
    try:
        yield pool
    finally:
        pids = pool.pids
        await pool.aclose(grace=1.0)
    assert pool.pids == []  # aclose left nothing behind
    for pid in pids:
        assert not group_exists(pid)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: neither gone nor a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat.rpartition(b")")[2].split()[0] not in (b"Z", b"X")


async def run(pool: ProcessPool, qualname: str, *args: Any, **kw: Any) -> ProcessResult:
    """One attempt of ``process_tasks.<qualname>`` with test defaults (timeout 5 s)."""
    options: dict[str, Any] = {"job_id": "job-1", "attempt": 1, "timeout": 5.0, "kill_grace": 0.5}
    options.update(kw)
    return await pool.run(TASKS, qualname, args, {}, **options)


async def wait_for_file(path: Path) -> None:
    with anyio.fail_after(5):
        while not await anyio.Path(path).exists():  # noqa: ASYNC110 - another process writes it
            await anyio.sleep(0.01)


# -- results and warm reuse ---------------------------------------------------------------


async def test_returns_value_and_reuses_the_warm_child(pool: ProcessPool) -> None:
    first = await run(pool, "add", 2, 3)
    second = await run(pool, "add", 10, 20)

    assert first.outcome is ProcessOutcome.RETURNED and first.value == 5
    assert second.outcome is ProcessOutcome.RETURNED and second.value == 30
    assert first.pid == second.pid  # the same child served both attempts
    assert first.error_info() is None


@pytest.mark.parametrize(
    "value", [None, True, 0, -7, 2**80, 2.5, "", "text", b"\x00bytes", [1, "a"], {"k": (1,)}]
)
async def test_return_values_come_back_with_their_exact_type(
    pool: ProcessPool, value: object
) -> None:
    result = await run(pool, "identity", value)

    assert result.outcome is ProcessOutcome.RETURNED
    assert result.value == value and type(result.value) is type(value)


async def test_a_subclass_of_a_plain_type_comes_back_as_that_subclass(pool: ProcessPool) -> None:
    result = await run(pool, "high")

    assert type(result.value) is process_tasks.Level  # pickled, not sent as a plain int
    assert result.value is process_tasks.Level.HIGH


async def test_child_leads_its_own_group_and_sees_the_attempt_number(pool: ProcessPool) -> None:
    result = await run(pool, "whoami", attempt=4)

    info = result.value
    assert info["pid"] == result.pid
    assert info["pgid"] == info["pid"]  # process group leader
    assert info["sid"] == info["pid"]  # and session leader: no terminal SIGINT
    assert info["pgid"] != os.getpgid(0)
    assert info["attempt_env"] == "4"
    again = await run(pool, "whoami", attempt=5)
    assert again.value["attempt_env"] == "5"


async def test_task_wrapper_is_unwrapped_and_qualnames_are_walked(pool: ProcessPool) -> None:
    wrapped = await run(pool, "wrapped_add", 1, 2)
    nested = await run(pool, "Namespace.nested")

    assert wrapped.value == 3
    assert nested.value == "nested"


async def test_body_that_does_not_exist_is_an_error_not_a_crash(pool: ProcessPool) -> None:
    result = await run(pool, "no_such_function")

    assert result.outcome is ProcessOutcome.RAISED
    assert result.error is not None and result.error.error_class == "AttributeError"


# -- exceptions ---------------------------------------------------------------------------


async def test_exception_comes_back_with_class_names_and_traceback(pool: ProcessPool) -> None:
    result = await run(pool, "raise_value_error")

    assert result.outcome is ProcessOutcome.RAISED
    error = result.error
    assert error is not None
    assert error.error_class == "ValueError"
    assert error.error_type == "builtins.ValueError"
    assert error.message == "bad value 42"
    assert "raise_value_error" in error.traceback
    assert isinstance(error.exception, ValueError)
    assert not error.is_task_error and error.non_retryable is None
    info = result.error_info()
    assert info is not None and info.error_class == "ValueError"
    assert (await run(pool, "add", 1, 1)).pid == result.pid  # a raise keeps the child


async def test_task_error_fatal_and_retryable_keep_their_classification(
    pool: ProcessPool,
) -> None:
    fatal = await run(pool, "raise_fatal")
    retryable = await run(pool, "raise_retryable")

    assert fatal.error is not None and retryable.error is not None
    assert isinstance(fatal.error.exception, TaskError)
    assert fatal.error.exception.non_retryable is True
    assert fatal.error.non_retryable is True and fatal.error.is_task_error
    assert isinstance(retryable.error.exception, TaskError)
    assert retryable.error.exception.non_retryable is False
    assert retryable.error.non_retryable is False


async def test_unpicklable_task_error_gets_a_stand_in_that_stays_fatal(
    pool: ProcessPool,
) -> None:
    result = await run(pool, "raise_picky")

    assert result.error is not None
    exc = result.error.exception
    assert isinstance(exc, RemoteTaskError) and isinstance(exc, TaskError)
    assert exc.non_retryable is True
    assert result.error.error_class == "PickyTaskError"
    assert result.error.error_type == f"{TASKS}.PickyTaskError"
    assert str(exc) == "7: unpicklable"
    assert type(exc).__name__ == "PickyTaskError"  # so non_retryable names still match
    assert error_names(exc) == ("PickyTaskError", f"{TASKS}.PickyTaskError")


async def test_unreplayable_plain_error_gets_a_plain_stand_in(pool: ProcessPool) -> None:
    result = await run(pool, "raise_config_error")

    assert result.error is not None
    exc = result.error.exception
    # ConfigError's required ``code`` keyword cannot be replayed by pickle.
    assert isinstance(exc, RemoteError) and not isinstance(exc, (TaskError, ConfigError))
    assert exc.error_class == "ConfigError"
    assert error_names(exc) == ("ConfigError", "queue_core.records.errors.ConfigError")
    assert result.error.error_type == "queue_core.records.errors.ConfigError"


async def test_unpicklable_return_value_is_an_error(pool: ProcessPool) -> None:
    result = await run(pool, "return_unpicklable")

    assert result.outcome is ProcessOutcome.RAISED
    assert result.error is not None and "lambda" in result.error.message


async def test_async_body_is_refused(pool: ProcessPool) -> None:
    result = await run(pool, "async_body")

    assert result.outcome is ProcessOutcome.RAISED
    assert result.error is not None and result.error.error_class == "TypeError"
    assert "async" in result.error.message


# -- timeouts ---------------------------------------------------------------------------


async def test_spinning_body_is_stopped_at_the_deadline_and_the_slot_reused() -> None:
    async with ProcessPool(1) as pool:
        warm = await run(pool, "noop")  # measure the attempt, not the child's start-up
        started = time.monotonic()
        result = await run(pool, "spin", timeout=1, kill_grace=0.5)
        elapsed = time.monotonic() - started

        assert result.outcome is ProcessOutcome.TIMED_OUT
        assert not group_exists(result.pid)  # the group is gone when run() returns
        assert result.group_gone
        assert elapsed < 1 + 0.5 + SLACK
        assert result.signal == signal.SIGTERM and not result.sigkill
        info = result.error_info()
        assert info is not None and info.error_class == "TimeoutError"
        assert "SIGTERM" in info.message

        following = await run(pool, "add", 1, 2)  # the one slot serves the next attempt
        assert following.outcome is ProcessOutcome.RETURNED and following.value == 3
        assert result.pid == warm.pid and following.pid != result.pid  # by a fresh child


async def test_body_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    async with ProcessPool(1) as pool:
        marker = tmp_path / "ignoring"
        await run(pool, "noop")
        started = time.monotonic()
        result = await run(pool, "ignore_sigterm", str(marker), timeout=1, kill_grace=0.5)
        elapsed = time.monotonic() - started

        assert marker.read_text() == "ignoring"
        assert result.outcome is ProcessOutcome.TIMED_OUT
        assert result.sigkill and result.signal == signal.SIGKILL
        assert not group_exists(result.pid)
        assert 1 + 0.5 <= elapsed < 1 + 0.5 + SLACK


async def test_sigterm_handler_flushes_partial_output(tmp_path: Path) -> None:
    async with ProcessPool(1) as pool:
        out = tmp_path / "out.txt"
        result = await run(pool, "flush_on_sigterm", str(out), timeout=1, kill_grace=3)

        assert result.outcome is ProcessOutcome.TIMED_OUT
        assert not result.sigkill and result.exit_code == 0
        text = out.read_text()
        assert text.startswith("partial ") and int(text.split()[1]) > 0


async def test_grandchildren_in_the_group_are_stopped_too(tmp_path: Path) -> None:
    async with ProcessPool(1) as pool:
        pid_file = tmp_path / "grandchild.pid"
        result = await run(pool, "spin_with_grandchild", str(pid_file), timeout=1, kill_grace=0.5)

        grandchild = int(pid_file.read_text())
        assert result.outcome is ProcessOutcome.TIMED_OUT
        assert result.group_gone and not result.sigkill  # SIGTERM reached the grandchild too
        assert not alive(result.pid)
        assert not alive(grandchild)


async def test_caller_cancellation_stops_the_group(pool: ProcessPool) -> None:
    with anyio.move_on_after(0.5) as scope:
        await run(pool, "spin", timeout=None)
    assert scope.cancelled_caught
    assert pool.pids == []  # the child was stopped and reaped before the scope exited


# -- crashes ------------------------------------------------------------------------------


async def test_os_exit_is_a_died_child_with_its_code(pool: ProcessPool) -> None:
    result = await run(pool, "exit_code", 3)

    assert result.outcome is ProcessOutcome.DIED
    assert result.exit_code == 3 and result.signal is None
    assert not group_exists(result.pid)
    info = result.error_info()
    assert info is not None and info.error_class == "ProcessDied"
    assert "exited with code 3" in info.message
    assert (await run(pool, "add", 2, 2)).value == 4  # replaced lazily


@pytest.mark.parametrize("signum", [signal.SIGSEGV, signal.SIGKILL])
async def test_child_killed_by_a_signal_is_a_died_child_with_that_signal(
    pool: ProcessPool, signum: int
) -> None:
    result = await run(pool, "kill_self", int(signum))

    assert result.outcome is ProcessOutcome.DIED
    assert result.signal == signum and result.exit_code is None
    assert signal.Signals(signum).name in result.describe()
    assert not group_exists(result.pid)


async def test_child_killed_from_outside_while_running(pool: ProcessPool, tmp_path: Path) -> None:
    marker = tmp_path / "running"

    async def oom_kill() -> None:  # what the OOM killer does
        await wait_for_file(marker)
        os.kill(pool.pids[0], signal.SIGKILL)

    async with anyio.create_task_group() as tg:
        tg.start_soon(oom_kill)
        result = await run(pool, "ignore_sigterm", str(marker), timeout=5)

    assert result.outcome is ProcessOutcome.DIED and result.signal == signal.SIGKILL
    assert not result.sigkill  # the pool did not send it


# -- heartbeats and the context ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("last", "now", "every", "due"),
    [
        (None, 0.0, 10.0, True),
        (0.0, 9.99, 10.0, False),
        (0.0, 10.0, 10.0, True),
        (5.0, 5.0, 0.0, True),
    ],
)
def test_heartbeat_throttle_rule(last: float | None, now: float, every: float, due: bool) -> None:
    assert heartbeat_due(last, now, every) is due


async def test_heartbeats_reach_the_parent_throttled(pool: ProcessPool) -> None:
    beats: list[float] = []

    throttled = await run(
        pool,
        "beat",
        20,
        0.001,
        heartbeat=lambda: beats.append(1),
        heartbeat_every=60.0,
        wants_ctx=True,
    )
    assert throttled.outcome is ProcessOutcome.RETURNED
    assert len(beats) == 1  # the first beat goes, the other 19 fall in the window

    beats.clear()
    unthrottled = await run(
        pool,
        "beat",
        20,
        0.0,
        heartbeat=lambda: beats.append(1),
        heartbeat_every=0.0,
        wants_ctx=True,
    )
    assert unthrottled.outcome is ProcessOutcome.RETURNED
    assert len(beats) == 20


async def test_context_carries_job_attempt_and_deadline(pool: ProcessPool) -> None:
    before = time.time()
    result = await run(pool, "beat", 0, 0.0, job_id="job-9", attempt=2, timeout=30, wants_ctx=True)

    ctx = result.value
    assert ctx["job_id"] == "job-9" and ctx["attempt"] == 2
    deadline = ctx["deadline"]
    assert deadline.tzinfo is not None  # aware UTC, like JobContext.deadline
    assert before + 30 <= deadline.timestamp() <= time.time() + 30
    assert ctx["cancelled"] is False


async def test_failing_heartbeat_callback_ends_the_attempt_and_the_child(
    pool: ProcessPool,
) -> None:
    def lost() -> None:
        raise LookupError("lease lost")

    with pytest.raises(LookupError):
        await run(pool, "beat", 50, 0.01, heartbeat=lost, wants_ctx=True)
    assert pool.pids == []


# -- cancellation and shutdown ----------------------------------------------------------------


async def test_cancellation_terminates_the_group(pool: ProcessPool) -> None:
    flag = anyio.Event()

    async def cancel_soon() -> None:
        await anyio.sleep(0.3)
        flag.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel_soon)
        result = await run(pool, "spin", timeout=None, cancelled=flag.is_set)

    assert result.outcome is ProcessOutcome.CANCELLED
    assert not group_exists(result.pid)
    assert result.error_info() is not None


async def test_body_sees_ctx_cancelled_in_its_sigterm_handler(
    pool: ProcessPool, tmp_path: Path
) -> None:
    out = tmp_path / "cancelled.txt"
    result = await run(pool, "wait_cancelled", str(out), timeout=0.5, kill_grace=3, wants_ctx=True)

    assert result.outcome is ProcessOutcome.TIMED_OUT and not result.sigkill
    assert out.read_text() == "cancelled=True"


async def test_aclose_leaves_no_children_behind(tmp_path: Path) -> None:
    pool = ProcessPool(3)
    busy_result: list[ProcessResult] = []
    marker = tmp_path / "ignoring"

    async def busy() -> None:
        busy_result.append(await run(pool, "ignore_sigterm", str(marker), timeout=None))

    async with anyio.create_task_group() as tg:
        tg.start_soon(busy)
        await wait_for_file(marker)
        async with anyio.create_task_group() as warm:  # two more children, left idle
            warm.start_soon(run, pool, "add", 1, 1)
            warm.start_soon(run, pool, "add", 2, 2)
        pids = pool.pids
        assert len(pids) == 3
        await pool.aclose(grace=0.3)

    assert [r.outcome for r in busy_result] == [ProcessOutcome.CANCELLED]
    assert busy_result[0].sigkill
    assert pool.pids == []
    for pid in pids:
        assert not group_exists(pid)
    with pytest.raises(RuntimeError, match="closed"):
        await run(pool, "add", 1, 1)


# -- warm children: state, recycling, deaths seen early ------------------------------------


async def test_module_globals_persist_across_attempts_in_one_child(pool: ProcessPool) -> None:
    first = await run(pool, "count_calls")
    second = await run(pool, "count_calls")

    assert first.value[1] == second.value[1]  # the same warm child
    assert (first.value[0], second.value[0]) == (1, 2)


async def test_max_tasks_per_child_retires_a_child_after_that_many_answers() -> None:
    async with ProcessPool(1, max_tasks_per_child=2) as pool:
        first = await run(pool, "count_calls")
        raised = await run(pool, "raise_value_error")  # an answer too
        third = await run(pool, "count_calls")
        fourth = await run(pool, "count_calls")

        assert raised.outcome is ProcessOutcome.RAISED
        assert first.pid == raised.pid != third.pid == fourth.pid
        assert not alive(first.pid)  # retired: stopped and reaped
        assert (first.value[0], third.value[0], fourth.value[0]) == (1, 1, 2)
        assert pool.pids == [] and not alive(third.pid)  # its second answer retired it too


def test_max_tasks_per_child_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_tasks_per_child must be at least 1"):
        ProcessPool(1, max_tasks_per_child=0)


async def test_dead_child_whose_grandchild_holds_the_pipe_is_seen_at_once(
    pool: ProcessPool, tmp_path: Path
) -> None:
    # The pipe stays open (the grandchild has it), so only the exit watch sees the death.
    pid_file = tmp_path / "grandchild"
    began = time.monotonic()
    result = await run(pool, "fork_then_exit", str(pid_file), timeout=30)
    took = time.monotonic() - began

    assert result.outcome is ProcessOutcome.DIED and result.exit_code == 3
    assert took < SLACK  # not the 30 s timeout
    grandchild = int(pid_file.read_text())
    assert not alive(grandchild)  # the group was cleared with the dead leader
    again = await run(pool, "add", 1, 1)
    assert again.outcome is ProcessOutcome.RETURNED and again.pid != result.pid


async def test_caller_cancelled_before_the_call_leaves_the_warm_child_alone(
    pool: ProcessPool,
) -> None:
    first = await run(pool, "add", 1, 2)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await run(pool, "add", 1, 2)

    assert scope.cancelled_caught
    assert pool.pids == [first.pid] and alive(first.pid)  # nothing was sent, nothing stopped
    again = await run(pool, "add", 2, 2)
    assert again.value == 4 and again.pid == first.pid


async def test_deadline_and_caller_cancel_act_within_the_first_answer_only_wait() -> None:
    # Both fall inside the first 50 ms, while the attempt waits for the answer alone.
    async with ProcessPool(1) as pool:
        await run(pool, "noop")  # warm
        started = time.monotonic()
        timed = await run(pool, "spin", timeout=0.01, kill_grace=0.5)
        took = time.monotonic() - started
        assert timed.outcome is ProcessOutcome.TIMED_OUT and timed.signal == signal.SIGTERM
        assert took < 0.5 + SLACK and not group_exists(timed.pid)

        await run(pool, "noop")  # a fresh warm child
        with anyio.move_on_after(0.01) as scope:
            await run(pool, "spin", timeout=None)
        assert scope.cancelled_caught
        assert pool.pids == []  # stopped and reaped before the scope exited


async def test_cancel_already_requested_stops_the_attempt_at_once(pool: ProcessPool) -> None:
    started = time.monotonic()
    result = await run(pool, "spin", timeout=None, cancelled=lambda: True)

    assert result.outcome is ProcessOutcome.CANCELLED
    assert time.monotonic() - started < SLACK
    assert not group_exists(result.pid)
