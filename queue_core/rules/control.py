"""Flow control (SPEC §13): the rules every backend applies, as pure functions.

No clock, no I/O: ``now`` (epoch ms, the storage's clock) is an argument. A backend keeps
what each rule reads and applies the answer in the same atomic step as the operation it
guards (the enqueue, the claim); a Lua script or SQL statement that mirrors a rule names
the function here.

* :func:`supersede` -- ``cancel_in_progress`` and ``latest`` at enqueue: which active
  jobs of the key a new job ends, and how (:func:`superseded_end`).
* :func:`round_robin_order` -- ``round_robin`` at claim: which key's job comes next.
* :func:`debounce_ready_at` -- a debounced call merged into its queued job: the new run
  time.
* :func:`paused` -- whether a job matches a stored pause.
* :func:`check_progress`, :func:`progress_due_at` -- ``ctx.progress``: what is accepted,
  and when the next write may happen (at most one per :data:`PROGRESS_EVERY_MS`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from queue_core.records.control import PauseKind
from queue_core.records.errors import ConfigError
from queue_core.records.jobs import JobState, Reason

__all__ = [
    "pause_kind",
    "BEHAVIORS",
    "MAX_PROGRESS_MESSAGE",
    "PROGRESS_EVERY_MS",
    "Active",
    "check_progress",
    "debounce_ready_at",
    "paused",
    "progress_due_at",
    "round_robin_order",
    "supersede",
    "superseded_end",
]

BEHAVIORS: Final = ("queue", "skip", "round_robin", "cancel_in_progress", "latest")
"""Every ``Concurrency`` behaviour (SPEC §7 and §13)."""

PROGRESS_EVERY_MS: Final = 1000
"""At most one progress write per attempt in this many ms (the latest always kept)."""

MAX_PROGRESS_MESSAGE: Final = 1000
"""Characters of a progress message kept (longer ones are cut, with an ellipsis)."""


@dataclass(frozen=True, slots=True)
class Active:
    """A queued or running job of a concurrency key, as :func:`supersede` sees it."""

    id: str
    state: JobState
    order: int
    """Enqueue order within the storage (smaller = older)."""


def supersede(behavior: str | None, active: Sequence[Active], limit: int) -> list[str]:
    """The jobs a new job of ``behavior`` ends by arriving, oldest first.

    Args:
        behavior: the new job's ``concurrency_behavior``.
        active: the key's ``queued`` and ``running`` jobs before the new one is stored.
        limit: the key's ``concurrency_limit``.

    * ``cancel_in_progress``: active = queued + running; when ``limit`` or more are
      active, the oldest ones end so that the new job makes exactly ``limit`` (the new
      job takes their place at once).
    * ``latest``: every *queued* job of the key ends (at most one is ever queued): the
      new job waits in its place; running ones go on (at most ``limit`` run, checked at
      claim like ``queue``).
    * anything else: nothing.
    """
    oldest = sorted(active, key=lambda a: a.order)
    if behavior == "cancel_in_progress":
        extra = len(oldest) - limit + 1
        return [a.id for a in oldest[: max(0, extra)]]
    if behavior == "latest":
        return [a.id for a in oldest if a.state is JobState.QUEUED]
    return []


def superseded_end(behavior: str | None) -> tuple[JobState, str]:
    """How a superseded job ends: ``cancelled`` (``cancel_in_progress``: a running one's
    attempt too, outcome ``cancelled``) or ``skipped`` (``latest``), reason ``superseded``."""
    if behavior == "latest":
        return JobState.SKIPPED, Reason.SUPERSEDED.value
    return JobState.CANCELLED, Reason.SUPERSEDED.value


def round_robin_order(keys: Mapping[str, tuple[int, int]]) -> list[str]:
    """The order in which a ``round_robin`` group's keys are served next.

    Args:
        keys: for each key with a claimable job, ``(served, head)``: the group's claim
            counter when the key was last served (``0`` = never) and the claim order of
            its best ready job (smaller = first).

    Least recently served first; keys never served first of all; ties by their best job.
    Serving a key gives it the group's next counter value, so it goes to the back: a key
    with a backlog of 1,000 is served once per round, and a new key's job is claimed
    within one round of claims. A claim of ``n`` jobs serves the keys in this order, one
    job each per round (the ``k``-th round takes each key's ``k``-th best job): what a
    storage that ranks each key's jobs (``ROW_NUMBER() OVER (PARTITION BY key)``) and
    sorts by ``(rank, served, head)`` computes in one statement.
    """
    return sorted(keys, key=lambda k: (keys[k][0], keys[k][1], k))


def debounce_ready_at(first_ms: int, now: int, debounce_ms: int, debounce_max_ms: int) -> int:
    """The run time of a debounced job when another call of its burst arrives at ``now``.

    ``now + debounce_ms``, but never past ``debounce_max_ms`` after the burst's first call
    (``first_ms``, the job's enqueue): a steady stream of calls still runs the job at
    least every ``debounce_max_ms``.
    """
    return min(now + debounce_ms, first_ms + debounce_max_ms)


def pause_kind(kind: PauseKind | str) -> PauseKind:
    """``kind`` as a :class:`PauseKind` (what ``pause`` / ``resume`` take).

    Raises:
        ConfigError: ``code="invalid_option"`` naming the value and the accepted kinds.
    """
    try:
        return PauseKind(kind)
    except ValueError:
        raise ConfigError(
            f"invalid pause kind: {kind!r} — expected 'queue', 'task' or 'flow'",
            code="invalid_option",
            field="kind",
            value=kind,
        ) from None


def paused(
    pauses: Collection[tuple[PauseKind, str]], queue: str, task: str, flow: str | None
) -> bool:
    """Whether a job of ``queue`` and ``task`` (a step of ``flow``, else ``None``) matches
    one of the stored ``pauses``: then no claim hands it out."""
    if not pauses:
        return False
    return (
        (PauseKind.QUEUE, queue) in pauses
        or (PauseKind.TASK, task) in pauses
        or (flow is not None and (PauseKind.FLOW, flow) in pauses)
    )


def check_progress(fraction: object, message: object = None) -> tuple[float, str | None]:
    """``ctx.progress``'s arguments, checked: a number from 0.0 to 1.0 and ``None`` or a
    string (cut to :data:`MAX_PROGRESS_MESSAGE` characters).

    Raises:
        ConfigError: ``code="invalid_option"``, naming the bad value and what is accepted.
    """
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not math.isfinite(fraction)
        or not 0.0 <= fraction <= 1.0
    ):
        raise ConfigError(
            f"invalid progress fraction: {fraction!r} — expected a number from 0.0 to 1.0 "
            "(e.g. ctx.progress(0.4, '40 of 100 files'))",
            code="invalid_option",
            field="fraction",
            value=fraction,
        )
    if message is not None and not isinstance(message, str):
        raise ConfigError(
            f"invalid progress message: {message!r} — expected a string or None",
            code="invalid_option",
            field="message",
            value=message,
        )
    if message is not None and len(message) > MAX_PROGRESS_MESSAGE:
        message = message[: MAX_PROGRESS_MESSAGE - 1] + "…"
    return float(fraction), message


def progress_due_at(last_write_ms: int | None, every_ms: int = PROGRESS_EVERY_MS) -> int:
    """When an attempt's next progress write may happen: at once (``0``) before its first
    write, else ``every_ms`` after the last one. A report that comes earlier waits (only
    the latest waiting one is written) until then, or until the attempt ends, when it is
    stored with the end."""
    return 0 if last_write_ms is None else last_write_ms + every_ms
