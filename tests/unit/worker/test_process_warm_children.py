"""The worker's warm children for ``isolation="process"``: reuse and ``max_tasks_per_child``."""

from __future__ import annotations

from typing import Any

import pytest

from queue_core import Queue
from queue_core.records.errors import ConfigError
from queue_core.worker import Worker
from tests.unit.worker import process_tasks
from tests.unit.worker.conftest import drain


def _counts(queue: Queue, jobs: int, **worker: Any) -> list[tuple[int, int]]:
    """Run ``jobs`` calls of ``count_calls`` one at a time; their (count, pid) results."""
    task = queue.task(name="count_calls", isolation="process")(process_tasks.count_calls)
    handles = [task.delay() for _ in range(jobs)]
    drain(queue, slots=1, **worker)
    return sorted(tuple(h.result(timeout=5)) for h in handles)  # type: ignore[misc]


def test_one_warm_child_runs_every_attempt_and_keeps_its_globals(queue: Queue) -> None:
    results = _counts(queue, 3)

    assert [count for count, _ in results] == [1, 2, 3]
    assert len({pid for _, pid in results}) == 1


def test_max_tasks_per_child_replaces_the_child(queue: Queue) -> None:
    results = _counts(queue, 4, max_tasks_per_child=2)

    assert [count for count, _ in results] == [1, 1, 2, 2]
    assert len({pid for _, pid in results}) == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_max_tasks_per_child_rejects(queue: Queue, bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        Worker(queue, max_tasks_per_child=bad)  # type: ignore[arg-type]

    assert err.value.code == "invalid_option"
    assert err.value.field == "max_tasks_per_child"
    assert repr(bad) in str(err.value)
