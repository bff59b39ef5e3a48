"""What a worker uses of the :class:`~queue_core.Queue` it serves.

A protocol, so that the worker builds on tasks, storage and the clock and not on the
facade: the :class:`~queue_core.Queue` starts workers (``run_worker``, eager mode), a
worker never imports the facade.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from queue_core.app.owner import TaskOwner

if TYPE_CHECKING:
    from queue_core.app.events import WorkerListener
    from queue_core.app.periodic import Periodic
    from queue_core.app.task import Task

__all__ = ["WorkerHost"]


class WorkerHost(TaskOwner, Protocol):
    """The queue a worker serves, as the worker sees it."""

    lease: float
    """The lease a worker takes on a claimed job, in seconds."""
    url: str | None
    """The storage URL as given (``None`` for a storage object); shown masked."""
    worker_listeners: list[WorkerListener]
    """Listeners every worker of the queue calls."""

    @property
    def tasks(self) -> dict[str, Task[Any, Any]]:
        """Registered tasks by name."""
        ...

    @property
    def periodic_tasks(self) -> dict[str, Periodic]:
        """Periodic tasks by task name."""
        ...

    def get_task(self, name: str) -> Task[Any, Any] | None:
        """The task registered under ``name``, or ``None``."""
        ...

    def add_worker_listener(self, listener: WorkerListener) -> None:
        """Have every worker of this queue call ``listener``."""
        ...
