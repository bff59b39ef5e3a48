"""What flows use of the :class:`~queue_core.Queue` they belong to.

A protocol, so that the flows API builds on what it needs (register a step's task or a
schedule's periodic task, the storage, the serializer, the clock) and not on the facade
that satisfies it: the Queue imports the flows API, never the other way round.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from queue_core.app.owner import TaskOwner

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from queue_core.app.options import TaskOptions
    from queue_core.app.task import TaskDecorator

__all__ = ["FlowHost"]


class FlowHost(TaskOwner, Protocol):
    """What flows use of their queue: a :class:`~queue_core.Queue` is one."""

    def task(
        self, func: None = None, /, *, name: str | None = None, **options: Unpack[TaskOptions]
    ) -> TaskDecorator:
        """``@queue.task(...)``: register a step's body as a task."""
        ...

    def periodic(
        self,
        every: float | str | timedelta | None = None,
        cron: str | None = None,
        tz: str = "UTC",
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        catch_up: bool = False,
        *,
        name: str | None = None,
        **options: Unpack[TaskOptions],
    ) -> TaskDecorator:
        """``@queue.periodic(...)``: register a task enqueued on a schedule."""
        ...
