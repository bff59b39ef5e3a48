"""The retry policy: how many attempts, and how long to wait between them (SPEC §3).

Pure: the random source is an argument, and nothing here reads a clock.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any, Final, Literal, TypeVar, cast

from queue_core.records.base import Record
from queue_core.records.durations import parse_duration
from queue_core.records.errors import ConfigError

__all__ = ["BackoffKind", "RetryPolicy", "jittered", "merge_policies", "policy_from_options"]

BackoffKind = Literal["exponential", "fixed"]
_BACKOFF_KINDS: Final = ("exponential", "fixed")

MAX_ATTEMPTS_LIMIT: Final = 100

_T = TypeVar("_T")


class _Default:
    """Marks a constructor argument that was not given; reprs as its default value."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def _default(value: _T) -> _T:
    # Typed as the value itself so signatures read ``max_attempts: int = 1``.
    return cast(_T, _Default(value))


# Module-level markers for "not given" (each reprs as the default it stands for).
_D_MAX_ATTEMPTS: Final[int] = _default(1)
_D_BACKOFF: Final[BackoffKind] = _default("exponential")
_D_INITIAL: Final[float] = _default(1.0)
_D_COEFFICIENT: Final[float] = _default(2.0)
_D_MAX_DELAY: Final[float] = _default(600.0)
_D_JITTER: Final[float] = _default(0.1)
_D_NON_RETRYABLE: Final[tuple[str, ...]] = _default(())


@dataclass(frozen=True, kw_only=True, init=False, eq=False, repr=False)
class RetryPolicy(Record):
    """How often a failed job is retried and how long each retry waits.

    The delay after failed attempt ``n`` (``n >= 1``) before any jitter is::

        fixed:        d = min(max_delay, initial)
        exponential:  d = min(max_delay, initial * coefficient ** (n - 1))

    Jitter is subtractive so that ``max_delay`` stays a hard cap: the delay used is
    drawn uniformly from ``[d * (1 - jitter), d]``. With ``jitter=0`` delays are exact
    (30 s, 60 s, 120 s … for ``initial=30``).

    Policies are merged field by field (queue defaults → flow → task → call, later
    wins); only fields given explicitly to the constructor take part, which the
    policy remembers in :attr:`explicit`. ``dataclasses.replace`` passes every field
    and therefore marks them all explicit.

    Raises:
        ConfigError: at construction, naming the field, the bad value and what is
            accepted (``code="invalid_option"``, or ``"invalid_duration"`` for
            ``initial`` and ``max_delay``).
    """

    max_attempts: int = 1
    """Attempts including the first; ``1`` means no retry. An integer from 1 to 100."""
    backoff: BackoffKind = "exponential"
    """``"exponential"`` (delays grow by ``coefficient``) or ``"fixed"`` (always ``initial``)."""
    initial: float = 1.0
    """First delay, in seconds (> 0). Accepts a duration: a number or a string like ``"30s"``."""
    coefficient: float = 2.0
    """Growth factor of exponential backoff, a finite number ``>= 1.0``."""
    max_delay: float = 600.0
    """Hard cap on any delay, in seconds (> 0). Accepts a duration like ``"10m"``."""
    jitter: float = 0.1
    """Fraction ``j`` in ``[0, 1]``: the delay is drawn uniformly from ``[d*(1-j), d]``."""
    non_retryable: tuple[str, ...] = ()
    """Exception class names never retried, matched exactly against the reported
    ``error_class`` (``"ValueError"``) or ``error_type`` (``"builtins.ValueError"``)."""
    explicit: frozenset[str] = field(default=frozenset(), init=False, compare=False, repr=False)
    """Names of the fields given explicitly at construction (used by merging)."""

    def __init__(
        self,
        *,
        max_attempts: int = _D_MAX_ATTEMPTS,
        backoff: BackoffKind = _D_BACKOFF,
        initial: float | str | timedelta = _D_INITIAL,
        coefficient: float = _D_COEFFICIENT,
        max_delay: float | str | timedelta = _D_MAX_DELAY,
        jitter: float = _D_JITTER,
        non_retryable: Iterable[str] = _D_NON_RETRYABLE,
    ) -> None:
        given: dict[str, object] = {
            "max_attempts": max_attempts,
            "backoff": backoff,
            "initial": initial,
            "coefficient": coefficient,
            "max_delay": max_delay,
            "jitter": jitter,
            "non_retryable": non_retryable,
        }
        explicit = frozenset(k for k, v in given.items() if not isinstance(v, _Default))
        raw = {k: (v.value if isinstance(v, _Default) else v) for k, v in given.items()}
        self._set(_validate(raw), explicit)

    def _set(self, values: Mapping[str, object], explicit: frozenset[str]) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "explicit", explicit)

    @classmethod
    def _from_validated(cls, values: Mapping[str, object], explicit: frozenset[str]) -> RetryPolicy:
        policy = cls.__new__(cls)
        policy._set(values, explicit)
        return policy

    def _values(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in _FIELDS}

    # ------------------------------------------------------------------ delays

    def base_delay(self, attempt: int) -> float:
        """The delay in seconds after failed attempt ``attempt``, before jitter.

        Args:
            attempt: the number of the attempt that failed, ``>= 1``.

        Returns:
            ``min(max_delay, initial)`` for fixed backoff, else
            ``min(max_delay, initial * coefficient ** (attempt - 1))``. Never overflows:
            huge attempt numbers give ``max_delay``.
        """
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise ValueError(f"attempt must be an integer >= 1, got {attempt!r}")
        if self.backoff == "fixed" or self.coefficient == 1.0 or attempt == 1:
            return min(self.max_delay, self.initial)
        # Cap before the power can overflow: once initial * c**k reaches max_delay the
        # answer is max_delay, and k >= log(max_delay / initial) / log(c) says so.
        exponent = attempt - 1
        if exponent * math.log(self.coefficient) >= math.log(self.max_delay / self.initial):
            return self.max_delay
        return min(self.max_delay, self.initial * self.coefficient**exponent)

    def delay(self, attempt: int, rng: Callable[[], float]) -> float:
        """The jittered delay in seconds after failed attempt ``attempt``.

        Args:
            attempt: the number of the attempt that failed, ``>= 1``.
            rng: returns a float uniform in ``[0, 1)`` (e.g. ``random.random``).

        Returns:
            ``d * (1 - jitter * rng())`` with ``d = base_delay(attempt)``, so the value
            lies in ``[d * (1 - jitter), d]`` and never exceeds ``max_delay``.
        """
        d = self.base_delay(attempt)
        if self.jitter == 0.0:
            return d
        r = rng()
        if not 0.0 <= r <= 1.0:
            raise ValueError(f"rng() must return a float in [0, 1), got {r!r}")
        return jittered(d, self.jitter, r)

    # ------------------------------------------------------------------ merging

    def merged(self, other: RetryPolicy) -> RetryPolicy:
        """This policy overridden by ``other``'s explicitly given fields.

        The result's :attr:`explicit` is the union of both explicit sets.
        """
        if not isinstance(other, RetryPolicy):
            raise TypeError(f"can only merge a RetryPolicy, got {type(other).__name__}")
        if not other.explicit:
            return self
        values = self._values()
        for name in other.explicit:
            values[name] = getattr(other, name)
        return RetryPolicy._from_validated(values, self.explicit | other.explicit)


