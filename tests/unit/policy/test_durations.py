"""parse_duration: the forms every duration option accepts, and the error for the rest."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_core.records.durations import parse_duration, parse_optional_duration, to_ms
from queue_core.records.errors import ConfigError


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (1, 1.0),
        (30, 30.0),
        (0.25, 0.25),
        (1e-3, 0.001),
        ("30", 30.0),
        ("2.5", 2.5),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("2h", 7200.0),
        ("1h30m", 5400.0),
        ("1h30m15s", 5415.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("1d", 86400.0),  # days, as retention takes them (issue 23 item 14)
        ("1d12h", 129600.0),
        ("0.5d", 43200.0),
        ("10us", 1e-5),
        ("10µs", 1e-5),
        ("500ns", 5e-7),
        (".5s", 0.5),
        ("1m0.5s", 60.5),
        (" 5m ", 300.0),
        (timedelta(minutes=2), 120.0),
        (timedelta(milliseconds=1), 0.001),
    ],
)
def test_valid_durations(value: Any, seconds: float) -> None:
    result = parse_duration(value)
    assert isinstance(result, float)
    assert result == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize(
    "value",
    [
        True,
        False,
        None,
        "",
        "   ",
        "abc",
        "5 minutes",
        "1h 30m",
        "1h30",
        "s",
        "5x",
        "5dd",
        "5days",
        "-5s",
        "+5s",
        "1e3",
        "0",
        "0s",
        "0h0m",
        0,
        0.0,
        -1,
        -0.5,
        float("nan"),
        float("inf"),
        float("-inf"),
        10**400,
        timedelta(0),
        timedelta(seconds=-1),
        [5],
        b"5s",
        object(),
    ],
    ids=lambda v: "object()" if type(v) is object else repr(v),  # no address in an id
)
def test_invalid_durations_raise_config_error_quoting_the_value(value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration(value, field="timeout")
    err = info.value
    assert err.code == "invalid_duration"
    assert err.field == "timeout"
    assert err.value is value
    message = str(err)
    assert "'timeout'" in message
    assert repr(value) in message
    assert "'90s'" in message and "'250ms'" in message


def test_message_example_is_exact() -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration("abc", field="timeout")
    assert str(info.value) == (
        "invalid duration for 'timeout': 'abc' — expected seconds (a number > 0) "
        "or a string like '90s', '30m', '1h30m', '250ms'"
    )


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_duration("nope")


def test_default_field_name() -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration(-3)
    assert info.value.field == "duration"


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("1m", 60.0), (2, 2.0)])
def test_parse_optional_duration(value: Any, expected: float | None) -> None:
    assert parse_optional_duration(value, field="heartbeat") == expected


def test_parse_optional_duration_still_rejects_bad_values() -> None:
    with pytest.raises(ConfigError) as info:
        parse_optional_duration("soon", field="heartbeat")
    assert info.value.field == "heartbeat"


@pytest.mark.parametrize(
    ("seconds", "ms"),
    [(1.0, 1000), (0.25, 250), (0.0006, 1), (1.2345, 1234), (90.0, 90000), (0.0, 0)],
)
def test_to_ms_rounds(seconds: float, ms: int) -> None:
    assert to_ms(seconds) == ms
    assert isinstance(to_ms(seconds), int)


@settings(max_examples=200, deadline=None)
@given(
    h=st.integers(0, 99), m=st.integers(0, 59), s=st.integers(0, 59), ms=st.integers(0, 999)
)
def test_compound_strings_sum_their_parts(h: int, m: int, s: int, ms: int) -> None:
    total = h * 3600 + m * 60 + s + ms / 1000
    text = f"{h}h{m}m{s}s{ms}ms"
    if total == 0:
        with pytest.raises(ConfigError):
            parse_duration(text)
    else:
        assert parse_duration(text) == pytest.approx(total, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1e-6, max_value=1e9, allow_nan=False))
def test_positive_numbers_and_their_strings_agree(x: float) -> None:
    assert parse_duration(x) == x
    assert parse_duration(f"{x!r}s" if "e" not in repr(x) else f"{x:.6f}s") == pytest.approx(
        x, rel=1e-6, abs=1e-6
    )
    assert math.isfinite(parse_duration(x))
