"""``ctx.deadline`` in a worker: when the worker stops the body (its start plus the
task's ``timeout``), for thread and async bodies, also for jobs claimed ahead of a free
slot (``prefetch``), which storage hands out without a deadline."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from queue_core import JobContext, Queue
from tests.unit.worker.conftest import drain

TIMEOUT = 30.0


@pytest.mark.parametrize("prefetch", [0, 2])
def test_thread_and_async_bodies_see_when_they_will_be_stopped(queue: Queue, prefetch: int) -> None:
    seen: list[tuple[float, datetime | None]] = []

    @queue.task(timeout=TIMEOUT)
    def sync_body(n: int, ctx: JobContext = JobContext.INJECTED) -> None:
        seen.append((time.time(), ctx.deadline))

    @queue.task(timeout=TIMEOUT)
    async def async_body(n: int, ctx: JobContext = JobContext.INJECTED) -> None:
        seen.append((time.time(), ctx.deadline))

    for n in range(3):  # one slot: with prefetch, the later jobs are held first
        sync_body.delay(n)
        async_body.delay(n)
    drain(queue, slots=1, prefetch=prefetch)

    assert len(seen) == 6
    for started, deadline in seen:
        assert deadline is not None and deadline.tzinfo is timezone.utc
        left = deadline.timestamp() - started
        assert TIMEOUT - 0.5 <= left <= TIMEOUT + 0.01, left


def test_a_body_without_a_timeout_limit_still_has_the_default_one(queue: Queue) -> None:
    seen: list[datetime | None] = []

    @queue.task()
    def body(ctx: JobContext = JobContext.INJECTED) -> None:
        seen.append(ctx.deadline)

    body.delay()
    drain(queue)

    assert seen[0] is not None  # the queue's default_timeout (300 s) bounds it
    assert 290 < seen[0].timestamp() - time.time() <= 300
