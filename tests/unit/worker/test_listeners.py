"""Worker listeners (queue_core.app.events): what the worker tells them, and job headers."""

from __future__ import annotations

from typing import Any

import pytest

from queue_core import JobState, Queue
from queue_core.app.events import (
    AttemptEnded,
    AttemptStarted,
    WorkerListener,
    WorkerView,
    job_headers,
)
from tests.unit.worker.conftest import drain

FAST = {"retry_backoff": "10ms", "retry_jitter": 0}


class Recorder(WorkerListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def worker_started(self, worker: WorkerView) -> None:
        self.calls.append(("worker_started", worker.stats()["slots"]))

    def attempt_started(self, event: AttemptStarted) -> None:
        self.calls.append(("started", event))

    def attempt_ended(self, event: AttemptEnded) -> None:
        self.calls.append(("ended", event))

    def worker_stopped(self, worker: WorkerView) -> None:
        self.calls.append(("worker_stopped", worker.id))

    def of(self, kind: str) -> list[Any]:
        return [e for k, e in self.calls if k == kind]


def test_every_attempt_is_started_then_ended_once(queue: Queue) -> None:
    @queue.task(name="flaky", max_retries=1, **FAST)
    def flaky(n: int) -> int:
        if n == 0:
            raise ValueError("no")
        return n

    @queue.task(name="ok")
    async def ok() -> None:
        return None

    jobs = [flaky.delay(1), flaky.delay(0), ok.delay()]
    rec = Recorder()
    drain(queue, listeners=[rec], slots=2)
    assert [j.status() for j in jobs] == [JobState.SUCCEEDED, JobState.DEAD, JobState.SUCCEEDED]
    assert rec.calls[0] == ("worker_started", 2) and rec.calls[-1][0] == "worker_stopped"
    started = {(e.job.id, e.job.attempt) for e in rec.of("started")}
    ended = {(e.job.id, e.job.attempt): e for e in rec.of("ended")}
    stored = {(j.id, a.number) for j in jobs for a in j.attempts()}
    assert started == set(ended) == stored and len(rec.of("ended")) == len(stored) == 4
    last = ended[(jobs[1].id, 2)]
    assert last.outcome.value == "failed" and last.reason == "error"
    assert last.action.value == "dead" and last.error_class == "ValueError"
    first = ended[(jobs[0].id, 1)]
    assert first.action.value == "complete" and first.reason is None
    assert all(e.pickup_ms is not None and e.pickup_ms >= 0 for e in rec.of("started"))
    assert all(e.worker_id == last.worker_id for e in rec.of("ended"))


def test_queue_listeners_come_first_and_a_failing_listener_breaks_nothing(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    order: list[str] = []

    class Named(WorkerListener):
        def __init__(self, name: str) -> None:
            self.name = name

        def attempt_ended(self, event: AttemptEnded) -> None:
            order.append(self.name)
            if self.name == "broken":
                raise RuntimeError("listener bug")

    @queue.task(name="t")
    def t() -> None:
        return None

    queue.add_worker_listener(Named("broken"))
    job = t.delay()
    drain(queue, listeners=[Named("own")])
    assert job.status() is JobState.SUCCEEDED
    assert order == ["broken", "own"]
    assert any("listener" in r.getMessage() and r.exc_info for r in caplog.records)


def test_headers_travel_with_the_job_and_keep_its_options(queue: Queue) -> None:
    seen: list[dict[str, str]] = []

    class Headers(WorkerListener):
        def attempt_started(self, event: AttemptStarted) -> None:
            seen.append(job_headers(event.job))

    @queue.task(name="t", max_retries=1, **FAST)
    def t(fail: bool) -> None:
        if fail:
            raise ValueError("x")

    n = iter(range(100))
    queue.add_header_provider(lambda: {"traceparent": f"tp-{next(n)}"})
    a = t.delay(False)
    b = t.apply((True,), max_retries=0)  # per-call options and headers side by side
    c, d = t.map([(False,), (False,)])
    drain(queue, listeners=[Headers()])
    assert a.status() is JobState.SUCCEEDED and b.status() is JobState.DEAD
    assert len(b.attempts()) == 1  # max_retries=0 of the call still applies
    assert sorted(h["traceparent"] for h in seen) == ["tp-0", "tp-1", "tp-2", "tp-2"]
    assert {c.status(), d.status()} == {JobState.SUCCEEDED}
