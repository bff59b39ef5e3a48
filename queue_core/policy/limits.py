"""Unique jobs and per-task rate limits: the rules every backend applies (SPEC §11).

Pure functions of their arguments (``now`` included): no clock, no I/O. A backend holds
only what it must do atomically -- look up the job holding a unique key and store the new
one in the same write; read, trim and extend a rate key's claim times in the same write as
the claims -- and asks these functions what to do.

Rate limits are a sliding-window log: a key keeps the start times of its most recent
claims (at most ``limit`` of them). A claim at ``now`` is allowed while fewer than
``limit`` kept times lie in the window ``(now - window_ms, now]``. So any window of
``window_ms`` holds at most ``limit`` claims, whatever the number of workers, and a job
that is not allowed simply stays queued.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from queue_core.errors import ConfigError
from queue_core.model import JobState
from queue_core.record import Record

__all__ = [
    "RATE_UNITS",
    "RateLimit",
    "parse_rate_limit",
    "rate_grant",
    "unique_holds",
]

RATE_UNITS: Final[dict[str, int]] = {"s": 1000, "m": 60_000, "h": 3_600_000}
"""Window length (ms) of each accepted unit of ``rate_limit="N/<unit>"``."""

_RATE_RE: Final = re.compile(r"^\s*(\d+)\s*/\s*([smh])\s*$")
_MAX_RATE: Final = 100_000


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RateLimit(Record):
    """At most ``limit`` claims in any window of ``window_ms`` milliseconds."""

    limit: int
    window_ms: int

    def __str__(self) -> str:
        unit = next(u for u, ms in RATE_UNITS.items() if ms == self.window_ms)
        return f"{self.limit}/{unit}"


def parse_rate_limit(value: object) -> RateLimit:
    """``"N/s"``, ``"N/m"`` or ``"N/h"`` (N an integer from 1 to 100000) -> :class:`RateLimit`.

    Raises:
        ConfigError: ``code="invalid_rate_limit"``, naming the value and the accepted form.
    """
    match = _RATE_RE.match(value) if isinstance(value, str) else None
    limit = int(match.group(1)) if match else 0
    if match is None or not 1 <= limit <= _MAX_RATE:
        raise ConfigError(
            f"invalid rate_limit: {value!r} — expected 'N/s', 'N/m' or 'N/h' with N an "
            f"integer from 1 to {_MAX_RATE} (e.g. '100/m')",
            code="invalid_rate_limit",
            field="rate_limit",
            value=value,
        )
    return RateLimit(limit, RATE_UNITS[match.group(2)])


def rate_grant(
    stamps: Sequence[int], now: int, limit: int, window_ms: int, want: int
) -> tuple[int, list[int]]:
    """How many of ``want`` claims may start at ``now``, and the claim times to keep.

    Args:
        stamps: the key's kept claim times (epoch ms, any order).
        now: the claim time (the storage's clock).
        limit: at most this many claims in any window.
        window_ms: the window's length, in ms.
        want: claims asked for.

    Returns:
        ``(granted, kept)``: ``granted`` claims may start now; ``kept`` is what the
        storage stores for the key afterwards (times still inside the window plus one
        ``now`` per granted claim, oldest first, never more than ``limit``).
    """
    live = sorted(s for s in stamps if s > now - window_ms)
    granted = max(0, min(want, limit - len(live)))
    return granted, live + [now] * granted


def unique_holds(
    state: JobState | str, enqueued_at: int, unique_for_ms: int | None, now: int
) -> bool:
    """Whether an existing job still holds its unique key at ``now``.

    It does while it is ``queued`` (scheduled included) or ``running``, and, when it was
    enqueued with ``unique_for``, until ``unique_for_ms`` after its enqueue whatever its
    state. An enqueue that meets a holder stores nothing and returns the holder's id.
    """
    if JobState(state) in (JobState.QUEUED, JobState.RUNNING):
        return True
    return unique_for_ms is not None and now < enqueued_at + unique_for_ms
