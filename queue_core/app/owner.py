"""What a task asks of the :class:`~queue_core.Queue` that owns it.

A protocol, so that :mod:`queue_core.app.task` builds on what a task needs (defaults,
the serializer, a way to submit jobs) and not on the facade that satisfies it: the
:class:`~queue_core.Queue` imports tasks, never the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from queue_core.app.handle import HandleOwner

if TYPE_CHECKING:
    from queue_core.app.handle import JobHandle
    from queue_core.records.jobs import NewJob
    from queue_core.rules.retry import RetryPolicy
    from queue_core.storage.abilities import SupportsTemplateEnqueue

__all__ = ["TaskOwner"]


class TaskOwner(HandleOwner, Protocol):
    """The queue a task belongs to, as the task sees it."""

    default_queue: str
    """The queue of tasks that set none."""
    default_timeout: float | None
    """The per-attempt bound of tasks that set none."""
    retry_policy: RetryPolicy
    """The queue-wide retry defaults (first in the merge order)."""

    def _submit_one(self, job: NewJob) -> JobHandle[Any]:
        """Store one job (or run it eagerly) and return its handle."""
        ...

    def _submit_many(self, jobs: Sequence[NewJob]) -> list[JobHandle[Any]]:
        """Store a batch of jobs (or run them eagerly) and return their handles."""
        ...

    def template_sink(self) -> SupportsTemplateEnqueue | None:
        """The storage to hand a task's plain jobs to as template rows, or ``None`` when
        they take the ordinary path (no such ability, header providers, eager mode)."""
        ...
