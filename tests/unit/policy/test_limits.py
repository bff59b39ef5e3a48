"""The pure rules of unique jobs and rate limits (queue_core.policy.limits)."""

from __future__ import annotations

import pytest

from queue_core.errors import ConfigError
from queue_core.model import JobState
from queue_core.policy.limits import RateLimit, parse_rate_limit, rate_grant, unique_holds


@pytest.mark.parametrize(
    ("text", "limit", "window"),
    [("10/s", 10, 1000), ("100/m", 100, 60_000), (" 3 / h ", 3, 3_600_000)],
)
def test_rate_limits_parse(text: str, limit: int, window: int) -> None:
    assert parse_rate_limit(text) == RateLimit(limit, window)


@pytest.mark.parametrize("bad", ["10", "10/d", "0/s", "-1/s", "1.5/s", "ten/s", 10, None, ""])
def test_a_bad_rate_limit_names_the_value_and_the_form(bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        parse_rate_limit(bad)
    assert err.value.code == "invalid_rate_limit"
    assert repr(bad) in str(err.value)
    assert "'N/s', 'N/m' or 'N/h'" in str(err.value)


def test_rate_limit_prints_as_written() -> None:
    assert str(parse_rate_limit("100/m")) == "100/m"


def test_rate_grant_fills_the_window_then_waits_for_the_oldest_claim_to_leave_it() -> None:
    assert rate_grant([], 0, 3, 1000, 5) == (3, [0, 0, 0])
    assert rate_grant([0, 0, 0], 999, 3, 1000, 1) == (0, [0, 0, 0])
    assert rate_grant([0, 0, 0], 1000, 3, 1000, 2) == (2, [1000, 1000])
    assert rate_grant([500, 100, 900], 1100, 3, 1000, 1) == (1, [500, 900, 1100])


def test_rate_grant_never_lets_a_window_hold_more_than_the_limit() -> None:
    stamps: list[int] = []
    claims: list[int] = []
    for now in range(0, 5000, 70):
        granted, stamps = rate_grant(stamps, now, 4, 1000, 3)
        claims += [now] * granted
        assert len(stamps) <= 4
    for t in claims:
        assert sum(1 for c in claims if t - 1000 < c <= t) <= 4
    assert len(claims) >= 18  # and it does let claims through at the rate


@pytest.mark.parametrize(
    ("state", "unique_for", "now", "holds"),
    [
        (JobState.QUEUED, None, 10**9, True),
        (JobState.RUNNING, None, 10**9, True),
        ("queued", None, 5, True),
        (JobState.SUCCEEDED, None, 5, False),
        (JobState.DEAD, None, 5, False),
        (JobState.CANCELLED, None, 5, False),
        (JobState.SUCCEEDED, 100, 1099, True),
        (JobState.SUCCEEDED, 100, 1100, False),
        (JobState.RUNNING, 100, 5000, True),
    ],
)
def test_unique_holds(state: JobState | str, unique_for: int | None, now: int, holds: bool) -> None:
    assert unique_holds(state, 1000, unique_for, now) is holds