_FIELDS: Final = tuple(f.name for f in fields(RetryPolicy) if f.name != "explicit")


def _option_error(field: str, value: object, expected: str) -> ConfigError:
    return ConfigError(
        f"invalid {field}: {value!r} — expected {expected}",
        code="invalid_option",
        field=field,
        value=value,
    )


def _check_int(value: object, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _option_error(field, value, f"an integer from {low} to {high}")
    if not low <= int(value) <= high:
        raise _option_error(field, value, f"an integer from {low} to {high}")
    return int(value)


def _check_real(value: object, field: str, low: float, high: float | None) -> float:
    expected = f"a number from {low} to {high}" if high is not None else f"a finite number >= {low}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _option_error(field, value, expected)
    number = float(value)
    if math.isnan(number) or math.isinf(number) or number < low:
        raise _option_error(field, value, expected)
    if high is not None and number > high:
        raise _option_error(field, value, expected)
    return number


def _check_backoff(value: object, field: str) -> BackoffKind:
    if value not in _BACKOFF_KINDS or not isinstance(value, str):
        raise _option_error(field, value, "'exponential' or 'fixed'")
    return value


def _check_names(value: object, field: str) -> tuple[str, ...]:
    expected = "exception class names (strings such as 'ValueError' or 'app.errors.Fatal')"
    if isinstance(value, str):
        value = (value,)
    if isinstance(value, (bytes, Mapping)) or not isinstance(value, Iterable):
        raise _option_error(field, value, expected)
    names: list[str] = []
    for name in value:
        if not isinstance(name, str) or not name.strip():
            hint = ""
            if isinstance(name, type):
                hint = f" (for classes use retry_on/dont_retry_on, or the name {name.__name__!r})"
            raise ConfigError(
                f"invalid {field}: element {name!r} — expected {expected}{hint}",
                code="invalid_option",
                field=field,
                value=value,
            )
        if name not in names:
            names.append(name)
    return tuple(names)


def _validate(raw: Mapping[str, Any]) -> dict[str, object]:
    return {
        "max_attempts": _check_int(raw["max_attempts"], "max_attempts", 1, MAX_ATTEMPTS_LIMIT),
        "backoff": _check_backoff(raw["backoff"], "backoff"),
        "initial": parse_duration(raw["initial"], field="initial"),
        "coefficient": _check_real(raw["coefficient"], "coefficient", 1.0, None),
        "max_delay": parse_duration(raw["max_delay"], field="max_delay"),
        "jitter": _check_real(raw["jitter"], "jitter", 0.0, 1.0),
        "non_retryable": _check_names(raw["non_retryable"], "non_retryable"),
    }


def jittered(delay: float, jitter: float, r: float) -> float:
    """SPEC §3's subtractive jitter: ``delay * (1 - jitter * r)`` for ``r`` uniform in
    ``[0, 1)``, so the result lies in ``[delay * (1 - jitter), delay]``.

    :meth:`RetryPolicy.delay` applies it; a caller that computed ``base_delay`` once for
    many jobs (a task's plain calls) calls it directly with a fresh ``r`` per job.
    """
    return delay * (1.0 - jitter * r)


def merge_policies(*layers: RetryPolicy | None) -> RetryPolicy:
    """Merge policy layers field by field; later layers win, ``None`` layers are skipped.

    The order is queue defaults → flow → task → call. Only the fields a layer was
    given explicitly override earlier layers. No layers gives ``RetryPolicy()``.
    """
    result = RetryPolicy()
    for layer in layers:
        if layer is not None:
            result = result.merged(layer)
    return result


def policy_from_options(
    *,
    max_retries: int | None = None,
    max_attempts: int | None = None,
    retry_backoff: float | str | timedelta | None = None,
    retry_backoff_kind: BackoffKind | None = None,
    retry_coefficient: float | None = None,
    retry_max_delay: float | str | timedelta | None = None,
    retry_jitter: float | None = None,
    non_retryable: Iterable[str] | None = None,
    retry: RetryPolicy | None = None,
) -> RetryPolicy:
    """Turn flat task options (SPEC §2) into a :class:`RetryPolicy`.

    The one normalizer for decorator options and per-call overrides. Options left
    ``None`` are not given, so the result's :attr:`RetryPolicy.explicit` holds exactly
    the fields that were given, ready for :func:`merge_policies`.

    Args:
        max_retries: retries after the first attempt, ``0..99`` (``max_attempts - 1``).
        max_attempts: attempts including the first, ``1..100``.
        retry_backoff: first delay (a duration).
        retry_backoff_kind: ``"exponential"`` or ``"fixed"``.
        retry_coefficient: growth factor, ``>= 1.0``.
        retry_max_delay: cap on any delay (a duration).
        retry_jitter: fraction in ``[0, 1]``.
        non_retryable: exception class names never retried.
        retry: a whole :class:`RetryPolicy` instead of the flat options.

    Raises:
        ConfigError: ``conflicting_options`` when both ``max_retries`` and
            ``max_attempts`` are given, or ``retry`` together with a flat retry option;
            ``invalid_option`` / ``invalid_duration`` for a bad value, naming the
            option as the user spelled it.
    """
    flat = {
        "max_retries": max_retries,
        "max_attempts": max_attempts,
        "retry_backoff": retry_backoff,
        "retry_backoff_kind": retry_backoff_kind,
        "retry_coefficient": retry_coefficient,
        "retry_max_delay": retry_max_delay,
        "retry_jitter": retry_jitter,
        "non_retryable": non_retryable,
    }
    given = [name for name, value in flat.items() if value is not None]
    if retry is not None:
        if given:
            names = ", ".join(repr(n) for n in given)
            raise ConfigError(
                f"conflicting options: 'retry' and {names} — give either a RetryPolicy "
                "as 'retry' or the flat retry options, not both",
                code="conflicting_options",
                field="retry",
                value=retry,
            )
        if not isinstance(retry, RetryPolicy):
            raise _option_error("retry", retry, "a RetryPolicy(...) instance")
        return retry
    if max_retries is not None and max_attempts is not None:
        raise ConfigError(
            f"conflicting options: 'max_retries' ({max_retries!r}) and 'max_attempts' "
            f"({max_attempts!r}) — give one, not both (max_attempts = max_retries + 1)",
            code="conflicting_options",
            field="max_retries",
            value=(max_retries, max_attempts),
        )
    values: dict[str, object] = {}
    if max_retries is not None:
        values["max_attempts"] = (
            _check_int(max_retries, "max_retries", 0, MAX_ATTEMPTS_LIMIT - 1) + 1
        )
    if max_attempts is not None:
        values["max_attempts"] = _check_int(max_attempts, "max_attempts", 1, MAX_ATTEMPTS_LIMIT)
    if retry_backoff is not None:
        values["initial"] = parse_duration(retry_backoff, field="retry_backoff")
    if retry_backoff_kind is not None:
        values["backoff"] = _check_backoff(retry_backoff_kind, "retry_backoff_kind")
    if retry_coefficient is not None:
        values["coefficient"] = _check_real(retry_coefficient, "retry_coefficient", 1.0, None)
    if retry_max_delay is not None:
        values["max_delay"] = parse_duration(retry_max_delay, field="retry_max_delay")
    if retry_jitter is not None:
        values["jitter"] = _check_real(retry_jitter, "retry_jitter", 0.0, 1.0)
    if non_retryable is not None:
        values["non_retryable"] = _check_names(non_retryable, "non_retryable")
    return RetryPolicy(**values)  # type: ignore[arg-type]
