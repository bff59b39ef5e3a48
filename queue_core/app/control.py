"""The task options of flow control (SPEC §13): :class:`RateLimit` (shared, per key),
``debounce`` / ``debounce_max`` / ``debounce_key``, and how each call's keys are made.

Every check raises a :class:`~queue_core.records.errors.ConfigError` naming the option,
the value and what is accepted. The rules themselves are pure, in
:mod:`queue_core.rules.limits` and :mod:`queue_core.rules.control`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from queue_core.records.base import Record
from queue_core.records.durations import parse_duration, to_ms
from queue_core.records.errors import ConfigError
from queue_core.rules.limits import Rate, parse_rate_limit

__all__ = [
    "SUPERSEDING",
    "RateLimit",
    "call_keys",
    "check_debounce",
    "check_rate_limit",
    "control_fields",
    "key_of",
]

SUPERSEDING: Final = ("cancel_in_progress", "latest")
"""The behaviours whose new job ends older ones of its key (``SupportsSupersede``)."""

DEBOUNCE_MAX_FACTOR: Final = 10
"""``debounce_max`` defaults to this many times ``debounce``."""

_NAMED: Final = "rate:"
"""The storage key prefix of a named limit (``queue.rate_limit(name, rate)``)."""


def _bad_key(option: str, value: object) -> ConfigError:
    return ConfigError(
        f"invalid {option}: {value!r} — expected a function of the call's arguments "
        "returning a non-empty string, or None",
        code="invalid_option",
        field=option,
        value=value,
    )


@dataclass(frozen=True, slots=True, eq=False, repr=False, init=False)
class RateLimit(Record):
    """A rate limit: at most ``N`` body starts in any window of its length, across all
    workers (SPEC §13). Jobs over it wait ``queued``; they never fail for it.

    ``@queue.task(rate_limit="10/s")`` is ``RateLimit("10/s")`` held by that task alone.
    ``RateLimit("5/s", key=lambda tenant, *_: tenant)`` holds per value of the key (a
    function of the call's arguments returning a string). ``queue.rate_limit(name, rate)``
    returns a *named* limit: every task given it shares it.

    Args:
        rate: ``"N/s"``, ``"N/m"`` or ``"N/h"`` (N from 1 to 100000).
        key: ``None``, or a function of the call's arguments returning a non-empty string.
        name: shared by every task given this limit (``None``: the task's own).

    Raises:
        ConfigError: ``invalid_rate_limit`` for a bad rate, ``invalid_option`` for a bad
            key or name.
    """

    rate: str
    key: Callable[..., str] | None = field(default=None, compare=False)
    name: str | None = None

    def __init__(
        self, rate: str, key: Callable[..., str] | None = None, *, name: str | None = None
    ) -> None:
        parsed = parse_rate_limit(rate)
        if key is not None and not callable(key):
            raise _bad_key("rate_limit.key", key)
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError(
                f"invalid rate limit name: {name!r} — expected a non-empty string",
                code="invalid_option",
                field="name",
                value=name,
            )
        object.__setattr__(self, "rate", str(parsed))
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "name", name)

    @property
    def parsed(self) -> Rate:
        """The rate as the storage counts it (``limit`` per ``window_ms``)."""
        return parse_rate_limit(self.rate)

    @property
    def limit(self) -> int:
        """``N``: body starts allowed per window."""
        return self.parsed.limit

    @property
    def window_ms(self) -> int:
        """The window's length, in ms."""
        return self.parsed.window_ms

    def storage_key(self, task_name: str) -> str:
        """The key storage counts this limit under for a task without a key function:
        ``rate:<name>`` for a named limit, else the task's name."""
        return f"{_NAMED}{self.name}" if self.name is not None else task_name

    def __repr__(self) -> str:
        extra = "" if self.key is None else ", key=<function>"
        named = "" if self.name is None else f", name={self.name!r}"
        return f"RateLimit({self.rate!r}{extra}{named})"


def check_rate_limit(value: object) -> RateLimit | None:
    """``rate_limit``: ``None``, ``"N/s|m|h"`` or a :class:`RateLimit`."""
    if value is None or isinstance(value, RateLimit):
        return value
    if isinstance(value, Rate):  # the parsed form, from older callers
        return RateLimit(str(value))
    return RateLimit(value)  # type: ignore[arg-type]


def check_debounce(
    debounce: object, debounce_max: object, debounce_key: object
) -> tuple[float | None, float | None, Callable[..., str] | str | None]:
    """``debounce``, ``debounce_max`` (default ``10 × debounce``) and ``debounce_key``
    validated: ``(seconds, max seconds, key)``; all ``None`` when ``debounce`` is off.

    Raises:
        ConfigError: ``invalid_duration`` for a bad duration; ``invalid_option`` for a
            ``debounce_max`` shorter than ``debounce``, or a bad key;
            ``conflicting_options`` for ``debounce_max`` / ``debounce_key`` without
            ``debounce``.
    """
    if debounce is None:
        if debounce_max is not None or debounce_key is not None:
            given = "debounce_max" if debounce_max is not None else "debounce_key"
            raise ConfigError(
                f"conflicting options: {given} without debounce — give debounce='30s' too",
                code="conflicting_options",
                field=given,
                value=debounce_max if debounce_max is not None else debounce_key,
            )
        return None, None, None
    seconds = parse_duration(debounce, field="debounce")  # type: ignore[arg-type]
    most = (
        seconds * DEBOUNCE_MAX_FACTOR
        if debounce_max is None
        else parse_duration(debounce_max, field="debounce_max")  # type: ignore[arg-type]
    )
    if most < seconds:
        raise ConfigError(
            f"invalid debounce_max: {debounce_max!r} — expected a duration of at least "
            f"debounce ({seconds:g} s)",
            code="invalid_option",
            field="debounce_max",
            value=debounce_max,
        )
    if debounce_key is not None and not callable(debounce_key):
        if not isinstance(debounce_key, str) or not debounce_key:
            raise _bad_key("debounce_key", debounce_key)
    return seconds, most, debounce_key


Debounce = tuple[float | None, float | None, Callable[..., str] | str | None]
"""``(seconds, max seconds, key)`` as :func:`check_debounce` returns it."""


def control_fields(
    name: str, behavior: str | None, rate: RateLimit | None, debounce: Debounce | None
) -> dict[str, Any]:
    """The ``NewJob`` fields of task ``name``'s §13 options: its concurrency behaviour
    (``Concurrency.behavior``, ``None`` without concurrency), its rate and its debounce.
    A key computed per call is kept as is -- a keyed :class:`RateLimit`, a debounce key
    function, or ``True`` for "the task's own" -- and :func:`call_keys` makes it.

    Raises:
        ConfigError: ``conflicting_options`` for debounce with ``cancel_in_progress`` or
            ``latest`` (both decide which call runs).
    """
    seconds, most, key = debounce or (None, None, None)
    if seconds is not None and behavior in SUPERSEDING:
        raise ConfigError(
            f"conflicting options: debounce with concurrency behavior {behavior!r} "
            "— both decide which call runs; keep one",
            code="conflicting_options",
            field="debounce",
            value=seconds,
        )
    behavior = None if behavior in ("queue", "skip") else behavior
    return {
        "concurrency_behavior": behavior,
        "concurrency_group": name if behavior == "round_robin" else None,
        "rate_key": None
        if rate is None
        else (rate if rate.key is not None else rate.storage_key(name)),
        "rate_limit": None if rate is None else rate.limit,
        "rate_window_ms": None if rate is None else rate.window_ms,
        "debounce_key": None if seconds is None else (key if key is not None else True),
        "debounce_ms": None if seconds is None else to_ms(seconds),
        "debounce_max_ms": None if most is None else to_ms(most),
    }


def call_keys(
    name: str, fields: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """``fields`` with one call's rate key (a keyed :class:`RateLimit`) and debounce key
    made from its arguments (:func:`key_of`); unchanged when there is none."""
    rate, debounce = fields["rate_key"], fields["debounce_key"]
    if rate.__class__ is RateLimit:
        key = key_of("rate_limit.key", rate.key, rate.storage_key(name), args, kwargs)
        fields = {**fields, "rate_key": key}
    if debounce is not None:
        fields = {**fields, "debounce_key": key_of("debounce_key", debounce, name, args, kwargs)}
    return fields


def key_of(
    option: str,
    key: Callable[..., str] | str | bool | None,
    base: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str | None:
    """The storage key of one call for ``option``: ``base`` (``key`` is ``True``),
    ``"<base>:<key>"`` for a string key, ``"<base>:<key(*args, **kwargs)>"`` for a key
    function, ``None`` for no key.

    Raises:
        ConfigError: ``invalid_option`` when the key function returns anything but a
            non-empty string (the caller enqueues nothing).
    """
    if key is None:
        return None
    if key is True:
        return base
    value = key(*args, **kwargs) if callable(key) else key
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"invalid {option}: the key function of {base!r} returned {value!r} "
            f"({type(value).__name__}) — expected a non-empty string",
            code="invalid_option",
            field=option,
            value=value,
        )
    return f"{base}:{value}"
