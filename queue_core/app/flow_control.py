"""The queue-wide flow-control operations behind :class:`~queue_core.Queue` (SPEC §13):
named rate limits, and pausing and resuming queues, tasks and flows.

:class:`FlowControl` is a part the queue holds; ``queue.rate_limit``, ``queue.pause``,
``queue.resume`` and ``queue.paused`` hand their arguments to it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queue_core.app.control import RateLimit
from queue_core.app.limited import require
from queue_core.app.options import check_name
from queue_core.records.control import Pause, PauseKind
from queue_core.records.errors import ConfigError
from queue_core.storage.abilities import SupportsPause

if TYPE_CHECKING:
    from queue_core.storage.protocol import Storage

__all__ = ["FlowControl", "pause_targets"]


def _name_of(value: object, what: str) -> str:
    """A task's or flow's name: the string itself, or the object's ``name``."""
    name = getattr(value, "name", value)
    return check_name(name, what)


def pause_targets(
    queue: str | None, task: object | None, flow: object | None
) -> list[tuple[PauseKind, str]]:
    """The pauses ``pause(queue=, task=, flow=)`` names: one per argument given (a task
    or a flow by name or object).

    Raises:
        ConfigError: ``invalid_option`` when none is given, or a name is not a non-empty
            string.
    """
    out: list[tuple[PauseKind, str]] = []
    if queue is not None:
        out.append((PauseKind.QUEUE, check_name(queue, "queue")))
    if task is not None:
        out.append((PauseKind.TASK, _name_of(task, "task")))
    if flow is not None:
        out.append((PauseKind.FLOW, _name_of(flow, "flow")))
    if not out:
        raise ConfigError(
            "nothing to pause or resume: give queue=, task= or flow= (e.g. "
            "queue.pause(queue='emails'))",
            code="invalid_option",
            field="queue",
            value=None,
        )
    return out


class FlowControl:
    """Named rate limits and pauses of one queue.

    Args:
        storage: returns the queue's storage (read at each call).
    """

    def __init__(self, storage: Callable[[], Storage]) -> None:
        self._storage = storage
        self._named: dict[str, RateLimit] = {}
        self._lock = threading.Lock()

    def rate_limit(
        self, name: str, rate: str, *, key: Callable[..., str] | None = None
    ) -> RateLimit:
        """The named limit ``name`` (made on first use); see ``Queue.rate_limit``.

        Raises:
            ConfigError: ``invalid_rate_limit`` for a bad rate; ``invalid_option`` when
                ``name`` is already a limit with another rate or key.
        """
        check_name(name, "name")
        wanted = RateLimit(rate, key, name=name)
        with self._lock:
            known = self._named.setdefault(name, wanted)
        if known.rate != wanted.rate or known.key is not wanted.key:
            raise ConfigError(
                f"invalid rate limit {name!r}: already declared as {known!r} on this queue, "
                f"now {wanted!r} — one name is one limit; give the other a name of its own",
                code="invalid_option",
                field="name",
                value=name,
            )
        return known

    def _pauses(self) -> SupportsPause:
        storage = self._storage()
        require(storage, "pause", SupportsPause)
        assert isinstance(storage, SupportsPause)
        return storage

    def pause(self, queue: str | None, task: Any, flow: Any) -> list[Pause]:
        """Store a pause for each one given; return every stored pause afterwards."""
        targets = pause_targets(queue, task, flow)
        storage = self._pauses()
        for kind, name in targets:
            storage.pause(kind, name)
        return storage.list_paused()

    def resume(self, queue: str | None, task: Any, flow: Any) -> list[Pause]:
        """Remove the pause of each one given; return the pauses left."""
        targets = pause_targets(queue, task, flow)
        storage = self._pauses()
        for kind, name in targets:
            storage.resume(kind, name)
        return storage.list_paused()

    def paused(self) -> list[Pause]:
        """Every stored pause; ``[]`` on a storage that cannot pause."""
        storage = self._storage()
        return storage.list_paused() if isinstance(storage, SupportsPause) else []
