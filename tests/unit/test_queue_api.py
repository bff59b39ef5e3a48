"""The Queue facade on memory://: decoration, enqueue, overrides, map, handles."""

from __future__ import annotations

from datetime import timedelta

import pytest

from queue_core import (
    Concurrency,
    ConfigError,
    JobContext,
    JobSkipped,
    JobState,
    Queue,
    Replay,
    RetryPolicy,
    TaskError,
)
from queue_core.app.task import Task


@pytest.fixture
def queue() -> Queue:
    q = Queue("memory://")
    yield q
    q.close()


def test_decorator_forms_and_inline_call(queue: Queue) -> None:
    @queue.task
    def plain(a: int, b: int) -> int:
        return a + b

    @queue.task(name="custom", queue="emails", priority=3)
    def named(x: int) -> int:
        return x

    assert isinstance(plain, Task)
    assert plain.name == f"{__name__}.test_decorator_forms_and_inline_call.<locals>.plain"
    assert plain(1, 2) == 3
    assert named.name == "custom" and named.queue_name == "emails"
    assert set(queue.tasks) == {plain.name, "custom"}


def test_inline_call_gives_ctx(queue: Queue) -> None:
    @queue.task
    def body(ctx: JobContext) -> int:
        ctx.heartbeat()
        return ctx.attempt

    assert body() == 1


def test_delay_stores_job_with_defaults(queue: Queue) -> None:
    @queue.task(max_retries=2, timeout="90s", heartbeat=5, schedule_to_start="1m")
    def body(x: int) -> int:
        return x

    job = body.delay(5)
    assert len(job.id) == 32
    rec = queue.storage().get_job(job.id)
    assert rec is not None
    assert rec.state is JobState.QUEUED and rec.max_attempts == 3
    assert rec.task_name == body.name and rec.queue == "default"
    assert job.status() is JobState.QUEUED
    info = job.info()
    assert info.state is JobState.QUEUED and info.attempts == 0 and info.result is None


def test_apply_overrides(queue: Queue) -> None:
    @queue.task(queue="a", priority=1)
    def body(x: int, y: int = 0) -> int:
        return x + y

    job = body.apply(args=(1,), kwargs={"y": 2}, queue="b", priority=9, delay="5s",
                     max_attempts=4, timeout=None)
    rec = queue.storage().get_job(job.id)
    assert rec is not None
    assert rec.queue == "b" and rec.priority == 9 and rec.max_attempts == 4
    assert rec.run_at - rec.enqueued_at >= 4900
    assert rec.options is not None and '"max_attempts":4' in rec.options


def test_queue_level_retry_defaults_merge_under_task(queue: Queue) -> None:
    q = Queue("memory://", retry=RetryPolicy(max_attempts=5, initial=2.0))

    @q.task(retry_backoff="1s")
    def body() -> None:
        return None

    assert body.policy.max_attempts == 5 and body.policy.initial == 1.0
    rec = q.storage().get_job(body.delay().id)
    assert rec is not None and rec.max_attempts == 5


def test_map_and_enqueue_many_are_batches(queue: Queue) -> None:
    @queue.task
    def body(x: int) -> int:
        return x

    handles = body.map([(i,) for i in range(5)])
    more = queue.enqueue_many(body, [(i,) for i in range(3)])
    assert len(handles) == 5 and len(more) == 3
    assert len({h.id for h in handles + more}) == 8
    assert sum(s.ready for s in queue.stats()) == 8


def test_enqueue_by_name(queue: Queue) -> None:
    @queue.task(name="by.name", queue="q1")
    def body(x: int) -> int:
        return x

    rec = queue.storage().get_job(queue.enqueue("by.name", args=(1,)).id)
    assert rec is not None and rec.queue == "q1"
    other = queue.enqueue("other", args=(2,), queue="q2", allow_unregistered=True)
    rec2 = queue.storage().get_job(other.id)
    assert rec2 is not None and rec2.task_name == "other" and rec2.queue == "q2"


