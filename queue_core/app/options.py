"""Task options: the :class:`TaskOptions` / :class:`CallOptions` declarations, the
value types :class:`Concurrency` and :class:`Replay`, and the validation of each option.

Every check raises a :class:`~queue_core.records.errors.ConfigError` naming the option, the
value and what is accepted. Also importable from ``queue_core.app.task`` (and the public
names from ``queue_core``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Final, Literal, TypedDict

from queue_core.app.control import RateLimit
from queue_core.records.base import Record
from queue_core.records.durations import parse_duration, to_ms
from queue_core.records.errors import ConfigError
from queue_core.rules import BackoffKind, RetryPolicy
from queue_core.rules.control import BEHAVIORS
from queue_core.storage.protocol import Storage
from queue_core.storage.urls import mask_url

__all__ = [
    "CallOptions",
    "Concurrency",
    "Duration",
    "Replay",
    "TaskOptions",
]


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"

    def __bool__(self) -> bool:
        return False


UNSET: Final[Any] = _Unset()
"""Marks an option that was not given (``None`` means "off" for several options)."""

ISOLATIONS: Final = ("thread", "process")
_PRIORITY_RANGE: Final = (-(2**31), 2**31 - 1)
DEFAULT_KILL_GRACE: Final = 10.0


def check_queue_arguments(url: object, storage: object, retry: object, eager: object) -> None:
    """``Queue(...)``'s arguments of the wrong kind or together (``ConfigError``); the URL
    itself is judged when it is opened."""
    if storage is not None and url is not None:
        raise ConfigError(
            "conflicting options: give 'url' or 'storage', not both",
            code="conflicting_options",
            field="storage",
            value=mask_url(url) if isinstance(url, str) else url,
        )
    if storage is not None and not isinstance(storage, Storage):
        raise _invalid(
            "storage",
            storage,
            "a Storage (a backend's storage object, e.g. SQLStorage.from_url(...)) or None; "
            "a URL goes in url=",
        )
    if eager is not None and not isinstance(eager, bool):
        raise _invalid("eager", eager, "True, False or None")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise _invalid("retry", retry, "a RetryPolicy(...) or None")


def _invalid(field_name: str, value: object, expected: str) -> ConfigError:
    return ConfigError(
        f"invalid {field_name}: {value!r} — expected {expected}",
        code="invalid_option",
        field=field_name,
        value=value,
    )


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Concurrency(Record):
    """Bound on running instances of a task across all workers (SPEC §7).

    Args:
        limit: how many may be active at once (per key), an integer >= 1.
        behavior: ``"queue"``: extra jobs stay queued until a slot frees (active =
            running); ``"skip"``: a new job ends ``skipped`` at enqueue when the limit
            is reached (active = queued + running). SPEC §13:
            ``"round_robin"``: as ``queue`` per key, and claims rotate over the key
            values, the oldest job of each key in turn (no key starves another);
            ``"cancel_in_progress"``: a new job (or execution) whose key is full cancels
            the oldest active one (reason ``superseded``) and takes its place;
            ``"latest"``: at most ``limit`` running and one queued per key, a newer
            arrival replaces the queued one (which ends ``skipped``, ``superseded``).
        key: jobs sharing a key share the limit; default the task name (the flow's
            name for a flow). A function of the call's arguments (a flow: of its
            input) returning a string makes the limit hold per value of it, computed
            at enqueue (``key=lambda customer_id: customer_id``: one running sync per
            customer); a string shares one limit among every task naming it.
    """

    limit: int
    behavior: Literal["queue", "skip", "round_robin", "cancel_in_progress", "latest"] = "queue"
    key: str | Callable[..., str] | None = None

    def __post_init__(self) -> None:
        if not _is_int(self.limit) or not 1 <= int(self.limit) <= 1_000_000:
            raise _invalid("concurrency.limit", self.limit, "an integer from 1 to 1000000")
        if self.behavior not in BEHAVIORS:
            expected = ", ".join(repr(b) for b in BEHAVIORS)
            raise _invalid("concurrency.behavior", self.behavior, f"one of {expected}")
        if self.key is not None and not callable(self.key):
            if not isinstance(self.key, str) or not self.key:
                raise _invalid(
                    "concurrency.key", self.key, "a non-empty string, a function or None"
                )

    def slot_key(self, owner: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The string storage counts this limit under for one call of ``owner`` (a
        task's or a flow's name): see :func:`concurrency_slot_key`."""
        return concurrency_slot_key(self.key, owner, args, kwargs)


