"""``ctx.progress`` in a process-isolated body (SPEC §13): checked in the child as the thread
``ctx`` checks it, throttled there to what the worker writes (the first report at once,
then at most one per second, the latest kept), carried by ``("pg", fraction, message)``
frames on both wait paths, and stored like a thread body's report."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from queue_core import JobContext, JobState, Queue
from queue_core.records.errors import ConfigError
from queue_core.rules import control
from queue_core.worker.process import ProcessOutcome, ProcessPool, ProcessResult
from queue_core.worker.process.child import ChildContext
from queue_core.worker.process.children import Child, request_of
from queue_core.worker.process_runs import ProcessRuns
from tests.unit.worker import process_tasks
from tests.unit.worker.conftest import drain
from tests.unit.worker.test_process_isolation import SLACK

TASKS = process_tasks.__name__
EVERY = control.PROGRESS_EVERY_MS / 1000.0

BAD_CALLS: list[tuple[Any, Any]] = [
    (1.5, None),
    (-0.1, "x"),
    (math.nan, None),
    (math.inf, None),
    (True, None),
    ("0.5", None),
    (None, None),
    (0.5, 42),
    (0.5, b"bytes"),
]
"""``ctx.progress`` arguments the thread ``ctx`` refuses with a ``ConfigError``."""


Seen = list[tuple[float, "str | None", float]]


def _sink(seen: Seen) -> Any:
    """A progress callback that records ``(fraction, message, arrival)``."""
    return lambda fraction, message: seen.append((fraction, message, time.monotonic()))


def run_direct(pool: ProcessPool, qualname: str, *args: Any, seen: Seen) -> ProcessResult:
    """One direct attempt (``ProcessPool.run_direct``) of ``process_tasks.<qualname>``."""
    request = request_of(
        TASKS, qualname, args, {}, job_id="job-1", attempt=1, timeout=10.0,
        heartbeat_every=1.0, wants_ctx=True, execution_id=None, step_id=None, carried=(),
    )  # fmt: skip
    return pool.run_direct(
        request,
        timeout=10.0,
        kill_grace=0.5,
        heartbeat=None,
        progress=_sink(seen),
        cancelled=lambda: False,
    )


def run_loop(pool: ProcessPool, qualname: str, *args: Any, seen: Seen) -> ProcessResult:
    """One attempt on the event-loop path (``ProcessPool.run``)."""

    async def main() -> ProcessResult:
        return await pool.run(
            TASKS, qualname, args, {}, job_id="job-1", attempt=1, timeout=10.0,
            kill_grace=0.5, progress=_sink(seen), wants_ctx=True,
        )  # fmt: skip

    return anyio.run(main)


PATHS = pytest.mark.parametrize("path", [run_direct, run_loop], ids=["direct", "loop"])


# -- the child's throttle, on a recording pipe --------------------------------------------------


class _Frames:
    """Stands in for the child's pipe: records what is sent."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.lock = threading.Lock()

    def send(self, message: Any) -> None:
        with self.lock:
            self.sent.append(message)


def _ctx(frames: _Frames) -> ChildContext:
    return ChildContext(frames, job_id="j", attempt=1, deadline=None, heartbeat_every=1.0)  # type: ignore[arg-type]


def test_the_first_report_goes_at_once_the_latest_waits_and_goes_before_the_end() -> None:
    frames = _Frames()
    ctx = _ctx(frames)
    ctx.progress(0.1, "first")
    ctx.progress(0.2)
    ctx.progress(0.3, "latest")
    assert frames.sent == [("pg", 0.1, "first")]  # the others came within a second
    ctx._close()
    assert frames.sent == [("pg", 0.1, "first"), ("pg", 0.3, "latest")]
    with pytest.raises(RuntimeError, match="outside its attempt"):
        ctx.progress(0.9)
    with pytest.raises(ConfigError):  # the arguments are checked first, as JobContext does
        ctx.progress(2.0)
    time.sleep(EVERY + 0.2)
    assert len(frames.sent) == 2  # nothing after the end


def test_a_waiting_report_goes_when_due_without_another_call() -> None:
    frames = _Frames()
    ctx = _ctx(frames)
    ctx.progress(0.1)
    ctx.progress(0.2, "waits")
    deadline = time.monotonic() + EVERY + SLACK
    while len(frames.sent) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert frames.sent == [("pg", 0.1, None), ("pg", 0.2, "waits")]
    ctx._close()
    assert len(frames.sent) == 2  # it went: nothing waits at the end


# -- real children, both wait paths --------------------------------------------------------------


