"""The pure rules of unique jobs and rate limits (queue_core.rules.limits)."""

from __future__ import annotations

import pytest

from queue_core.records.errors import ConfigError
from queue_core.records.jobs import JobState
from queue_core.rules.limits import (
    RATE_START_MS,
    START_MARGIN_MS,
    Rate,
    parse_rate_limit,
    rate_grant,
    rate_room,
    start_late,
    unique_holds,
)

H = RATE_START_MS


@pytest.mark.parametrize(
    ("text", "limit", "window"),
    [("10/s", 10, 1000), ("100/m", 100, 60_000), (" 3 / h ", 3, 3_600_000)],
)
def test_rate_limits_parse(text: str, limit: int, window: int) -> None:
    assert parse_rate_limit(text) == Rate(limit, window)


@pytest.mark.parametrize("bad", ["10", "10/d", "0/s", "-1/s", "1.5/s", "ten/s", 10, None, ""])
def test_a_bad_rate_limit_names_the_value_and_the_form(bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        parse_rate_limit(bad)
    assert err.value.code == "invalid_rate_limit"
    assert repr(bad) in str(err.value)
    assert "'N/s', 'N/m' or 'N/h'" in str(err.value)


def test_rate_limit_prints_as_written() -> None:
    assert str(parse_rate_limit("100/m")) == "100/m"


def test_rate_grant_fills_the_window_then_waits_for_the_latest_start_to_leave_it() -> None:
    # each claim keeps now + H: the latest time its body may start
    assert rate_grant([], 0, 3, 1000, 5) == (3, [H, H, H])
    assert rate_grant([H, H, H], 999 + H, 3, 1000, 1) == (0, [H, H, H])
    assert rate_grant([H, H, H], 1000 + H, 3, 1000, 2) == (2, [1000 + 2 * H] * 2)
    assert rate_grant([500, 100, 900], 1100, 3, 1000, 1) == (1, [500, 900, 1100 + H])


def test_rate_grant_never_lets_a_window_hold_more_than_the_limit_of_body_starts() -> None:
    """Bodies start anywhere between their claim and their ``start_by`` (the kept time):
    even when the adversary picks every start, no window of 1 s holds more than 4."""
    stamps: list[int] = []
    claims: list[tuple[int, int]] = []
    for now in range(0, 5000, 70):
        granted, stamps = rate_grant(stamps, now, 4, 1000, 3)
        claims += [(now, now + H)] * granted
        assert len(stamps) <= 4
    for x, _ in claims:  # could every claim whose interval meets (x - 1000, x] start in it?
        assert sum(1 for c, s in claims if c <= x and s > x - 1000) <= 4
    assert len(claims) >= 16  # and it does let claims through near the rate


def test_counting_claim_times_lets_late_bodies_crowd_a_window() -> None:
    """Issue 25: the rule that kept claim times let 10 bodies that started 6 ms late
    share a second with the next 8 claims; keeping start_by does not."""
    first = [5] * 10  # claimed at 0, bodies started ~5 ms later
    granted_old = sum(1 for s in first if s > 1000 - 1000)  # old rule at 1000: window (0, 1000]
    assert granted_old == 10  # so the old rule granted at 1000 -> 18 starts in (5, 1000+]
    granted, _ = rate_grant([H] * 10, 1000, 10, 1000, 8)
    assert granted == 0
    granted, _ = rate_grant([H] * 10, 1000 + H, 10, 1000, 8)
    assert granted == 8


def test_rate_room_is_rate_grant_on_stamps_kept_in_order() -> None:
    import random

    rng = random.Random(7)
    for _ in range(500):
        stamps = sorted(rng.randrange(0, 3000) for _ in range(rng.randrange(0, 8)))
        now, limit, want = rng.randrange(0, 4000), rng.randrange(1, 8), rng.randrange(0, 5)
        granted, kept = rate_grant(stamps, now, limit, 1000, want)
        room, expired = rate_room(stamps, now, limit, 1000, want)
        assert room == granted
        assert stamps[expired:] + [now + H] * room == kept


@pytest.mark.parametrize(
    ("returned", "call", "since", "late"),
    [
        (0, 1.0, 0.0, False),  # started at once
        (2, 5.0, 40.0, False),  # 2 ms back, 40 ms since: 42 < 50
        (2, 5.0, 49.0, True),  # 51 > 50
        (500, 3.0, 10.0, False),  # the worker's clock runs 500 ms ahead: capped by the call
        (-500, 3.0, 49.0, False),  # behind: the way back counts 0
        (-500, 3.0, 51.0, True),
    ],
)
def test_start_late_reads_the_way_back_off_the_wall_clocks_capped_by_the_call(
    returned: int, call: float, since: float, late: bool
) -> None:
    got = start_late(
        1000 + H, 1000, returned_wall_ms=1000 + returned, call_ms=call, since_return_ms=since
    )
    assert got is late
    assert START_MARGIN_MS == 50


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