def concurrency_slot_key(
    key: str | Callable[..., str] | None,
    owner: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str:
    """The string storage counts a concurrency limit under for one call of ``owner``
    (a task's or a flow's name): ``owner`` without a key, the key string as given, or
    ``"<owner>:<key(*args, **kwargs)>"`` for a key function (one limit per value).

    Raises:
        ConfigError: ``invalid_option`` when the key function returns anything but a
            non-empty string (the caller enqueues nothing).
    """
    if key is None:
        return owner
    if isinstance(key, str):
        return key
    value = key(*args, **kwargs)
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"invalid concurrency.key: the key function of {owner!r} returned "
            f"{value!r} ({type(value).__name__}) — expected a non-empty string",
            code="invalid_option",
            field="concurrency.key",
            value=value,
        )
    return f"{owner}:{value}"


@dataclass(frozen=True, slots=True, init=False, eq=False, repr=False)
class Replay(Record):
    """Auto-replay of a task's dead jobs after a quiet period (SPEC §6).

    Validated and stored with the task; the automatic replay itself is not performed by
    this version of the worker (replay dead jobs with ``queue.retry_dead``).

    Args:
        after: quiet period before a replay (a duration).
        max_replays: how many times one job may be replayed, 1..100.
    """

    after: float
    max_replays: int

    def __init__(self, after: float | str | timedelta, max_replays: int = 3) -> None:
        object.__setattr__(self, "after", parse_duration(after, field="dead_letter_replay.after"))
        if not _is_int(max_replays) or not 1 <= int(max_replays) <= 100:
            raise _invalid(
                "dead_letter_replay.max_replays", max_replays, "an integer from 1 to 100"
            )
        object.__setattr__(self, "max_replays", int(max_replays))


Duration = float | str | timedelta
"""A duration: seconds as a number, a Go-style string (``"90s"``, ``"1h30m"``) or a
``timedelta``."""


class TaskOptions(TypedDict, total=False):
    """The task options of SPEC §2, declared once.

    ``@queue.task(**options)`` and ``Task.apply(..., **options)`` take exactly these
    keywords (``apply`` also takes ``delay`` and ``run_at``, see :class:`CallOptions`);
    an option that is not given keeps the task's value, then the queue's default.
    Meaning and defaults:

    * ``queue`` -- queue name (``"default"``).
    * ``max_retries`` / ``max_attempts`` -- retries after the first attempt / attempts
      including the first; give one, not both (0 retries).
    * ``retry_backoff`` -- first retry delay (1 s).
    * ``retry_backoff_kind`` -- ``"exponential"`` or ``"fixed"`` (exponential).
    * ``retry_coefficient`` -- growth factor of exponential backoff (2.0).
    * ``retry_max_delay`` -- cap on any delay (10 min).
    * ``retry_jitter`` -- subtractive jitter fraction in [0, 1] (0.1).
    * ``retry`` -- a whole :class:`~queue_core.RetryPolicy` instead of the flat options.
    * ``retry_on`` / ``dont_retry_on`` -- exception classes: whitelist / blacklist.
    * ``non_retryable`` -- exception class *names* never retried.
    * ``timeout`` -- bound on one attempt; ``None`` = no limit (the queue's
      ``default_timeout``, else 300 s).
    * ``heartbeat`` -- max silence between ``ctx.heartbeat()`` calls, >= 1 s (off).
    * ``schedule_to_start`` -- max wait between ready and claimed, >= 1 s (off).
    * ``concurrency`` -- a :class:`Concurrency` limit across all workers (none).
    * ``isolation`` -- ``"thread"`` or ``"process"`` for sync bodies (the worker's
      default, thread).
    * ``kill_grace`` -- SIGTERM -> SIGKILL grace for process isolation (10 s).
    * ``dead_letter_replay`` -- a :class:`Replay` setting (off).
    * ``priority`` -- higher runs first within a queue (0).
    * ``unique_key`` -- a string, or a function called with the call's arguments that
      returns one: while a job of this task with that key is queued or running (or
      within ``unique_for``), an enqueue returns that job's handle instead (off).
    * ``unique_for`` -- keep the key taken this long after the enqueue, whatever the
      job's state (default: only while queued or running).
    * ``rate_limit`` -- ``"N/s"``, ``"N/m"`` or ``"N/h"``, or a
      :class:`~queue_core.app.control.RateLimit` (per key, or a named one shared by several
      tasks, ``queue.rate_limit(name, rate)``): bodies of this task across all workers
      never start more than N times in any window of that length (off).
    * ``debounce`` -- a duration: a call whose ``debounce_key`` already has a queued job
      replaces that job's arguments (last call wins) and moves its run time to now +
      ``debounce``, returning that job's handle (off).
    * ``debounce_max`` -- never move the run time past this long after the burst's first
      call (default 10 × ``debounce``).
    * ``debounce_key`` -- a string, or a function of the call's arguments returning one
      (default: the task alone).
    """

    queue: str
    max_retries: int | None
    max_attempts: int | None
    retry_backoff: Duration | None
    retry_backoff_kind: BackoffKind | None
    retry_coefficient: float | None
    retry_max_delay: Duration | None
    retry_jitter: float | None
    retry: RetryPolicy | None
    retry_on: Iterable[type[BaseException]] | type[BaseException] | None
    dont_retry_on: Iterable[type[BaseException]] | type[BaseException] | None
    non_retryable: Iterable[str] | None
    timeout: Duration | None
    heartbeat: Duration | None
    schedule_to_start: Duration | None
    concurrency: Concurrency | int | None
    isolation: Literal["thread", "process"]
    kill_grace: Duration
    dead_letter_replay: Replay | None
    priority: int
    unique_key: str | Callable[..., str] | None
    unique_for: Duration | None
    rate_limit: str | RateLimit | None
    debounce: Duration | None
    debounce_max: Duration | None
    debounce_key: str | Callable[..., str] | None


