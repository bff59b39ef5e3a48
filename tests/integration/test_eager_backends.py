"""Eager mode on every backend: a flaky task shows 3 attempt records and succeeds, an
always-failing one is dead-lettered, no worker anywhere (the issue's acceptance)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_core import JobContext, JobState, Queue
from tests.integration._backends import backend_url

BACKENDS = ["memory", "sqlite", "postgres", "redis", "sqs"]


@pytest.fixture(params=BACKENDS)
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Queue]:
    q = Queue(backend_url(request, tmp_path, request.param), eager=True)
    q.migrate()
    yield q
    q.close()


def test_flaky_succeeds_on_attempt_three_and_broken_is_dead(queue: Queue) -> None:
    @queue.task(name="flaky", max_retries=3, retry_backoff="1m", retry_jitter=0)
    def flaky(ctx: JobContext = JobContext.INJECTED) -> int:
        if ctx.attempt < 3:
            raise ConnectionError(f"attempt {ctx.attempt}")
        return ctx.attempt

    @queue.task(name="broken", max_retries=1)
    def broken() -> None:
        raise RuntimeError("always")

    ok = flaky.delay()
    assert ok.status() is JobState.SUCCEEDED and ok.result() == 3
    attempts = ok.attempts()
    assert [(a.number, a.outcome.value, a.mode) for a in attempts] == [
        (1, "failed", "eager"),
        (2, "failed", "eager"),
        (3, "succeeded", "eager"),
    ]
    gap = attempts[1].started_at - attempts[0].finished_at  # type: ignore[operator]
    assert 60 <= gap.total_seconds() < 65  # the backoff, recorded on the virtual clock

    dead = broken.delay()
    assert dead.status() is JobState.DEAD
    [entry] = queue.dead_letters(task_name="broken")
    assert (entry.job_id, entry.reason, len(entry.attempts)) == (
        dead.id,
        "retries_exhausted",
        2,
    )
