"""The worker's listeners: told of its start and stop and of every attempt's start and end.

:class:`~queue_core.app.events.WorkerListener` objects (``Queue.worker_listeners``, then
the worker's own). A listener's exception is logged, never raised: a listener never
breaks the worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queue_core.app.events import AttemptStarted, WorkerListener
from queue_core.worker.log import log
from queue_core.worker.slots import Attempt

__all__ = ["Listeners"]


class Listeners:
    """The listeners of one worker (``all``: empty when none, checked before each event)."""

    __slots__ = ("all", "worker_id")

    def __init__(self, listeners: Sequence[WorkerListener], worker_id: str) -> None:
        self.all: tuple[WorkerListener, ...] = tuple(listeners)
        self.worker_id = worker_id

    def started(self, att: Attempt) -> None:
        """``att`` was claimed and holds a slot."""
        self.notify("attempt_started", AttemptStarted(att.job, self.worker_id))

    def notify(self, method: str, event: Any) -> None:
        """Call ``method(event)`` on every listener; a listener's exception is logged."""
        for listener in self.all:
            try:
                getattr(listener, method)(event)
            except Exception:  # noqa: BLE001 - a listener never breaks the worker
                log.exception("worker listener %r failed in %s", listener, method)
