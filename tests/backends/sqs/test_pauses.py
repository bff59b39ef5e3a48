"""Pauses on SQS + DynamoDB: what other workers see, and what a wait receives."""

from __future__ import annotations

from queue_core.records.control import PauseKind
from queue_core.records.jobs import JobState, NewJob
from tests.backends.sqs.conftest import Factory


def _job(job_id: str, task: str = "t", queue: str = "default") -> NewJob:
    return NewJob(id=job_id, task_name=task, queue=queue, payload=b"{}")


def test_another_workers_pause_holds_at_its_next_claim_and_resume_gives_back(
    make_storage: Factory,
) -> None:
    admin, worker = make_storage(), make_storage()
    worker.claim("w", ["default"], 1, 30_000)  # the worker has read the pauses once
    admin.pause(PauseKind.TASK, "held")
    admin.pause(PauseKind.QUEUE, "mail")
    worker.enqueue([_job("h1", task="held"), _job("m1", queue="mail"), _job("p1")])
    got = worker.claim("w", ["default", "mail"], 10, 30_000)
    assert [c.id for c in got] == ["p1"]
    assert worker.count_pending(["default", "mail"], 0) == 1  # p1 running; h1, m1 paused
    assert admin.resume(PauseKind.TASK, "held") is True
    assert admin.resume(PauseKind.QUEUE, "mail") is True
    got = worker.claim("w", ["default", "mail"], 10, 30_000)
    assert sorted(c.id for c in got) == ["h1", "m1"]


def test_a_job_moved_aside_wakes_no_wait_until_its_resume(make_storage: Factory) -> None:
    s = make_storage()
    s.pause(PauseKind.TASK, "held")
    assert s.enqueue([_job("h1", task="held")]) == [JobState.QUEUED]
    assert s.claim("w", ["default"], 1, 30_000) == []  # moved aside
    assert s.wait_for_jobs(["default"], 2.0) is False  # its hint is dropped, not held
    s.resume(PauseKind.TASK, "held")
    assert s.wait_for_jobs(["default"], 5.0) is True  # resume sent a new hint
    assert [c.id for c in s.claim("w", ["default"], 1, 30_000)] == ["h1"]
