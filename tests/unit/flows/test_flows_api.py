"""The flows facade on memory:// (SPEC §7): declaring, starting, reading, and running
executions end to end with a real burst worker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from backends.memory import MemoryStorage
from queue_core import (
    Concurrency,
    ConfigError,
    ExecutionFailed,
    JobContext,
    NotFound,
    Outcome,
    Queue,
    RetryPolicy,
    SerializationError,
)
from queue_core.flows import ExecutionReason, ExecutionState, StepState
from queue_core.storage.abilities import SupportsFlows
from tests.unit.flows.no_flows import NoFlows

FAST = {"retry_backoff": "10ms", "retry_jitter": 0}


@pytest.fixture
def queue() -> Queue:
    q = Queue("memory://")
    yield q
    q.close()


def drain(q: Queue, **options: Any) -> None:
    q.run_worker(burst=True, reap_interval=0.1, install_signal_handlers=False, **options)


def test_diamond_passes_results_by_parameter_name(queue: Queue) -> None:
    flow = queue.flow("diamond")
    seen: dict[str, object] = {}

    @flow.step
    def a(input: dict[str, int], ctx: JobContext) -> int:
        seen["ctx"] = (ctx.execution_id, ctx.step_id)
        return input["n"]

    @flow.step(depends_on=[a])
    def b(a: int) -> int:
        return a + 1

    @flow.step(depends_on=[a])
    def c(a: int) -> int:
        return a * 10

    @flow.step(depends_on=[b, c])
    def d(b: int, c: int, input: dict[str, int]) -> list[int]:
        return [b, c, input["n"]]

    execution = flow.start({"n": 4})
    assert execution.status() is ExecutionState.RUNNING
    assert [s.state for s in execution.steps()] == [StepState.QUEUED] + [StepState.PENDING] * 3
    drain(queue)
    assert execution.result(timeout=5) == {"a": 4, "b": 5, "c": 40, "d": [5, 40, 4]}
    assert seen["ctx"] == (execution.id, "a")
    steps = execution.steps()
    assert [(s.step_id, s.state, len(s.attempts)) for s in steps] == [
        ("a", StepState.SUCCEEDED, 1),
        ("b", StepState.SUCCEEDED, 1),
        ("c", StepState.SUCCEEDED, 1),
        ("d", StepState.SUCCEEDED, 1),
    ]
    assert queue.execution(execution.id).status() is ExecutionState.SUCCEEDED
    listed = queue.executions(flow=flow)
    assert [(e.id, e.flow, e.state) for e in listed] == [
        (execution.id, "diamond", ExecutionState.SUCCEEDED)
    ]


def test_a_step_without_retries_fails_the_execution(queue: Queue) -> None:
    flow = queue.flow("fails", retry=RetryPolicy(max_attempts=3, initial=0.01, jitter=0))

    @flow.step(max_attempts=1)
    def broken() -> None:
        raise ValueError("nope")

    @flow.step(depends_on=[broken])
    def after(broken: None) -> int:
        return 1

    execution = flow.start()
    drain(queue)
    with pytest.raises(ExecutionFailed) as failed:
        execution.result(timeout=5)
    err = failed.value
    assert (err.state, err.reason, err.step_id) == (
        ExecutionState.FAILED,
        ExecutionReason.STEP_FAILED,
        "broken",
    )
    steps = {s.step_id: s for s in execution.steps()}
    assert len(steps["broken"].attempts) == 1
    assert steps["after"].state is StepState.NOT_RUN


def test_flow_retry_lets_a_flaky_step_succeed_on_attempt_three(queue: Queue) -> None:
    flow = queue.flow("flaky", retry=RetryPolicy(max_attempts=3, initial=0.01, jitter=0))
    attempts: list[int] = []

    @flow.step
    def flaky(ctx: JobContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise RuntimeError(f"attempt {ctx.attempt}")
        return "ok"

    execution = flow.start()
    drain(queue)
    assert execution.result(timeout=5) == {"flaky": "ok"}
    assert attempts == [1, 2, 3]
    outcomes = [a.outcome for a in execution.steps()[0].attempts]
    assert outcomes == [Outcome.FAILED, Outcome.FAILED, Outcome.SUCCEEDED]


def test_the_worker_stops_a_step_at_the_flow_deadline(queue: Queue) -> None:
    flow = queue.flow("slow", timeout="1s", retry=RetryPolicy(max_attempts=3))

    @flow.step
    def slow(ctx: JobContext) -> None:
        end = time.monotonic() + 10
        while not ctx.cancelled and time.monotonic() < end:
            time.sleep(0.01)

    @flow.step(depends_on=[slow])
    def never(slow: None) -> None: ...

    execution = flow.start()
    started = time.monotonic()
    drain(queue)
    assert time.monotonic() - started < 5
    with pytest.raises(ExecutionFailed) as failed:
        execution.result(timeout=5)
    assert (failed.value.state, failed.value.reason, failed.value.step_id) == (
        ExecutionState.TIMED_OUT,
        ExecutionReason.FLOW_TIMEOUT,
        None,
    )
    steps = {s.step_id: s for s in execution.steps()}
    assert steps["slow"].state is StepState.TIMED_OUT
    assert [(a.outcome, a.reason) for a in steps["slow"].attempts] == [
        (Outcome.TIMED_OUT, "flow_timeout")
    ]
    # recorded by the worker (the reaper's record carries no message and no mode)
    attempt = steps["slow"].attempts[0]
    assert attempt.mode == "thread" and "flow's deadline" in (attempt.message or "")
    assert steps["never"].state is StepState.NOT_RUN


def test_declaring_refuses_bad_steps_and_unsupported_storage(queue: Queue, tmp_path: Path) -> None:
    flow = queue.flow("bad")

    @flow.step
    def one() -> int:
        return 1

    with pytest.raises(ConfigError) as unknown:
        flow.step(depends_on=["missing"])(lambda: 2)
    assert unknown.value.code == "invalid_flow"
    with pytest.raises(ConfigError) as dup:
        flow.step(id="one")(lambda: 2)
    assert dup.value.code == "invalid_flow"
    with pytest.raises(ConfigError) as conc:
        flow.step(concurrency=Concurrency(1))(lambda: 2)
    assert conc.value.code == "invalid_option"
    with pytest.raises(ConfigError) as empty:
        queue.flow("empty").start()
    assert empty.value.code == "invalid_flow"
    with pytest.raises(ConfigError) as state:
        queue.executions(state="sleeping")
    assert state.value.code == "invalid_option" and "running" in str(state.value)
    with pytest.raises(NotFound):
        queue.execution("nope")
    sql = Queue(storage=NoFlows(MemoryStorage()))  # type: ignore[arg-type]
    try:
        assert not isinstance(sql.storage(), SupportsFlows)
        flow2 = sql.flow("nowhere")
        flow2.step(id="one")(lambda: 1)
        with pytest.raises(ConfigError) as unsupported:
            flow2.start()
        assert unsupported.value.code == "unsupported"
        assert "SupportsFlows" in str(unsupported.value)
    finally:
        sql.close()


def test_concurrency_queue_and_skip_through_the_facade(queue: Queue) -> None:
    queued = queue.flow("one-at-a-time", concurrency=Concurrency(1))
    skipping = queue.flow("skipper", concurrency=Concurrency(1, behavior="skip"))
    for f in (queued, skipping):
        f.step(id="work")(lambda: "done")
    first, second = queued.start(), queued.start()
    assert (first.status(), second.status()) == (ExecutionState.RUNNING, ExecutionState.QUEUED)
    kept, skipped = skipping.start(), skipping.start()
    assert skipped.status() is ExecutionState.SKIPPED
    with pytest.raises(ExecutionFailed) as refused:
        skipped.result(timeout=1)
    assert refused.value.reason is ExecutionReason.CONCURRENCY_LIMIT
    drain(queue)
    assert second.result(timeout=5) == {"work": "done"}
    assert kept.result(timeout=5) == {"work": "done"}
    assert [e.id for e in queue.executions(state="skipped")] == [skipped.id]


def test_cancel_a_running_execution(queue: Queue) -> None:
    flow = queue.flow("cancel-me")
    flow.step(id="a")(lambda: 1)
    flow.step(id="b", depends_on=["a"])(lambda a: a)
    execution = flow.start()
    assert execution.cancel() is ExecutionState.CANCELLED
    assert [s.state for s in execution.steps()] == [StepState.NOT_RUN, StepState.NOT_RUN]
    with pytest.raises(ExecutionFailed) as cancelled:
        execution.result(timeout=1)
    assert cancelled.value.reason is ExecutionReason.CANCELLED


def test_an_async_step_is_cancelled_at_the_flow_deadline(queue: Queue) -> None:
    import anyio

    flow = queue.flow("slow-async", timeout="1s")

    @flow.step
    async def wait() -> None:
        await anyio.sleep(30)

    execution = flow.start()
    started = time.monotonic()
    drain(queue)
    assert time.monotonic() - started < 5
    (step,) = execution.steps()
    assert (step.state, [(a.outcome, a.reason, a.mode) for a in step.attempts]) == (
        StepState.TIMED_OUT,
        [(Outcome.TIMED_OUT, "flow_timeout", "async")],
    )
    assert execution.status() is ExecutionState.TIMED_OUT


def test_max_parallel_holds_with_a_real_worker(queue: Queue) -> None:
    import threading

    flow = queue.flow("bounded", max_parallel=2)
    lock = threading.Lock()
    running = [0]
    peak = [0]

    def body() -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return 1

    for i in range(6):
        flow.step(id=f"s{i}")(body)
    execution = flow.start()
    drain(queue)
    assert execution.result(timeout=5) == {f"s{i}": 1 for i in range(6)}
    assert peak[0] == 2


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_executions_takes_a_workflow_and_refuses_other_values(backend: str, tmp_path: Path) -> None:
    url = "memory://" if backend == "memory" else f"sqlite:///{tmp_path / 'q.db'}"
    q = Queue(url)
    try:
        flow = q.flow("listed")
        flow.step(id="one")(lambda: 1)

        @q.workflow
        def listed_wf(ctx: Any) -> int:
            return 1

        started, other = listed_wf.start(), flow.start()
        got = q.executions(flow=listed_wf)
        assert [(e.id, e.flow) for e in got] == [(started.id, listed_wf.name)]
        assert [e.id for e in q.executions(flow=listed_wf.name)] == [started.id]
        assert [e.id for e in q.executions(flow=flow)] == [other.id]
        for bad in (42, b"listed", ["listed"]):
            with pytest.raises(ConfigError) as refused:
                q.executions(flow=bad)  # type: ignore[arg-type]
            assert refused.value.code == "invalid_option", bad
            assert repr(bad) in str(refused.value) and "Workflow" in str(refused.value)
    finally:
        q.close()


def test_an_input_that_cannot_be_serialized_names_the_flow_and_stores_nothing() -> None:
    q = Queue("memory://")
    flow = q.flow("orders")
    flow.step(id="one")(lambda input: 1)

    with pytest.raises(SerializationError) as refused:
        flow.start(object())
    assert "the input of flow 'orders' (object) cannot be serialized" in str(refused.value)
    assert q.executions() == []
