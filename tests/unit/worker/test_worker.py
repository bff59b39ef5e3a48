"""Worker behaviour on memory://: retries, dead letters, timeouts, bad input."""

from __future__ import annotations

import anyio
import pytest

from queue_core import (
    ConfigError,
    JobContext,
    JobFailed,
    JobState,
    NonRetryableError,
    Outcome,
    Queue,
    TaskError,
)
from queue_core.records.jobs import NewJob
from tests.unit.worker.conftest import drain

FAST = {"retry_backoff": "10ms", "retry_jitter": 0}


def test_fails_twice_then_succeeds_with_three_records(queue: Queue) -> None:
    seen: list[int] = []

    @queue.task(max_retries=3, **FAST)
    def flaky(x: int, ctx: JobContext) -> int:
        seen.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ValueError(f"boom {ctx.attempt}")
        return x * 2

    job = flaky.delay(21)
    drain(queue)
    assert job.result(timeout=1) == 42
    assert seen == [1, 2, 3]
    records = job.attempts()
    assert [r.number for r in records] == [1, 2, 3]
    assert [r.outcome for r in records] == [Outcome.FAILED, Outcome.FAILED, Outcome.SUCCEEDED]
    assert records[0].error_class == "ValueError"
    assert records[0].error_type == "builtins.ValueError"
    assert records[0].message == "boom 1"
    assert records[0].traceback and "boom 1" in records[0].traceback
    assert {r.mode for r in records} == {"thread"}
    assert all(r.worker_id for r in records)
    info = job.info()
    assert info.state is JobState.SUCCEEDED and info.attempts == 3 and info.result == 42


def test_exhausted_retries_dead_letter_then_retry_dead_succeeds(queue: Queue) -> None:
    fail = {"on": True}

    @queue.task(max_retries=5, **FAST)
    def always(a: int, b: str = "x") -> str:
        if fail["on"]:
            raise RuntimeError("still broken")
        return f"{a}{b}"

    job = always.apply(args=(7,), kwargs={"b": "y"})
    drain(queue)
    assert job.status() is JobState.DEAD
    with pytest.raises(JobFailed) as err:
        job.result(timeout=1)
    dead = err.value.dead
    assert dead is not None
    assert err.value.dead_letter is dead
    assert (err.value.reason, err.value.error_class) == ("retries_exhausted", "RuntimeError")
    assert len(job.attempts()) == 6
    entries = queue.dead_letters()
    assert len(entries) == 1 and entries[0].id == dead.id
    assert dead.reason == "retries_exhausted"
    assert dead.error_class == "RuntimeError" and dead.error == "still broken"
    assert dead.args == (7,) and dead.kwargs == {"b": "y"}
    assert dead["task_name"] == always.name
    assert len(dead.attempts) == 6

    fail["on"] = False
    new_id = queue.retry_dead(dead.id)
    assert new_id != job.id
    drain(queue)
    assert queue.job(new_id).result(timeout=1) == "7y"
    assert queue.dead_letters() == []


@pytest.mark.parametrize(
    ("options", "exc"),
    [
        ({"dont_retry_on": [KeyError]}, KeyError("k")),
        ({"retry_on": [KeyError]}, ValueError("v")),
        ({}, TaskError.fatal("no")),
        ({}, NonRetryableError("no")),
        ({"non_retryable": ["ZeroDivisionError"]}, ZeroDivisionError("z")),
        ({"non_retryable": ["builtins.LookupError"]}, LookupError("l")),
    ],
)
def test_non_retryable_errors_dead_letter_after_one_attempt(
    queue: Queue, options: dict[str, object], exc: BaseException
) -> None:
    @queue.task(max_retries=5, **FAST, **options)  # type: ignore[arg-type]
    def body() -> None:
        raise exc

    job = body.delay()
    drain(queue)
    assert job.status() is JobState.DEAD
    assert len(job.attempts()) == 1
    assert queue.dead_letters()[0].reason == "fatal"


def test_retryable_task_error_overrides_blacklist(queue: Queue) -> None:
    @queue.task(max_retries=1, dont_retry_on=[TaskError], **FAST)
    def body() -> None:
        raise TaskError.retryable("again")

    job = body.delay()
    drain(queue)
    assert len(job.attempts()) == 2
    assert queue.dead_letters()[0].reason == "retries_exhausted"


def test_async_body_past_timeout_is_cancelled_recorded_and_retried(queue: Queue) -> None:
    calls: list[int] = []

    @queue.task(timeout=0.2, max_retries=1, **FAST)
    async def slow(ctx: JobContext) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            await anyio.sleep(30)
        return "done"

    job = slow.delay()
    drain(queue, reap_interval=60)  # the worker, not the reaper, records the timeout
    assert job.result(timeout=1) == "done"
    records = job.attempts()
    assert [r.outcome for r in records] == [Outcome.TIMED_OUT, Outcome.SUCCEEDED]
    assert records[0].reason == "timeout"
    assert records[0].mode == "async"
    assert calls == [1, 2]


def test_per_call_overrides_reach_the_worker(queue: Queue) -> None:
    @queue.task(max_retries=0)
    def body() -> None:
        raise ValueError("x")

    job = body.apply(max_attempts=3, **FAST)
    drain(queue)
    assert len(job.attempts()) == 3


