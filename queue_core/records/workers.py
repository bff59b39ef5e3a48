"""Workers visible from outside: the :class:`WorkerInfo` record, the rule for "live",
and the storage abilities behind ``queue-core workers`` and prompt cancels.

Each worker registers a :class:`WorkerInfo` in storage when it starts, refreshes it
every third of its ``ttl_ms`` (with its busy and stuck slot counts) and removes it when
it stops cleanly. A worker that dies without removing it (SIGKILL, a lost host) drops
out of :meth:`SupportsWorkerRegistry.list_workers` once ``last_seen + ttl_ms`` has
passed (:func:`is_live`, the one rule every backend applies); storage deletes such
records when it meets them.

:class:`SupportsCancelPoll` is the cheap batched read a worker makes every
:data:`CANCEL_POLL_INTERVAL` seconds so that ``cancel()`` of a running job reaches its
body within a second instead of at the next lease renewal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from queue_core.records.base import Record
from queue_core.records.errors import ConfigError
from queue_core.records.jobs import dt_from_ms

__all__ = [
    "CANCEL_POLL_INTERVAL",
    "DEFAULT_WORKER_TTL_MS",
    "WorkerInfo",
]

DEFAULT_WORKER_TTL_MS: Final = 15_000
"""How long a worker's record counts as live after its last refresh (default)."""
CANCEL_POLL_INTERVAL: Final = 0.5
"""Seconds between a worker's reads of the cancel requests of its running attempts."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class WorkerInfo(Record):
    """One worker as registered in storage. Times are epoch milliseconds."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    slots: int
    busy: int
    """Slots running an attempt that is not stuck."""
    stuck: int
    """Slots held by a timed-out thread body that cannot be stopped."""
    started_at: int
    last_seen: int
    ttl_ms: int = DEFAULT_WORKER_TTL_MS
    """The record is live until ``last_seen + ttl_ms`` (see :func:`is_live`)."""

    def __post_init__(self) -> None:
        if self.ttl_ms <= 0:
            raise ConfigError(
                f"WorkerInfo.ttl_ms: invalid value {self.ttl_ms!r} — expected a positive "
                "number of milliseconds",
                code="invalid_option",
                field="ttl_ms",
                value=self.ttl_ms,
            )

    @property
    def expires_at(self) -> int:
        """When the record stops being live without a refresh (epoch ms)."""
        return self.last_seen + self.ttl_ms

    @property
    def started(self) -> datetime:
        """``started_at`` as an aware UTC datetime."""
        return dt_from_ms(self.started_at)  # type: ignore[return-value]

    @property
    def seen(self) -> datetime:
        """``last_seen`` as an aware UTC datetime."""
        return dt_from_ms(self.last_seen)  # type: ignore[return-value]

    def seen_at(self, now: int, *, busy: int, stuck: int) -> WorkerInfo:
        """This record refreshed at ``now`` with the current slot counts."""
        return replace(self, last_seen=now, busy=busy, stuck=stuck)

    def to_json(self) -> str:
        """The record as JSON (what key-value backends store)."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON types (``queue-core workers --json``)."""
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "queues": list(self.queues),
            "slots": self.slots,
            "busy": self.busy,
            "stuck": self.stuck,
            "started_at": self.started_at,
            "last_seen": self.last_seen,
            "ttl_ms": self.ttl_ms,
        }

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerInfo:
        """The record :meth:`to_json` wrote."""
        d = json.loads(text)
        d["queues"] = tuple(d["queues"])
        return cls(**d)
