"""Durations: numbers of seconds or Go-style strings, normalised to float seconds.

Every duration option of queue-core (``timeout``, ``retry_backoff``, ``lease``, …)
goes through :func:`parse_duration`, so they all accept the same forms and reject
everything else with the same :class:`~queue_core.records.errors.ConfigError`
(``code == "invalid_duration"``)::

    parse_duration(90)         -> 90.0
    parse_duration("1h30m")    -> 5400.0
    parse_duration("250ms")    -> 0.25
    parse_duration("1d")       -> 86400.0
    parse_duration("30")       -> 30.0
    parse_duration(timedelta(minutes=2)) -> 120.0
"""

from __future__ import annotations

import math
import numbers
import re
from datetime import timedelta
from typing import Any

from queue_core.records.errors import ConfigError

__all__ = ["parse_duration", "parse_optional_duration", "to_ms"]

#: Seconds per unit of a Go-style duration string, as (multiplier, divisor) so that
#: sub-second units divide (``10us`` is exactly ``10 / 1e6``, not ``10 * 1e-6``).
_UNITS: dict[str, tuple[float, float]] = {
    "ns": (1.0, 1e9),
    "us": (1.0, 1e6),
    "µs": (1.0, 1e6),  # U+00B5 micro sign, as Go prints it
    "μs": (1.0, 1e6),  # U+03BC Greek mu
    "ms": (1.0, 1e3),
    "s": (1.0, 1.0),
    "m": (60.0, 1.0),
    "h": (3600.0, 1.0),
    "d": (86400.0, 1.0),  # days: retention and schedules are naturally counted in them
}

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
# Longest units first so "ms" is not read as "m" followed by junk.
_UNIT = "|".join(sorted((re.escape(u) for u in _UNITS), key=len, reverse=True))
_PART = re.compile(rf"({_NUMBER})({_UNIT})")
_GO_DURATION = re.compile(rf"(?:{_NUMBER}(?:{_UNIT}))+")
_BARE_NUMBER = re.compile(_NUMBER)

_EXPECTED = "expected seconds (a number > 0) or a string like '90s', '30m', '1h30m', '250ms'"


def _invalid(value: Any, field: str, why: str = "") -> ConfigError:
    detail = f" ({why})" if why else ""
    return ConfigError(
        f"invalid duration for {field!r}: {value!r}{detail} — {_EXPECTED}",
        code="invalid_duration",
        field=field,
        value=value,
    )


def parse_duration(value: float | int | str | timedelta, *, field: str = "duration") -> float:
    """Normalise a duration to seconds.

    Args:
        value: seconds as a number, a :class:`~datetime.timedelta`, or a Go-style
            string: one or more ``<number><unit>`` parts with units ``ns``, ``us``,
            ``ms``, ``s``, ``m``, ``h`` and ``d`` (days: ``"90s"``, ``"1h30m"``,
            ``"1.5h"``, ``"250ms"``, ``"1d"``, ``"1d12h"``); a bare numeric string
            (``"30"``) is seconds.
        field: the option name, used in the error.

    Returns:
        The duration in seconds, a finite float greater than zero.

    Raises:
        ConfigError: ``code="invalid_duration"`` for anything else — booleans,
            ``None``, empty or malformed strings, zero, negative, NaN or infinite
            values. The message quotes the bad value.
    """
    if isinstance(value, bool):
        raise _invalid(value, field, "a boolean is not a duration")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, numbers.Real):
        try:
            seconds = float(value)
        except (OverflowError, ValueError):
            raise _invalid(value, field) from None
    elif isinstance(value, str):
        seconds = _parse_string(value, field)
    else:
        raise _invalid(value, field, f"got {type(value).__name__}")
    if math.isnan(seconds) or math.isinf(seconds):
        raise _invalid(value, field, "must be finite")
    if seconds <= 0:
        raise _invalid(value, field, "must be greater than zero")
    return seconds


def _parse_string(value: str, field: str) -> float:
    text = value.strip()
    if _BARE_NUMBER.fullmatch(text):
        return float(text)
    if not _GO_DURATION.fullmatch(text):
        raise _invalid(value, field, _unit_hint(text))
    total = 0.0
    for number, unit in _PART.findall(text):
        multiplier, divisor = _UNITS[unit]
        total += float(number) * multiplier / divisor
    return total


_WORD_PART = re.compile(rf"({_NUMBER})\s*([^\d\s.]+)")
_HOURS_PER = {"day": 24, "days": 24, "w": 168, "wk": 168, "week": 168, "weeks": 168}
_SPELLED = {
    "sec": "s",
    "secs": "s",
    "second": "s",
    "seconds": "s",
    "S": "s",
    "min": "m",
    "mins": "m",
    "minute": "m",
    "minutes": "m",
    "M": "m",
    "hr": "h",
    "hrs": "h",
    "hour": "h",
    "hours": "h",
    "H": "h",
    "msec": "ms",
    "MS": "ms",
    "Ms": "ms",
}
_UNIT_LIST = "ns, us, ms, s, m, h, d"


def _unit_hint(text: str) -> str:
    """Why a string is not a duration, when it is a number with an unknown unit.

    ``"2w"`` -> ``'w' is not a unit: write 2w as '336h'``; ``"5 min"`` -> ``... '5m'``.
    """
    for number, unit in _WORD_PART.findall(text):
        if unit in _UNITS:
            continue
        if unit.lower() in _HOURS_PER:
            hours = float(number) * _HOURS_PER[unit.lower()]
            use = f"{hours:g}h"
        elif unit in _SPELLED or unit.lower() in _SPELLED:
            use = f"{number}{_SPELLED.get(unit, _SPELLED.get(unit.lower()))}"
        else:
            return f"{unit!r} is not a unit; units are {_UNIT_LIST}"
        return f"{unit!r} is not a unit: write {number}{unit} as {use!r}; units are {_UNIT_LIST}"
    return ""


def parse_optional_duration(
    value: float | int | str | timedelta | None, *, field: str = "duration"
) -> float | None:
    """Like :func:`parse_duration`, but ``None`` (meaning "off" / "no limit") passes through."""
    if value is None:
        return None
    return parse_duration(value, field=field)


def to_ms(seconds: float) -> int:
    """Seconds to whole milliseconds, rounded to the nearest (half to even); a positive
    duration shorter than half a millisecond is 1 ms, never 0 (which stored options read as
    "none" or "no limit": a ``timeout: 1us`` step would otherwise run unbounded)."""
    ms = int(round(seconds * 1000.0))
    return 1 if ms == 0 and seconds > 0 else ms
