"""What the worker says (logger ``queue_core.worker``) and jobs whose arguments no
longer fit their task."""

from __future__ import annotations

import logging
import threading
from typing import Any

import anyio
import pytest

from backends.memory import MemoryStorage
from queue_core import JobContext, JobState, Outcome, Queue
from queue_core.testing import T0, ManualClock
from queue_core.worker import Worker
from queue_core.worker.claiming import BURST_HORIZON_MS
from tests.unit.worker.conftest import drain, until

FAST = {"retry_backoff": "10ms", "retry_jitter": 0}


def worker_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "queue_core.worker"]


def event(record: logging.LogRecord) -> dict[str, Any]:
    """The fields the worker hands over with a record (``extra={"event": ...}``)."""
    found: dict[str, Any] = getattr(record, "event", {})
    return found


def attempt_ends(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in worker_records(caplog) if event(r).get("event") == "attempt_end"]


def test_one_line_per_attempt_end(queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="queue_core.worker")

    @queue.task(name="flaky", max_retries=1, **FAST)
    def flaky(ctx: JobContext) -> str:
        if ctx.attempt == 1:
            raise ValueError("first try")
        return "ok"

    @queue.task(name="doomed", max_retries=0)
    def doomed() -> None:
        raise RuntimeError("always")

    ok, dead = flaky.delay(), doomed.delay()
    drain(queue)
    assert ok.status() is JobState.SUCCEEDED and dead.status() is JobState.DEAD
    ends = attempt_ends(caplog)
    assert len(ends) == 3  # two of flaky, one of doomed
    by_job = {(event(r)["job_id"], event(r)["attempt"]): r for r in ends}

    first = by_job[(ok.id, 1)]
    assert first.levelno == logging.INFO
    assert first.getMessage().startswith(f"flaky job {ok.id} attempt 1: failed (error) in ")
    assert "ValueError: first try -> retry in 0.01 s" in first.getMessage()
    second = by_job[(ok.id, 2)]
    assert second.levelno == logging.INFO
    assert second.getMessage().startswith(f"flaky job {ok.id} attempt 2: succeeded in ")
    fields = event(second)
    assert fields["outcome"] == "succeeded" and fields["reason"] is None
    assert fields["task"] == "flaky" and fields["duration_s"] >= 0

    last = by_job[(dead.id, 1)]
    assert last.levelno == logging.WARNING
    assert last.getMessage().endswith("-> dead-lettered, reason retries_exhausted")
    assert event(last)["dead_reason"] == "retries_exhausted"


def test_unknown_task_is_a_warning(queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="queue_core.worker")

    @queue.task(name="known")
    def known() -> None:
        return None

    job = queue.enqueue("nobody.knows", allow_unregistered=True)
    drain(queue)
    assert job.status() is JobState.DEAD
    (line,) = [r for r in attempt_ends(caplog) if event(r)["job_id"] == job.id]
    assert line.levelno == logging.WARNING
    assert "failed (unknown_task)" in line.getMessage()
    assert "dead-lettered, reason unknown_task" in line.getMessage()


def test_arguments_that_no_longer_fit_are_dead_lettered_at_once(queue: Queue) -> None:
    calls: list[object] = []

    # The producer enqueued against the task as it was before a deploy changed it.
    before = Queue(storage=queue.storage())

    @before.task(name="send")
    def old_send(a: int, b: int, x: int) -> None: ...

    job = before.enqueue("send", kwargs={"a": 1, "b": 2, "x": 3})

    @queue.task(name="send", max_retries=3, **FAST)
    def send(a: int, b: int) -> None:
        calls.append((a, b))

    drain(queue)
    assert calls == []
    assert job.status() is JobState.DEAD
    (record,) = job.attempts()
    assert (record.outcome, record.reason) == (Outcome.FAILED, "bad_payload")
    assert record.error_class == "TypeError"
    assert record.message is not None
    assert record.message.startswith("arguments no longer fit send(a, b)")
    assert record.message.endswith(": unexpected keyword argument 'x'")
    (dead,) = queue.dead_letters()
    assert dead.reason == "bad_payload" and dead.error_class == "TypeError"


