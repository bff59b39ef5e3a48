"""A workflow attempt's clock (``WorkflowRun.now``): storage's stamp of the attempt's start
plus the time elapsed since, in whole milliseconds -- rounded up where it is the base of a
time to come (a sleep's wake time, an event wait's timeout), so that neither is a fraction
of a millisecond short (SPEC §12: a sleep resumes at its wake time, never earlier)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from queue_core.app.durable_run import Suspend, WorkflowRun

START_MS = 5_000


def _run(elapsed_s: list[float]) -> WorkflowRun:
    state: Any = SimpleNamespace(memos={}, steps=[], execution=SimpleNamespace(id="wf-1"))
    run = WorkflowRun(
        storage=None,  # type: ignore[arg-type]  # nothing here reaches storage
        owner=None,  # type: ignore[arg-type]
        state=state,
        ref=None,  # type: ignore[arg-type]
        started_at=START_MS,
        monotonic=lambda: 100.0 + elapsed_s[0],
    )
    return run


def test_now_rounds_down_and_up_within_a_millisecond() -> None:
    elapsed = [0.0]
    run = _run(elapsed)
    elapsed[0] = 0.0004

    assert run.now() == START_MS  # what has passed: rounded down
    assert run.now(up=True) == START_MS + 1  # the base of a time to come: rounded up


def test_a_sleep_wakes_no_sooner_than_its_duration_after_the_call() -> None:
    elapsed = [0.0]
    run = _run(elapsed)
    elapsed[0] = 0.0004  # the call comes 0.4 ms into the attempt

    with pytest.raises(Suspend) as stop:
        run.sleep_until(None, 1_500)

    assert stop.value.suspension.ready_at == START_MS + 1 + 1_500  # not START_MS + 1_500


def test_an_event_wait_times_out_no_sooner_than_its_timeout_after_the_call() -> None:
    elapsed = [0.0]
    run = _run(elapsed)
    elapsed[0] = 0.0004

    with pytest.raises(Suspend) as stop:
        run.wait_for_event("paid", None, 2_000)

    wait = stop.value.suspension.wait
    assert wait is not None
    assert wait.since == START_MS  # an event stamped in this millisecond still counts
    assert wait.until == START_MS + 1 + 2_000


def test_a_workflow_held_ahead_of_a_free_slot_still_sleeps_its_whole_duration() -> None:
    """A worker claims the workflow's attempt ahead of its one slot (prefetch) while
    another job runs: storage stamped the attempt's start at the claim, 0.6 s before the
    body starts. The workflow's clock counts from the body's start, so its sleep still
    lasts 0.3 s (it came back at once when the clock ran from the claim's stamp)."""
    import time

    from queue_core import DurableContext, Queue, RetryPolicy

    queue = Queue("memory://")

    @queue.task(priority=5)
    def hold(seconds: float) -> None:
        time.sleep(seconds)

    @queue.workflow(retry=RetryPolicy(max_attempts=1))
    async def napper(ctx: DurableContext) -> float:
        before = await ctx.step("before", time.time)
        await ctx.sleep(0.3)
        return time.time() - before

    hold.delay(0.6)
    execution = napper.start()
    queue.run_worker(burst=True, install_signal_handlers=False, slots=1, reap_interval=0.1)

    assert execution.result(timeout=5) >= 0.3
    queue.close()


def test_an_event_wait_begins_before_the_clock_by_its_slack() -> None:
    """A held attempt's clock may be ahead of storage's by its claim call's length (the
    stamp is somewhere within the call): the wait begins that much earlier, its timeout
    still counts from the upper bound."""
    elapsed = [0.0]
    run = _run(elapsed)
    run.slack_ms = 40
    elapsed[0] = 0.0004

    with pytest.raises(Suspend) as stop:
        run.wait_for_event("paid", None, 2_000)

    wait = stop.value.suspension.wait
    assert wait is not None
    assert (wait.since, wait.until) == (START_MS - 40, START_MS + 1 + 2_000)


def test_an_event_sent_once_a_held_workflow_waits_wakes_it() -> None:
    """Storage stamps a held attempt at the end of a slow claim call: the workflow's
    clock (counted from the call's start) runs ahead of storage's by the call's length,
    and an event sent as soon as the execution is ``waiting`` was missed (sent 0)."""
    import threading
    import time

    from backends.memory import MemoryStorage
    from queue_core import DurableContext, Queue
    from queue_core.records.flows import ExecutionState

    class SlowAhead(MemoryStorage):
        def claim_ahead(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(0.3)  # the call's length before storage stamps the claim
            return super().claim_ahead(*args, **kwargs)

    queue = Queue(storage=SlowAhead())

    @queue.workflow
    async def approval(ctx: DurableContext) -> Any:
        return await ctx.wait_for_event("approve", key="k", timeout="20s")

    execution = approval.start()
    worker = threading.Thread(
        target=queue.run_worker,
        kwargs={"burst": True, "install_signal_handlers": False, "slots": 1, "reap_interval": 0.1},
        daemon=True,
    )
    worker.start()  # a burst worker ends once the workflow is done
    deadline = time.monotonic() + 20
    while execution.status() is not ExecutionState.WAITING and time.monotonic() < deadline:
        time.sleep(0.001)  # a condition on state, polled
    assert queue.send_event("approve", key="k", data={"by": "ann"}) == 1
    assert execution.result(timeout=20) == {"by": "ann"}
    worker.join(20)
    queue.close()
