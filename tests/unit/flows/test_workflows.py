"""Durable workflows on memory:// with a real in-process burst worker (SPEC §12).

Storage runs on a manual clock: a sleep of a day is a burst that ends with the workflow
``waiting``, then ``clock.advance`` and another burst. Nothing sleeps for timing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from backends.memory import MemoryStorage
from queue_core import (
    ChildFailed,
    ConfigError,
    DurableContext,
    EventTimeout,
    ExecutionFailed,
    Outcome,
    Queue,
    RetryPolicy,
    TaskError,
)
from queue_core.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.jobs import JobState
from queue_core.testing import DAY, HOUR, T0, ManualClock
from tests.unit.flows.no_flows import NoFlows

E = ExecutionState


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=T0)


@pytest.fixture
def queue(clock: ManualClock) -> Iterator[Queue]:
    q = Queue(storage=MemoryStorage(clock=clock.now_ms))
    yield q
    q.close()


def drain(q: Queue, **options: Any) -> None:
    q.run_worker(burst=True, reap_interval=0.1, install_signal_handlers=False, **options)


def outcomes(execution: Any) -> list[tuple[Outcome | None, str | None]]:
    main = execution.steps()[0]
    return [(a.outcome, a.reason) for a in main.attempts]


def test_a_step_runs_once_across_a_sleep_and_the_result_is_the_function_s(
    queue: Queue, clock: ManualClock
) -> None:
    calls: list[int] = []

    def fetch(user_id: int) -> dict[str, Any]:
        calls.append(user_id)
        return {"name": f"user {user_id}", "n": (1, 2)}

    @queue.workflow(timeout="30d", retry=RetryPolicy(max_attempts=1))
    async def onboard(ctx: DurableContext, user_id: int) -> str:
        profile = await ctx.step("fetch-profile", fetch, user_id)
        await ctx.sleep("1d")
        return f"{profile['name']} {profile['n']}"  # as it came back from JSON: a list

    execution = onboard.start(42)
    drain(queue)
    assert execution.status() is E.WAITING
    assert outcomes(execution) == [(Outcome.SUSPENDED, "sleep")]
    job = queue.storage().get_job(execution.steps()[0].job_id or "")
    assert job is not None and (job.state, job.max_attempts) == (JobState.QUEUED, 2)
    clock.advance_ms(DAY - 1)  # the wake time is a day after the sleep began: not yet
    assert queue.storage().claim("probe", ["default"], 1, 1_000) == []
    clock.advance(1)  # (the sleep began a few ms into the attempt)
    drain(queue)
    assert execution.result(timeout=5) == "user 42 [1, 2]"
    assert calls == [42]
    assert outcomes(execution) == [(Outcome.SUSPENDED, "sleep"), (Outcome.SUCCEEDED, None)]


def test_a_plain_workflow_waits_for_children_and_gathers_their_results(queue: Queue) -> None:
    @queue.task
    def double(x: int) -> int:
        return 2 * x

    @queue.workflow
    def fan_out(ctx: DurableContext, xs: list[int]) -> list[int]:
        kids = [ctx.run(double, x) for x in xs]
        first = ctx.run(double, 100).result()
        return [first, *ctx.gather(*kids)]

    execution = fan_out.start([1, 2, 3])
    drain(queue)
    assert execution.result(timeout=5) == [200, 2, 4, 6]
    steps = execution.steps()
    assert [s.step_id for s in steps] == [
        "main",
        *(f"{double.name}#{n}" for n in range(4)),
    ]
    assert all(s.state is StepState.SUCCEEDED for s in steps)
    assert outcomes(execution)[0] == (Outcome.SUSPENDED, "children")


def test_the_slot_is_free_while_a_workflow_sleeps(queue: Queue) -> None:
    ran: list[str] = []

    @queue.task
    def plain() -> None:
        ran.append("plain")

    @queue.workflow
    async def napping(ctx: DurableContext) -> None:
        await ctx.sleep("1h")

    execution = napping.start()
    handle = plain.delay()
    drain(queue, slots=1)  # one slot: the plain job runs while the workflow sleeps
    assert ran == ["plain"] and handle.status() is JobState.SUCCEEDED
    assert execution.status() is E.WAITING


def test_an_event_wakes_its_wait_and_a_missing_one_times_out(
    queue: Queue, clock: ManualClock
) -> None:
    @queue.workflow
    async def approve(ctx: DurableContext, user: str) -> str:
        try:
            decision = await ctx.wait_for_event("approval", key=user, timeout="1h")
        except EventTimeout as exc:
            return f"expired ({exc.name}, {exc.key})"
        return f"approved by {decision['by']}"

    ann, bob = approve.start("ann"), approve.start("bob")
    assert queue.send_event("approval", key="ann", data={"by": "early"}) == 0  # before waits
    clock.advance_ms(1)
    drain(queue)
    assert ann.status() is bob.status() is E.WAITING
    clock.advance(1)  # the waits began a few ms into their attempts
    assert queue.send_event("approval", key="ann", data={"by": "carol"}) == 1
    assert queue.send_event("approval", key="ann", data={"by": "again"}) == 0
    drain(queue)
    assert ann.result(timeout=5) == "approved by carol"
    clock.advance_ms(HOUR)
    drain(queue)
    assert bob.result(timeout=5) == "expired (approval, bob)"


def test_a_dead_child_raises_child_failed_with_its_dead_letter(queue: Queue) -> None:
    @queue.task
    def boom(x: int) -> int:
        raise TaskError.fatal(f"no {x}")

    @queue.workflow
    async def careful(ctx: DurableContext) -> str:
        try:
            await ctx.run(boom, 7)
        except ChildFailed as exc:
            assert exc.dead is not None and exc.dead_job is exc.dead
            return f"{exc.job_id == ctx.execution_id + '.1'} {exc.dead.error} {exc.dead.args}"
        return "no"

    execution = careful.start()
    drain(queue)
    assert execution.result(timeout=5) == "True no 7 (7,)"
    assert execution.status() is E.SUCCEEDED  # a dead child fails nothing by itself


def test_a_sub_flow_s_result_is_its_result(queue: Queue) -> None:
    sync = queue.flow("sync-orders")

    @sync.step
    def count(input: dict[str, int]) -> int:
        return input["n"] * 2

    failing = queue.flow("failing")

    @failing.step(max_attempts=1)
    def fail(input: Any) -> None:
        raise ValueError("no")

    @queue.workflow
    async def parent(ctx: DurableContext) -> Any:
        report = await ctx.run_flow(sync, {"n": 21})
        try:
            await ctx.run_flow(failing)
        except ExecutionFailed as exc:
            return [report, exc.state.value, exc.step_id]
        return "no"

    execution = parent.start()
    drain(queue)
    assert execution.result(timeout=5) == [{"count": 42}, "failed", "fail"]
    assert [s.step_id for s in execution.steps()] == ["main", "sync-orders#0", "failing#1"]
    sub = queue.execution(execution.id + ".1")
    assert sub.result(timeout=5) == {"count": 42}


def test_a_second_use_of_a_step_id_fails_the_workflow_at_once(queue: Queue) -> None:
    @queue.workflow(retry=RetryPolicy(max_attempts=3))
    def twice(ctx: DurableContext) -> None:
        ctx.step("a", lambda: 1)
        ctx.step("a", lambda: 2)

    execution = twice.start()
    drain(queue)
    with pytest.raises(ExecutionFailed) as failed:
        execution.result(timeout=5)
    assert (failed.value.state, failed.value.step_id) == (E.FAILED, "main")
    [entry] = queue.dead_letters(task_name=twice.name)
    assert (entry.reason, entry.error_class, len(entry.attempts)) == ("fatal", "ConfigError", 1)
    assert "step id 'a' is used twice" in (entry.error or "")


def test_retry_resumes_a_failed_workflow_and_replay_reruns_from_a_step(queue: Queue) -> None:
    calls: list[str] = []
    broken = {"b": True}

    def a() -> str:
        calls.append("a")
        return "A"

    def b() -> str:
        calls.append("b")
        if broken["b"]:
            raise ValueError("b is broken")
        return "B"

    @queue.workflow
    def steps(ctx: DurableContext) -> str:
        return ctx.step("a", a) + ctx.step("b", b) + ctx.step("c", lambda: "C")

    execution = steps.start()
    drain(queue)
    assert execution.status() is E.FAILED
    broken["b"] = False
    assert execution.retry() is E.RUNNING
    drain(queue)
    assert execution.result(timeout=5) == "ABC"
    assert calls == ["a", "b", "b"]  # a kept its result
    assert execution.replay("b") is E.RUNNING
    drain(queue)
    assert execution.result(timeout=5) == "ABC"
    assert calls == ["a", "b", "b", "b"]
    with pytest.raises(ConfigError) as unknown:
        execution.replay("nope")
    assert unknown.value.code == "invalid_option" and "'a'" in str(unknown.value)


@pytest.mark.parametrize("replayed", ["count#0", "before", "main"])
def test_a_replay_that_runs_children_again_finishes(queue: Queue, replayed: str) -> None:
    """Replaying a child, a step before it or the whole function runs the children again
    as new steps -- ``<task>#<n>.1``, beside the earlier ones kept in the history -- and the
    function resumes with their results (it waited for ever on a step id that named the
    earlier child)."""
    runs = {"count": 0, "after": 0}

    @queue.task(name="count")
    def count(x: int) -> int:
        runs["count"] += 1
        return x + runs["count"]

    sub = queue.flow("sub-once")

    @sub.step
    def once(input: Any) -> str:
        return "flowed"

    @queue.workflow
    async def parent(ctx: DurableContext) -> list[Any]:
        await ctx.step("before", lambda: None)
        got = [await ctx.run(count, 1), await ctx.run_flow(sub)]
        await ctx.step("after", lambda: runs.__setitem__("after", runs["after"] + 1))
        return got

    execution = parent.start()
    drain(queue)
    assert execution.result(timeout=5) == [2, {"once": "flowed"}]
    assert execution.replay(replayed) is E.RUNNING
    drain(queue)

    assert execution.result(timeout=5) == [3, {"once": "flowed"}]
    assert runs == {"count": 2, "after": 2}
    ids = [s.step_id for s in execution.steps()]
    assert ids == ["main", "count#0", "sub-once#1", "count#0.1", "sub-once#1.1"]
    assert all(s.state is StepState.SUCCEEDED for s in execution.steps())


def test_retry_dead_of_a_flow_step_resumes_its_execution(queue: Queue) -> None:
    flow = queue.flow("resumable")
    broken = {"b": True}

    @flow.step
    def a() -> int:
        return 1

    @flow.step(depends_on=[a], max_attempts=1)
    def b(a: int) -> int:
        if broken["b"]:
            raise ValueError("b is broken")
        return a + 1

    execution = flow.start()
    drain(queue)
    assert execution.status() is E.FAILED
    [entry] = queue.dead_letters()
    broken["b"] = False
    assert queue.retry_dead(entry.id) == entry.job_id
    assert queue.dead_letters() == []
    drain(queue)
    assert execution.result(timeout=5) == {"a": 1, "b": 2}
    attempts = execution.steps()[1].attempts
    assert [(x.number, x.outcome) for x in attempts] == [
        (1, Outcome.FAILED),
        (2, Outcome.SUCCEEDED),
    ]


def test_the_deadline_of_a_sleeping_workflow_is_enforced(queue: Queue, clock: ManualClock) -> None:
    @queue.workflow(timeout="1h")
    async def late(ctx: DurableContext) -> None:
        await ctx.sleep("1d")

    execution = late.start()
    drain(queue)
    clock.advance_ms(HOUR + 5_000)
    queue.storage().reap()
    with pytest.raises(ExecutionFailed) as failed:
        execution.result(timeout=5)
    assert (failed.value.state, failed.value.reason) == (E.TIMED_OUT, ExecutionReason.FLOW_TIMEOUT)


def test_a_waiting_workflow_keeps_its_concurrency_place(queue: Queue, clock: ManualClock) -> None:
    from queue_core import Concurrency

    @queue.workflow(concurrency=Concurrency(1, key=lambda user: user))
    async def per_user(ctx: DurableContext, user: str) -> None:
        await ctx.wait_for_event("go", key=user)

    first, other, second = per_user.start("ann"), per_user.start("bob"), per_user.start("ann")
    drain(queue)
    assert (first.status(), other.status(), second.status()) == (E.WAITING, E.WAITING, E.QUEUED)
    clock.advance(1)  # the waits began a few ms into their attempts
    assert queue.send_event("go", key="ann") == 1
    clock.advance(1)  # the second waits for an event sent after this one
    drain(queue)
    assert first.status() is E.SUCCEEDED and second.status() is E.WAITING


def test_cancel_ends_a_waiting_workflow(queue: Queue) -> None:
    parked = queue.workflow(name="parked")(_parked)
    held = parked.start()
    drain(queue)
    assert held.status() is E.WAITING
    assert held.cancel() is E.CANCELLED
    assert [s.state for s in held.steps()] == [StepState.NOT_RUN]
    with pytest.raises(ExecutionFailed):
        held.result(timeout=5)


async def _parked(ctx: DurableContext) -> None:
    await ctx.wait_for_event("never")


def test_steps_retry_inside_the_attempt_and_sync_and_async_steps_mix(queue: Queue) -> None:
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ValueError("flaky")
        return "ok"

    async def async_step(x: int) -> int:
        return x + 1

    @queue.workflow
    def plain(ctx: DurableContext) -> list[Any]:
        quick = RetryPolicy(max_attempts=3, initial="1ms", jitter=0)
        return [ctx.step("flaky", flaky, retry=quick), ctx.step("async", async_step, 1)]

    @queue.workflow
    async def coro(ctx: DurableContext) -> int:
        return int(await ctx.step("sync", lambda: 5)) + int(await ctx.step("a", async_step, 1))

    p, c = plain.start(), coro.start()
    drain(queue)
    assert p.result(timeout=5) == ["ok", 2]
    assert len(tries) == 3 and len(p.steps()[0].attempts) == 1
    assert c.result(timeout=5) == 7


def test_a_child_never_waited_for_still_runs() -> None:
    """On the storage's real clock: the function's end is recorded on its next run, which
    is ready at the attempt's start plus the time it ran (``DurableRun.now``, the worker's
    monotonic clock), a time a frozen manual storage clock never reaches."""
    queue = Queue(storage=MemoryStorage())
    ran: list[int] = []

    @queue.task
    def note(x: int) -> None:
        ran.append(x)

    @queue.workflow
    async def fire_and_forget(ctx: DurableContext) -> str:
        ctx.run(note, 1)
        return "done"

    try:
        execution = fire_and_forget.start()
        drain(queue)
        assert execution.result(timeout=5) == "done"
        assert ran == [1]
    finally:
        queue.close()


def test_a_replay_that_changed_its_children_is_refused(queue: Queue) -> None:
    @queue.task
    def one() -> int:
        return 1

    @queue.task
    def two() -> int:
        return 2

    flip = {"task": one}

    @queue.workflow
    async def drifting(ctx: DurableContext) -> int:
        return int(await ctx.run(flip["task"]))

    execution = drifting.start()
    queue.run_worker(burst=True, install_signal_handlers=False, queues=["default"], slots=1)
    assert execution.status() is E.SUCCEEDED
    flip["task"] = two
    execution.replay("main")  # the memos go: a fresh run may take another path
    drain(queue)
    assert execution.result(timeout=5) == 2


def test_bad_declarations_and_calls_are_refused_early(queue: Queue) -> None:
    def no_context() -> None:
        pass

    with pytest.raises(ConfigError) as bad:
        queue.workflow(no_context)  # type: ignore[arg-type]
    assert "first parameter" in str(bad.value)

    @queue.workflow
    async def takes(ctx: DurableContext, a: int) -> None:
        pass

    with pytest.raises(TypeError):
        takes.start(1, 2)  # type: ignore[call-arg]
    with pytest.raises(ConfigError) as key:
        queue.send_event("e", key=42)  # type: ignore[arg-type]
    assert (key.value.code, key.value.field) == ("invalid_option", "key")
    plain = Queue(storage=NoFlows(MemoryStorage()))  # type: ignore[arg-type]

    @plain.workflow
    async def nowhere(ctx: DurableContext) -> None:
        pass

    with pytest.raises(ConfigError) as unsupported:
        nowhere.start()
    assert unsupported.value.code == "unsupported" and "SupportsWorkflows" in str(unsupported.value)


def test_memory_keeps_nothing_of_a_pruned_workflow(clock: ManualClock) -> None:
    """Memos, events, waits, children and sub-executions go with their execution: after a
    prune at retention 0, memory holds nothing, however many workflows ran."""
    storage = MemoryStorage(clock=clock.now_ms, retention_ms=0)
    queue = Queue(storage=storage)
    sub = queue.flow("sub", concurrency=1)

    @sub.step
    def one() -> int:
        return 1

    @queue.task
    def child(x: int) -> int:
        return x

    @queue.workflow(concurrency=1)
    async def busy(ctx: DurableContext, n: int) -> int:
        got = await ctx.wait_for_event("go", key=str(n))
        kids = await ctx.gather(*(ctx.run(child, i) for i in range(3)))
        await ctx.run_flow(sub)
        return int(await ctx.step("sum", lambda: sum(kids) + got))

    @queue.workflow
    async def lapsed(ctx: DurableContext) -> str:
        try:
            await ctx.wait_for_event("never", timeout="2m")  # past a burst's 60 s
        except EventTimeout:
            return "expired"  # its wait stays registered until the workflow ends
        return "no"

    for round_ in range(3):
        executions = [busy.start(n) for n in range(4)]
        expired = lapsed.start()
        for n in range(4):
            drain(queue)
            clock.advance(1)
            queue.send_event("go", key=str(n), data=n)
            queue.send_event("nobody-waits", data=round_)
        clock.advance(180)
        drain(queue)
        assert [e.result(timeout=5) for e in executions] == [3, 4, 5, 6]
        assert expired.result(timeout=5) == "expired"
        clock.advance(1)
        storage.prune()
        flows = storage.flows
        assert (storage.store.jobs, flows.executions, flows.waiters, flows.events) == (
            {},
            {},
            {},
            {},
        )
        assert (storage.store.flow_events, storage.store.flows_finished, flows.by_key) == (
            [],
            [],
            {},
        )


def test_ctx_run_takes_a_task_and_ctx_run_flow_a_flow(queue: Queue) -> None:
    @queue.workflow
    async def inner(ctx: DurableContext) -> None:
        pass

    @queue.workflow(retry=RetryPolicy(max_attempts=3))
    async def wrong(ctx: DurableContext, which: str) -> None:
        if which == "run":
            await ctx.run(inner.task)
        else:
            await ctx.run_flow(inner)  # type: ignore[arg-type]

    for which, field in (("run", "task"), ("flow", "flow")):
        execution = wrong.start(which)
        drain(queue)
        assert execution.status() is E.FAILED  # at once: a ConfigError is not retried
        [attempt] = execution.steps()[0].attempts
        assert (
            attempt.error_class == "ConfigError"
            and f"ctx.run{'' if field == 'task' else '_flow'}:" in (attempt.message or "")
        )
