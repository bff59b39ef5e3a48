"""Finding a task by its registry name (``Queue.enqueue`` / ``enqueue_many``, the CLI)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from queue_core.app.options import check_name
from queue_core.app.spec import build_spec
from queue_core.app.task import Task
from queue_core.records.errors import ConfigError, NotFound

if TYPE_CHECKING:
    from queue_core.app.owner import TaskOwner

__all__ = ["task_by_name"]


def task_by_name(
    owner: TaskOwner,
    tasks: Mapping[str, Task[Any, Any]],
    task_name: str,
    allow_unregistered: bool,
    method: str,
) -> Task[Any, Any]:
    """The task ``task_name`` of ``tasks``; with ``allow_unregistered`` an unregistered
    name is a task with the queue's defaults (a worker that knows it runs it).

    Raises:
        ConfigError: ``unknown_task`` for a name not registered (without
            ``allow_unregistered``), naming the way out and the tasks registered.
    """
    check_name(task_name, "task_name")
    task = tasks.get(task_name)
    if task is not None:
        return task
    if not allow_unregistered:
        known = ", ".join(sorted(tasks)) or "none"
        raise ConfigError(
            f"unknown task {task_name!r}: it is not registered on this queue in this "
            "process, so its options (queue, retries, timeout, ...) are unknown here and "
            "the job would silently get the queue defaults — import the module that "
            "declares the task first (CLI: pass --app MODULE:ATTR, the Queue your tasks "
            f"are declared on), or pass allow_unregistered=True to {method}() (CLI: "
            f"--allow-unregistered) to enqueue with the queue defaults; tasks registered "
            f"here: {known}",
            code="unknown_task",
            field="task_name",
            value=task_name,
        )
    return Task(owner, _unregistered, name=task_name, spec=build_spec(is_async=False))


def _unregistered(*args: Any, **kwargs: Any) -> Any:
    raise NotFound("this task is not registered in this process; run it on a worker")
