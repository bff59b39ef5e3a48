"""Unique jobs and per-task rate limits: the rules every backend applies (SPEC §11).

Pure functions of their arguments (``now`` included): no clock, no I/O. A backend holds
only what it must do atomically -- look up the job holding a unique key and store the new
one in the same write; read, trim and extend a rate key's claim times in the same write as
the claims -- and asks these functions what to do.

Rate limits are a sliding-window log that counts *body starts* (SPEC §13): a key keeps
the latest time each of its most recent claims may start its body (at most ``limit`` of
them). A claim at ``now`` is allowed while fewer than ``limit`` kept times lie after
``now - window_ms``, and it keeps ``now + RATE_START_MS``: the worker starts the body by
then (:attr:`~queue_core.records.jobs.ClaimedJob.start_by`) or gives the job back
(:func:`start_late`). Every body start ``b`` then lies in ``[claim time, kept time]``, so
of any ``limit + 1`` starts the last one granted found an earlier start at least
``window_ms`` before its own: no window of ``window_ms`` holds more than ``limit`` body
starts, whatever the number of workers and however late each body starts within its
bound. (Counting claim times instead let bodies that started a few ms after their claim
share a window with the next window's claims: 18 starts within one second at ``10/s``.)
A job that is not allowed simply stays queued.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from queue_core.records.base import Record
from queue_core.records.errors import ConfigError
from queue_core.records.jobs import JobState

__all__ = [
    "RATE_START_MS",
    "RATE_UNITS",
    "Rate",
    "parse_rate_limit",
    "rate_grant",
    "rate_room",
    "start_late",
    "unique_holds",
]

RATE_UNITS: Final[dict[str, int]] = {"s": 1000, "m": 60_000, "h": 3_600_000}
"""Window length (ms) of each accepted unit of ``rate_limit="N/<unit>"``."""

RATE_START_MS: Final = 100
"""How long after its claim a rate-limited job's body may start (its ``start_by``)."""

START_MARGIN_MS: Final = 50
"""The part of :data:`RATE_START_MS` a worker keeps for handing the body to its thread
or process after deciding to start it: it gives back a job whose claim is older than
``RATE_START_MS - START_MARGIN_MS`` when it comes to start it."""

_RATE_RE: Final = re.compile(r"^\s*(\d+)\s*/\s*([smh])\s*$")
_MAX_RATE: Final = 100_000


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Rate(Record):
    """At most ``limit`` body starts in any window of ``window_ms`` milliseconds."""

    limit: int
    window_ms: int

    def __str__(self) -> str:
        unit = next(u for u, ms in RATE_UNITS.items() if ms == self.window_ms)
        return f"{self.limit}/{unit}"


def parse_rate_limit(value: object) -> Rate:
    """``"N/s"``, ``"N/m"`` or ``"N/h"`` (N an integer from 1 to 100000) -> :class:`Rate`.

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
    return Rate(limit, RATE_UNITS[match.group(2)])


def rate_grant(
    stamps: Sequence[int], now: int, limit: int, window_ms: int, want: int
) -> tuple[int, list[int]]:
    """How many of ``want`` claims may start at ``now``, and the times to keep.

    Args:
        stamps: the key's kept times (epoch ms, any order).
        now: the claim time (the storage's clock).
        limit: at most this many body starts in any window.
        window_ms: the window's length, in ms.
        want: claims asked for.

    Returns:
        ``(granted, kept)``: ``granted`` claims may start now; ``kept`` is what the
        storage stores for the key afterwards (times after ``now - window_ms`` plus one
        ``now + RATE_START_MS`` per granted claim -- each claim's ``start_by`` --, oldest
        first, never more than ``limit``). :func:`rate_room` is the same rule on a list
        kept in order, for a storage that updates it in place.
    """
    live = sorted(stamps)
    granted, expired = rate_room(live, now, limit, window_ms, want)
    return granted, live[expired:] + [now + RATE_START_MS] * granted


def rate_room(
    stamps: Sequence[int], now: int, limit: int, window_ms: int, want: int
) -> tuple[int, int]:
    """:func:`rate_grant` on ``stamps`` kept oldest first: ``(granted, expired)``, the
    claims that may start at ``now`` and how many leading stamps left the window. The
    storage drops those and appends ``now + RATE_START_MS`` per granted claim: exactly
    :func:`rate_grant`'s ``kept``, in ``O(log n)`` plus the change."""
    expired = bisect.bisect_right(stamps, now - window_ms)
    granted = max(0, min(want, limit - (len(stamps) - expired)))
    return granted, expired


def start_late(
    start_by: int, started_at: int, *, returned_wall_ms: int, call_ms: float, since_return_ms: float
) -> bool:
    """Whether a worker about to start a rate-limited job's body must give it back.

    Args:
        start_by: the claim's ``start_by`` (storage clock, epoch ms).
        started_at: the claim's ``now`` (storage clock, epoch ms).
        returned_wall_ms: the worker's wall clock when the claim call returned (epoch ms).
        call_ms: how long the claim call took, by the worker's monotonic clock.
        since_return_ms: ms since the claim call returned, by the worker's monotonic clock.

    The time from the storage's ``now`` to the return is read off the wall clocks
    (``returned_wall_ms - started_at``) but never taken as more than the call itself
    lasted, nor less than 0: a worker clock that runs ahead of the storage's never makes
    every job late, one that runs behind errs by the call's way back only. The body must
    be on its way :data:`START_MARGIN_MS` before ``start_by``.
    """
    way_back = min(max(0, returned_wall_ms - started_at), call_ms)
    return started_at + way_back + since_return_ms > start_by - START_MARGIN_MS


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
