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

    assert "Traceback" not in first.getMessage()  # retried: no traceback by default
    last = by_job[(dead.id, 1)]
    assert last.levelno == logging.WARNING
    dead_id = dead.info().dead_id
    assert dead_id is not None
    # the dead-letter line names the entry, and its traceback follows (issue 23 items 4, 5)
    head, _, tb = last.getMessage().partition("\n")
    assert head.endswith(
        f"RuntimeError: always -> dead-lettered as {dead_id}, reason retries_exhausted"
    )
    assert tb.startswith("Traceback (most recent call last):")
    assert tb.endswith("RuntimeError: always")
    assert event(last)["dead_reason"] == "retries_exhausted"
    assert event(last)["dead_id"] == dead_id
    assert event(last)["traceback"].startswith("Traceback (most recent call last):")


@pytest.mark.parametrize(("mode", "traced"), [("all", {1, 2}), ("none", set())])
def test_log_tracebacks_says_which_failed_attempts_show_their_traceback(
    queue: Queue, caplog: pytest.LogCaptureFixture, mode: str, traced: set[int]
) -> None:
    caplog.set_level(logging.INFO, logger="queue_core.worker")

    @queue.task(name="twice", max_retries=1, **FAST)
    def twice() -> None:
        raise KeyError("gone")

    job = twice.delay()
    drain(queue, log_tracebacks=mode)
    lines = {event(r)["attempt"]: r.getMessage() for r in attempt_ends(caplog)}
    assert {n for n, text in lines.items() if "\nTraceback (most recent" in text} == traced
    assert job.status() is JobState.DEAD


def test_log_tracebacks_is_checked() -> None:
    from queue_core import ConfigError

    with pytest.raises(ConfigError) as info:
        Worker(Queue("memory://"), log_tracebacks="some")
    assert info.value.code == "invalid_option" and "dead, all, none" in str(info.value)


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
    assert f"dead-lettered as {job.info().dead_id}, reason unknown_task" in line.getMessage()


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


def test_a_misfit_names_its_own_task_when_tasks_share_a_body(queue: Queue) -> None:
    # whether a call binds is remembered per body and call shape (a flow makes many
    # step tasks of one function); the dead letter still names the task that ran
    before = Queue(storage=queue.storage())

    def body(a: int) -> int:
        return a

    for name in ("first", "second"):
        before.task(name=name)(lambda a, b: None)
        queue.task(name=name)(body)
    fine = queue.enqueue("first", args=(1,))
    bad = [before.enqueue(name, kwargs={"a": 1, "b": 2}) for name in ("first", "second")]
    drain(queue)
    assert fine.result(timeout=1) == 1
    messages = [job.attempts()[0].message or "" for job in bad]
    assert [m.startswith("arguments no longer fit body(a)") for m in messages] == [True, True]
    assert ["(task first)" in messages[0], "(task second)" in messages[1]] == [True, True]


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


def test_the_start_line_names_storage_queues_slots_scheduler_and_tasks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="queue_core.worker")
    queue = Queue("memory://")

    @queue.task(name="shop.charge", queue="billing")
    def charge() -> None: ...

    @queue.task(name="shop.mail")
    def mail() -> None: ...

    drain(queue, slots=3, app="shop.tasks:queue")
    [start] = [r.getMessage() for r in worker_records(caplog) if " starting:" in r.getMessage()]
    head, *tasks = start.splitlines()
    assert head.endswith(
        "starting: app shop.tasks:queue, storage memory://, queues billing, default, "
        "slots 3, scheduler off, 2 tasks:"
    )
    assert tasks == ["  shop.charge (queue billing)", "  shop.mail (queue default)"]


def test_the_start_line_masks_the_password(caplog: pytest.LogCaptureFixture) -> None:
    from queue_core.worker.runner import Worker as W

    caplog.set_level(logging.INFO, logger="queue_core.worker")
    queue = Queue("memory://")
    queue.url = "postgresql://app:s3cret@db/jobs"  # what a PostgreSQL queue would show
    worker = W(queue, install_signal_handlers=False, scheduler=True)
    banner = worker._banner(worker.queues)
    assert "storage postgresql://app:***@db/jobs" in banner and "s3cret" not in banner
    assert "scheduler on, 0 tasks" in banner


def test_an_unknown_task_names_the_app_and_the_ways_out(queue: Queue) -> None:
    @queue.task(name="known.one")
    def one() -> None: ...

    job = queue.enqueue("billing.charge", allow_unregistered=True)
    drain(queue, app="shop.tasks:queue")
    (entry,) = queue.dead_letters()
    assert entry.reason == "unknown_task" and entry.job_id == job.id
    assert entry.error is not None
    assert "unknown task 'billing.charge'" in entry.error
    assert "imported app shop.tasks:queue, which declares known.one" in entry.error
    assert "import the module that declares 'billing.charge' in the app module" in entry.error
    assert "a queue of its own" in entry.error


def test_the_stop_line_counts_in_words(queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="queue_core.worker")

    @queue.task(name="once")
    def once() -> None: ...

    once.delay()
    drain(queue)
    drain(queue)
    stops = [r.getMessage() for r in worker_records(caplog) if " stopped after " in r.getMessage()]
    assert [s.split(" stopped after ")[1] for s in stops] == ["1 attempt", "0 attempts"]