class CallOptions(TaskOptions, total=False):
    """:class:`TaskOptions` plus what only one call can say: when the job is ready.

    * ``delay`` -- wait this long before the job is ready (a duration; 0/None = now).
    * ``run_at`` -- the job is ready at this time (a datetime or epoch seconds).
    """

    delay: Duration | None
    run_at: datetime | float | None


TASK_OPTIONS: Final[frozenset[str]] = frozenset(TaskOptions.__annotations__)
_CALL_ONLY: Final[frozenset[str]] = frozenset({"delay", "run_at"})


def _reject_unknown(options: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        import difflib

        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(allowed), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise TypeError(
            f"{where} got unexpected keyword argument(s) {', '.join(hints)}; "
            f"options are: {', '.join(sorted(allowed))}"
        )


# --------------------------------------------------------------------------- option checks


def check_name(value: object, field_name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _invalid(field_name, value, "a non-empty string")
    return value


def check_priority(value: object) -> int:
    if not _is_int(value) or not _PRIORITY_RANGE[0] <= int(value) <= _PRIORITY_RANGE[1]:  # type: ignore[call-overload]
        raise _invalid(
            "priority",
            value,
            f"an integer from {_PRIORITY_RANGE[0]} to {_PRIORITY_RANGE[1]} (higher runs first)",
        )
    return int(value)  # type: ignore[call-overload,no-any-return]


def _check_min_duration(value: object, field_name: str, minimum: float) -> float | None:
    if value is None:
        return None
    seconds = parse_duration(value, field=field_name)  # type: ignore[arg-type]
    if seconds < minimum:
        raise _invalid(field_name, value, f"a duration of at least {minimum:g} s, or None (off)")
    return seconds


def check_timeout(value: object) -> float | None:
    if value is None:
        return None
    return parse_duration(value, field="timeout")  # type: ignore[arg-type]


def check_concurrency(value: object) -> Concurrency | None:
    if value is None or isinstance(value, Concurrency):
        return value
    if _is_int(value):
        return Concurrency(int(value))  # type: ignore[call-overload]
    raise _invalid("concurrency", value, "Concurrency(limit, behavior=..., key=...) or None")


def check_isolation(value: object) -> str:
    if value not in ISOLATIONS or not isinstance(value, str):
        raise _invalid("isolation", value, "'thread' or 'process'")
    return value


def check_replay(value: object) -> Replay | None:
    if value is None or isinstance(value, Replay):
        return value
    raise _invalid("dead_letter_replay", value, "Replay(after, max_replays) or None")


def _check_delay(value: object) -> int:
    if value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0
    ):
        return 0
    return to_ms(parse_duration(value, field="delay"))  # type: ignore[arg-type]


def _check_run_at(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return int(round(value.timestamp() * 1000))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return int(round(float(value) * 1000))
    raise _invalid("run_at", value, "a datetime or epoch seconds, or None")


def check_unique_key(value: object) -> str | Callable[..., str] | None:
    if value is None or callable(value) or (isinstance(value, str) and value):
        return value
    raise _invalid(
        "unique_key", value, "a non-empty string, a function of the call's arguments, or None"
    )


def check_unique_for(value: object) -> float | None:
    if value is None:
        return None
    return parse_duration(value, field="unique_for")  # type: ignore[arg-type]


def unique_key_of(
    key: str | Callable[..., str] | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str | None:
    """The unique key of one call: ``key`` itself, or ``key(*args, **kwargs)``."""
    if key is None or isinstance(key, str):
        return key
    value = key(*args, **kwargs)
    if not isinstance(value, str) or not value:
        raise _invalid("unique_key", value, "the key function to return a non-empty string")
    return value


def fq_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