@pytest.mark.parametrize("kind", ["async", "options"])
def test_misfit_arguments_on_the_other_paths(queue: Queue, kind: str) -> None:
    calls: list[object] = []
    before = Queue(storage=queue.storage())  # the producer, before a deploy changed "send"

    @before.task(name="send")
    def old_send(*args: int) -> None: ...

    if kind == "async":
        job = before.enqueue("send", args=(1, 2))

        @queue.task(name="send")
        async def send_async(a: int, ctx: JobContext) -> None:
            calls.append(a)

    else:
        job = before.enqueue("send", args=(), max_retries=2)  # per-call options: loop path

        @queue.task(name="send")
        def send(a: int, ctx: JobContext) -> None:
            calls.append(a)

    drain(queue)
    assert calls == []
    (record,) = job.attempts()
    assert (record.reason, record.error_class) == ("bad_payload", "TypeError")
    assert queue.dead_letters()[0].reason == "bad_payload"


def test_ctx_is_not_an_argument_of_the_payload(queue: Queue) -> None:
    @queue.task(name="greet")
    def greet(name: str, ctx: JobContext) -> str:
        return f"hi {name} ({ctx.attempt})"

    job = queue.enqueue("greet", args=("ann",))
    drain(queue)
    assert job.result(timeout=1) == "hi ann (1)"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_burst_worker_says_what_it_waits_for(
    caplog: pytest.LogCaptureFixture, anyio_backend: str
) -> None:
    caplog.set_level(logging.INFO, logger="queue_core.worker")
    clock = ManualClock(start_ms=T0)
    checks: list[int] = []

    class Counting(MemoryStorage):
        def count_pending(self, queues: Any, horizon_ms: int, *, now: int | None = None) -> int:
            if horizon_ms == BURST_HORIZON_MS:
                checks.append(horizon_ms)
            return super().count_pending(queues, horizon_ms, now=now)

    queue = Queue(storage=Counting(clock=clock), clock=clock)
    ran = threading.Event()

    @queue.task(name="later")
    def later() -> None:
        ran.set()

    job = later.apply(delay="58s")
    worker = Worker(queue, burst=True, install_signal_handlers=False, reap_interval=3600)

    def waiting() -> list[str]:
        return [
            r.getMessage()
            for r in worker_records(caplog)
            if event(r).get("event") == "burst_waiting" and event(r).get("worker_id") == worker.id
        ]

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run_async)
        await until(lambda: bool(waiting()), "the worker says it waits")
        # the worker checks again (about once a second) without saying it again
        seen = len(checks)
        await until(lambda: len(checks) >= seen + 2, "two more checks")
        clock.advance(58)
    assert ran.is_set() and job.status() is JobState.SUCCEEDED
    assert waiting() == ["burst: waiting for 1 job due in 58 s"]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_job_the_reaper_dead_letters_is_a_warning(
    caplog: pytest.LogCaptureFixture, anyio_backend: str
) -> None:
    caplog.set_level(logging.INFO, logger="queue_core.worker")
    clock = ManualClock(start_ms=T0)
    storage = MemoryStorage(clock=clock)
    queue = Queue(storage=storage, clock=clock, lease=3)

    @queue.task(name="lost_one", max_retries=0)
    def lost_one() -> None:
        return None

    job = lost_one.delay()
    (claimed,) = storage.claim("a-worker-that-dies", ["default"], 1, 3000)
    assert claimed.id == job.id
    clock.advance(10)  # its lease ran out long ago
    worker = Worker(queue, install_signal_handlers=False, reap_interval=3600)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run_async)
        await until(lambda: job.status() is JobState.DEAD, "the reaper dead-letters it")
        worker.stop()
    (line,) = [r for r in worker_records(caplog) if r.getMessage().startswith("reaped job")]
    assert line.levelno == logging.WARNING
    assert line.getMessage() == f"reaped job {job.id} attempt 1: lease_expired -> dead"