def test_call_level_dont_retry_on(queue: Queue) -> None:
    @queue.task(max_retries=4, **FAST)
    def body() -> None:
        raise KeyError("x")

    job = body.apply(dont_retry_on=[LookupError])
    drain(queue)
    assert len(job.attempts()) == 1
    assert queue.dead_letters()[0].reason == "fatal"


def test_a_replay_keeps_the_call_overrides_next_to_its_count(queue: Queue) -> None:
    """``retry_dead`` counts the replay in the job's options; the worker still reads the
    call's overrides there (and takes the count for no override)."""

    @queue.task(max_retries=4, **FAST)
    def body() -> None:
        raise KeyError("x")

    job = body.apply(dont_retry_on=[LookupError])
    drain(queue)
    replay = queue.job(queue.retry_dead(queue.dead_letters()[0].id))
    record = queue.storage().get_job(replay.id)
    assert record is not None and record.options is not None
    assert record.options.startswith('{"replays":1,"dont_retry_on":')
    drain(queue)
    assert len(job.attempts()) == 1
    assert len(replay.attempts()) == 1  # still not retried: the override held
    assert replay.status() is JobState.DEAD
    assert queue.dead_letters()[0].reason == "fatal"


def test_unknown_task_dead_letters_and_worker_goes_on(queue: Queue) -> None:
    @queue.task
    def known() -> int:
        return 1

    ghost = queue.enqueue("nobody.registered", args=(1,), allow_unregistered=True)
    ok = known.delay()
    drain(queue)
    assert ok.result(timeout=1) == 1
    assert ghost.status() is JobState.DEAD
    dead = queue.dead_letters(task_name="nobody.registered")
    assert [d.reason for d in dead] == ["unknown_task"]


def test_bad_payload_dead_letters(queue: Queue) -> None:
    @queue.task
    def body(x: int) -> int:
        return x

    queue.storage().enqueue(
        [NewJob(id="bad1", task_name=body.name, queue="default", payload=b"\x00not json")]
    )
    ok = body.delay(3)
    drain(queue)
    assert ok.result(timeout=1) == 3
    assert queue.job("bad1").status() is JobState.DEAD
    assert queue.dead_letters()[0].reason == "bad_payload"


def test_unserializable_result_is_recorded_fatal(queue: Queue) -> None:
    @queue.task(max_retries=3)
    def body() -> object:
        return object()

    job = body.delay()
    drain(queue)
    assert job.status() is JobState.DEAD
    assert job.attempts()[0].error_class == "SerializationError"


def test_a_result_larger_than_storage_keeps_is_recorded_fatal() -> None:
    """``SupportsResultLimit``: the end is never sent to a storage that cannot write it
    (on SQS it would be retried for ever); a result within the limit is kept."""
    from backends.memory import MemoryStorage

    class Bounded(MemoryStorage):
        def max_result_bytes(self) -> int:
            return 64

    queue = Queue(storage=Bounded())

    @queue.task(max_retries=3)
    def body(n: int) -> str:
        return "x" * n

    small, large = body.delay(10), body.delay(100)
    drain(queue)
    assert small.result(timeout=1) == "x" * 10
    assert large.status() is JobState.DEAD and len(large.attempts()) == 1
    entry = queue.dead_letters()[0]
    assert (entry.reason, entry.error_class) == ("fatal", "SerializationError")
    assert entry.error is not None and "102 bytes" in entry.error and "(64 bytes)" in entry.error
    queue.close()


def test_cancel_queued_job(queue: Queue) -> None:
    @queue.task
    def body() -> int:
        return 1

    job = body.apply(delay=60)
    assert job.cancel() is JobState.CANCELLED
    from queue_core import JobCancelled

    with pytest.raises(JobCancelled):
        job.result(timeout=0.1)


def test_slots_option_validated(queue: Queue) -> None:
    with pytest.raises(ConfigError) as err:
        queue.run_worker(slots=0, burst=True)
    assert err.value.code == "invalid_option"


@pytest.mark.parametrize(
    ("kw", "field", "words"),
    [
        ({"queues": [""]}, "queues", "'' is not a queue name"),
        ({"queues": ["emails", 5]}, "queues", "5 is not a queue name"),
        ({"queues": 5}, "queues", "invalid queues: 5"),
        ({"scheduler": "no"}, "scheduler", "invalid scheduler: 'no' — expected True or False"),
        ({"burst": "yes"}, "burst", "invalid burst: 'yes'"),
    ],
)
def test_queues_and_switches_are_validated(
    queue: Queue, kw: dict[str, object], field: str, words: str
) -> None:
    """Not a ``TypeError``, nor a queue named '' or a scheduler left on by ``"no"``."""
    with pytest.raises(ConfigError) as err:
        queue.run_worker(**kw)  # type: ignore[arg-type]
    assert (err.value.code, err.value.field) == ("invalid_option", field)
    assert words in str(err.value)


def test_queues_may_be_one_comma_separated_string(queue: Queue) -> None:
    from queue_core.worker import Worker

    assert Worker(queue, queues=" emails, default ,").queues == ["emails", "default"]