def test_result_timeout_and_skip(queue: Queue) -> None:
    @queue.task(concurrency=Concurrency(1, behavior="skip"))
    def body() -> None:
        return None

    first = body.delay()
    second = body.delay()
    with pytest.raises(TimeoutError):
        first.result(timeout=0.05)
    assert second.status() is JobState.SKIPPED
    with pytest.raises(JobSkipped):
        second.result(timeout=1)


def test_purge_dead_and_handles(queue: Queue) -> None:
    assert queue.purge_dead(older_than=timedelta(days=1)) == 0
    assert queue.purge_dead(older_than="1h") == 0
    assert queue.job("nope").id == "nope"


def test_replay_and_concurrency_records() -> None:
    r = Replay(after="10m", max_replays=3)
    assert r.after == 600.0 and r.max_replays == 3
    c = Concurrency(2)
    assert c.behavior == "queue"


def test_context_heartbeat_throttle_and_outside_attempt() -> None:
    calls: list[int] = []
    now = [0.0]
    ctx = JobContext(
        job_id="j", attempt=2, heartbeat_interval=3.0,
        on_heartbeat=lambda: calls.append(1), monotonic=lambda: now[0],
    )
    ctx.heartbeat()
    assert calls == []  # the claim counts as the first write
    now[0] = 1.0
    ctx.heartbeat()
    ctx.heartbeat()
    assert calls == [1]
    now[0] = 1.5
    ctx.heartbeat()
    assert calls == [1]
    assert ctx.cancelled is False and ctx.attempt == 2
    ctx._close()
    with pytest.raises(RuntimeError, match="outside a running attempt"):
        ctx.heartbeat()


def test_context_callback_may_report_cancel() -> None:
    ctx = JobContext(on_heartbeat=lambda: True)
    ctx.heartbeat()
    assert ctx.cancelled is True


def test_purge_dead_by_age_zero_means_everything_up_to_now(queue: Queue) -> None:
    @queue.task
    def doomed() -> None:
        raise TaskError.fatal("no")

    doomed.delay()
    doomed.delay()
    queue.run_worker(burst=True)
    assert len(queue.dead_letters()) == 2
    assert queue.purge_dead(older_than="1h") == 0  # too young to purge
    with pytest.raises(ConfigError) as err:
        queue.purge_dead(older_than=-1)
    assert err.value.code == "invalid_duration" and "-1" in str(err.value)
    assert len(queue.dead_letters()) == 2  # a bad age removed nothing
    assert queue.purge_dead(older_than=timedelta(0)) == 2
    assert queue.dead_letters() == []


def test_enqueue_by_name_keeps_the_registered_options(queue: Queue) -> None:
    @queue.task(name="billing.charge", queue="billing", max_retries=4, priority=7)
    def charge(card: str) -> None:
        return None

    rec = queue.storage().get_job(queue.enqueue("billing.charge", args=("4000",)).id)
    assert rec is not None
    assert (rec.queue, rec.max_attempts, rec.priority) == ("billing", 5, 7)
    [many] = queue.enqueue_many("billing.charge", [("4001",)])
    rec = queue.storage().get_job(many.id)
    assert rec is not None and (rec.queue, rec.max_attempts) == ("billing", 5)


def test_enqueue_by_name_of_an_unregistered_task_refuses_unless_allowed(queue: Queue) -> None:
    @queue.task(name="known")
    def known() -> None:
        return None

    for call in (
        lambda: queue.enqueue("billing.charge", args=("4000",)),
        lambda: queue.enqueue_many("billing.charge", [("4000",)]),
    ):
        with pytest.raises(ConfigError) as refused:
            call()
        assert refused.value.code == "unknown_task"
        assert refused.value.value == "billing.charge"
        message = str(refused.value)
        assert "--app" in message and "allow_unregistered=True" in message
        assert "'known'" not in message and "known" in message  # lists what is registered
    assert sum(s.ready for s in queue.stats()) == 0  # nothing written

    handle = queue.enqueue("billing.charge", args=("4000",), allow_unregistered=True)
    [other] = queue.enqueue_many("billing.charge", [("4001",)], allow_unregistered=True)
    for h in (handle, other):
        rec = queue.storage().get_job(h.id)
        assert rec is not None and (rec.task_name, rec.queue) == ("billing.charge", "default")
        assert rec.max_attempts == 1  # the queue defaults, as asked for
