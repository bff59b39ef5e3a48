"""The claim loop's bookkeeping under prefetch, over many shapes (Hypothesis): every job a
worker claims is run exactly once per attempt it spends or given back, never both and
never lost -- whatever the slots, the prefetch depth, the jobs' outcomes and whether the
worker drains them all or is stopped while it holds some.

On a manual clock (no timer of the worker fires: nothing here waits on time), bodies
gated by the test where a stop must find jobs running and held."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.memory import MemoryStorage
from queue_core import JobState, Outcome, Queue
from queue_core.testing import T0, ManualClock
from queue_core.worker import Worker
from tests.unit.worker.conftest import until

_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _app(outcomes: list[str]) -> tuple[Queue, Any, list[int], threading.Event]:
    """A queue on a manual clock and a task whose body ``i`` records its run, waits for
    the gate, then succeeds or raises as ``outcomes[i]`` says (no retry)."""
    clock = ManualClock(start_ms=T0)
    queue = Queue(storage=MemoryStorage(clock=clock), clock=clock, lease=30)
    runs: list[int] = []
    gate = threading.Event()

    @queue.task(name="body", max_retries=0)
    def body(i: int) -> int:
        runs.append(i)
        gate.wait(30)
        if outcomes[i] == "fail":
            raise ValueError(f"job {i} fails")
        return i

    return queue, body, runs, gate


def _worker(queue: Queue, slots: int, prefetch: int, **kw: Any) -> Worker:
    return Worker(queue, install_signal_handlers=False, slots=slots, prefetch=prefetch,
                  reap_interval=3600, presence_ttl=9000, **kw)  # fmt: skip


def _check_runs(handles: list[Any], runs: list[int], outcomes: list[str]) -> None:
    """Each job ended as its body said, and ran once per attempt that ran a body."""
    assert Counter(runs) == Counter(range(len(handles))), "each body ran exactly once"
    for i, h in enumerate(handles):
        want = JobState.SUCCEEDED if outcomes[i] == "ok" else JobState.DEAD
        assert h.status() is want, (i, h.status())
        ran = [a for a in h.attempts() if a.outcome is not Outcome.LOST]
        assert len(ran) == 1 and ran[0].started_at <= ran[0].finished_at


@_SETTINGS
@given(
    slots=st.integers(1, 4),
    prefetch=st.integers(0, 6),
    outcomes=st.lists(st.sampled_from(["ok", "fail"]), min_size=1, max_size=24),
)
def test_a_burst_drain_runs_every_job_once(slots: int, prefetch: int, outcomes: list[str]) -> None:
    queue, body, runs, gate = _app(outcomes)
    gate.set()
    handles = [body.delay(i) for i in range(len(outcomes))]
    worker = _worker(queue, slots, prefetch, burst=True)
    worker.run()
    _check_runs(handles, runs, outcomes)
    assert all(len(h.attempts()) == 1 for h in handles), "nothing was given back"
    assert worker.stats()["prefetched"] == 0


@_SETTINGS
@given(
    slots=st.integers(1, 3),
    prefetch=st.integers(0, 5),
    outcomes=st.lists(st.sampled_from(["ok", "fail"]), min_size=1, max_size=16),
)
def test_a_stop_gives_back_what_it_held_and_a_second_worker_runs_it(
    slots: int, prefetch: int, outcomes: list[str]
) -> None:
    """A worker stopped while its slots run and it holds jobs: the running bodies finish
    (within the grace), the held jobs go back queued with a ``lost`` /
    ``worker_shutdown`` attempt that spent nothing, the rest stay untouched; a second
    worker then runs every job not run yet, once."""
    queue, body, runs, gate = _app(outcomes)
    handles = [body.delay(i) for i in range(len(outcomes))]
    n = len(outcomes)
    running_n, held_n = min(slots, n), min(prefetch, max(0, n - slots))
    worker = _worker(queue, slots, prefetch, shutdown_grace=30)

    async def first() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run_async)
            await until(lambda: len(runs) == running_n, "every slot runs a body")
            await until(lambda: worker.stats()["prefetched"] == held_n, "the jobs held")
            worker.stop()
            await until(
                lambda: sum(h.status() is JobState.QUEUED for h in handles) == n - running_n,
                "the held jobs are given back while the bodies still run",
            )
            assert len(runs) == running_n
            gate.set()

    anyio.run(first)
    first_runs = list(runs)
    assert len(first_runs) == running_n, "a stopping worker starts nothing it held"
    for i, h in enumerate(handles):
        if i in first_runs:
            continue
        assert h.status() is JobState.QUEUED
        # held or never claimed, alike: memory:// gives held jobs back unstarted
        assert h.attempts() == [] and h.info().attempts == 0, "a give-back spends nothing"
        assert h.info().max_attempts == 1
    _worker(queue, slots, prefetch, burst=True).run()
    _check_runs(handles, runs, outcomes)