@PATHS
def test_progress_frames_reach_the_callback_with_the_values_sent(
    pool: ProcessPool, path: Any
) -> None:
    seen: Seen = []
    reports = [(0.25, "quarter"), (0.5, None), (1, "done")]
    result = path(pool, "report_progress", reports, seen=seen)

    assert result.outcome is ProcessOutcome.RETURNED and result.value == 3
    # the first at once; 0.5 came within the second and was replaced by the latest, which
    # went before the answer
    assert [(f, m) for f, m, _ in seen] == [(0.25, "quarter"), (1.0, "done")]
    assert [type(f) for f, _, _ in seen] == [float, float]

    seen.clear()  # the next attempt in the same warm child starts its own throttle
    again = path(pool, "report_progress", [(0.75, "again")], seen=seen)
    assert again.value == 1 and [(f, m) for f, m, _ in seen] == [(0.75, "again")]


@PATHS
def test_a_waiting_report_reaches_the_parent_while_the_body_runs(
    pool: ProcessPool, path: Any
) -> None:
    seen: Seen = []
    result = path(pool, "report_progress", [(0.1, "a"), (0.2, "b")], 2.5, seen=seen)
    returned = time.monotonic()

    assert result.outcome is ProcessOutcome.RETURNED
    assert [(f, m) for f, m, _ in seen] == [(0.1, "a"), (0.2, "b")]
    assert seen[1][2] - seen[0][2] >= EVERY - 0.05  # throttled
    assert returned - seen[1][2] > 0.5  # sent when due, not held until the answer


@PATHS
def test_bad_arguments_raise_in_the_child_what_the_thread_ctx_raises(
    pool: ProcessPool, path: Any
) -> None:
    seen: Seen = []
    result = path(pool, "progress_refusals", BAD_CALLS, seen=seen)

    expected = []
    ctx = JobContext()
    for fraction, message in BAD_CALLS:
        with pytest.raises(ConfigError) as info:
            ctx.progress(fraction, message)
        expected.append(
            ("queue_core.records.errors.ConfigError", "invalid_option", info.value.field,
             str(info.value))
        )  # fmt: skip
    assert result.outcome is ProcessOutcome.RETURNED
    assert result.value == expected
    assert seen == []  # nothing refused was sent


def test_the_parent_skips_progress_frames_when_it_looks_for_an_answer() -> None:
    child = Child.__new__(Child)
    child._frames = [("hb",), ("pg", 0.5, None), ("go", 1.0), ("val", 7)]
    assert child.take_answer() == ("val", 7)


# -- the worker --------------------------------------------------------------------------------


@pytest.fixture
def queue() -> Iterator[Queue]:
    q = Queue("memory://")
    yield q
    q.close()


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which ProcessRuns path each attempt took: ``direct`` (a body thread) or ``loop``."""
    taken: list[str] = []
    call, run = ProcessRuns.call, ProcessRuns.run

    def counted_call(self: ProcessRuns, *a: Any) -> Any:
        taken.append("direct")
        return call(self, *a)

    async def counted_run(self: ProcessRuns, *a: Any) -> None:
        taken.append("loop")
        await run(self, *a)

    monkeypatch.setattr(ProcessRuns, "call", counted_call)
    monkeypatch.setattr(ProcessRuns, "run", counted_run)
    return taken


def test_a_process_isolated_body_reports_progress_on_both_paths(
    queue: Queue, paths: list[str]
) -> None:
    task = queue.task(name="half_way", isolation="process")(process_tasks.half_way)
    plain = task.delay()
    overridden = task.apply(dont_retry_on=[ValueError])  # per-call options: the loop path
    drain(queue, slots=2)

    assert sorted(paths) == ["direct", "loop"]
    for handle in (plain, overridden):
        assert handle.result(timeout=5) == "done"
        assert [a.mode for a in handle.attempts()] == ["process"]
        got = handle.progress()
        # the second report waited in the child: it came before the answer, and the
        # attempt's end carried it
        assert got is not None and (got.fraction, got.message) == (0.5, "half")
        assert got.at.tzinfo is not None


def test_a_process_isolated_body_with_bad_progress_fails_with_the_config_error(
    queue: Queue,
) -> None:
    task = queue.task(name="bad_progress", isolation="process", max_retries=0)(
        process_tasks.bad_progress
    )
    handle = task.delay()
    drain(queue)

    assert handle.status() is JobState.DEAD
    (attempt,) = handle.attempts()
    assert attempt.error_type == "queue_core.records.errors.ConfigError"
    assert attempt.message is not None and "invalid progress fraction: 1.5" in attempt.message
    assert handle.progress() is None
