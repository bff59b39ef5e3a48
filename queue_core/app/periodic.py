"""A periodic task as the queue declares it: its schedule and the call each tick makes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_core.rules.ticks import Schedule

__all__ = ["Periodic"]


@dataclass(frozen=True, slots=True)
class Periodic:
    """A periodic task registered with ``@queue.periodic``: its schedule and the
    arguments every tick's job gets."""

    task_name: str
    schedule: Schedule
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
