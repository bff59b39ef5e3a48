"""Per-call overrides reach the classification of process-isolated bodies too."""

from __future__ import annotations

from queue_core import JobState, Queue
from tests.unit.worker import process_tasks
from tests.unit.worker.conftest import drain


def test_per_call_dont_retry_on_wins_under_process_isolation(queue: Queue) -> None:
    # the task itself would retry a ValueError three times
    task = queue.task(
        name="raise_value_error",
        isolation="process",
        max_retries=3,
        retry_backoff="10ms",
        retry_jitter=0,
    )(process_tasks.raise_value_error)
    job = task.apply(dont_retry_on=[ValueError])
    drain(queue, slots=1)
    assert job.status() is JobState.DEAD
    records = job.attempts()
    assert len(records) == 1
    assert records[0].mode == "process"
    assert records[0].error_class == "ValueError"
    dead = queue.dead_letters()
    assert [d.reason for d in dead] == ["fatal"]


def test_per_call_retry_on_whitelist_is_honoured_under_process_isolation(
    queue: Queue,
) -> None:
    # a per-call whitelist that does not name ValueError: not retried
    task = queue.task(
        name="raise_value_error",
        isolation="process",
        max_retries=3,
        retry_backoff="10ms",
        retry_jitter=0,
    )(process_tasks.raise_value_error)
    job = task.apply(retry_on=[KeyError])
    drain(queue, slots=1)
    assert job.status() is JobState.DEAD
    assert len(job.attempts()) == 1
    assert [d.reason for d in queue.dead_letters()] == ["fatal"]
