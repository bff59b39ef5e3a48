"""Records of flow control (SPEC §13): a job's progress, and what is paused.

:class:`Progress` and :class:`Pause` are public (``JobHandle.progress()``,
``Queue.paused()``) and cross the storage protocol as they are;
:class:`ProgressUpdate` is what a worker writes (``set_progress``, and
``AttemptEnd.progress`` at the attempt's end).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from queue_core.records.base import Record, _MappingMixin

__all__ = ["Pause", "PauseKind", "Progress", "ProgressUpdate"]


class PauseKind(str, Enum):
    """What a pause names: a queue, a task (by registry name) or a flow (by name)."""

    QUEUE = "queue"
    TASK = "task"
    FLOW = "flow"
    """The step jobs of the flow's executions (matched through their execution)."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ProgressUpdate(Record):
    """A progress report as the worker writes it (the storage stamps the time)."""

    fraction: float
    """From 0.0 to 1.0 (checked by :func:`queue_core.rules.control.check_progress`)."""
    message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Progress(_MappingMixin):
    """The latest progress a job's body reported (``ctx.progress``), SPEC §13.

    Attributes:
        fraction: how far the body says it is, from 0.0 to 1.0.
        message: what it said with it, or ``None``.
        at: when it was stored (aware UTC datetime, by the storage's clock).
    """

    fraction: float
    message: str | None
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Pause(_MappingMixin):
    """One stored pause (``queue.pause(...)``): workers claim none of its jobs.

    Attributes:
        kind: ``queue``, ``task`` or ``flow``.
        name: the queue's, task's or flow's name.
        since: when it was paused (aware UTC datetime, by the storage's clock).
    """

    kind: PauseKind
    name: str
    since: datetime
