"""Lease, heartbeat and schedule-to-start timing rules (SPEC §4)."""

from __future__ import annotations

import pytest

from queue_core.records.jobs import Reason
from queue_core.rules import (
    REAP_MARGIN_MS,
    expired_bound,
    heartbeat_write_due,
    reap_due,
    renew_interval,
    schedule_to_start_expired,
)
from queue_core.rules.leases import (
    step_refused,
)

NOW = 1_700_000_000_000
M = REAP_MARGIN_MS
"""Deadlines and heartbeat bounds pass for the reaper this much after them."""


@pytest.mark.parametrize(
    ("lease", "deadline", "heartbeat", "expected"),
    [
        (None, None, None, None),
        (NOW + 1, None, None, None),
        (NOW, None, None, Reason.LEASE_EXPIRED),  # a lease <= now has passed
        (NOW - 1, None, None, Reason.LEASE_EXPIRED),
        (NOW + 1, NOW + 1, NOW + 1, None),
        (NOW + 1, NOW, NOW, None),  # a deadline: only a margin later
        (NOW + 1, NOW - M + 1, NOW - M + 1, None),
        (NOW + 1, NOW - M, None, Reason.TIMEOUT),
        (NOW + 1, None, NOW - M, Reason.HEARTBEAT_TIMEOUT),
        (NOW - 5, NOW - M - 5, None, Reason.TIMEOUT),
        (NOW - 5, None, NOW - M - 5, Reason.HEARTBEAT_TIMEOUT),
        (NOW + 1, NOW - M, NOW - M, Reason.TIMEOUT),
        (NOW, NOW - M, NOW - M, Reason.TIMEOUT),
        (NOW, NOW, NOW, Reason.LEASE_EXPIRED),  # the worker is gone: its lease says so
        (NOW - 9, NOW - M - 1, NOW - M - 5, Reason.TIMEOUT),  # precedence, not earliest
        (NOW, NOW + 1, NOW - M, Reason.HEARTBEAT_TIMEOUT),
        (None, NOW + 1000, NOW - M - 1000, Reason.HEARTBEAT_TIMEOUT),
    ],
)
def test_expired_bound(
    lease: int | None, deadline: int | None, heartbeat: int | None, expected: Reason | None
) -> None:
    result = expired_bound(
        NOW, lease_expires_at=lease, deadline=deadline, heartbeat_expires_at=heartbeat
    )
    assert result is expected


@pytest.mark.parametrize(
    ("last", "now", "heartbeat_ms", "due"),
    [
        (None, NOW, 30_000, True),
        (NOW, NOW, 30_000, False),
        (NOW, NOW + 9_999, 30_000, False),
        (NOW, NOW + 10_000, 30_000, True),  # exactly h/3
        (NOW, NOW + 25_000, 30_000, True),
        (NOW, NOW + 333, 1_000, False),
        (NOW, NOW + 334, 1_000, True),
        (NOW, NOW - 5, 30_000, False),  # clock went back: no write storm
    ],
)
def test_heartbeat_write_throttle(last: int | None, now: int, heartbeat_ms: int, due: bool) -> None:
    assert heartbeat_write_due(last, now, heartbeat_ms) is due


def test_tight_heartbeat_loop_writes_at_most_every_third() -> None:
    heartbeat_ms = 3_000
    last: int | None = None
    writes = []
    for now in range(NOW, NOW + 10_000, 7):
        if heartbeat_write_due(last, now, heartbeat_ms):
            writes.append(now)
            last = now
    gaps = [b - a for a, b in zip(writes, writes[1:], strict=False)]
    assert len(writes) >= 10
    assert all(1_000 <= g < 1_007 for g in gaps)


@pytest.mark.parametrize(("lease", "interval"), [(30.0, 10.0), (3, 1.0), (0.3, 0.1)])
def test_renew_interval(lease: float, interval: float) -> None:
    assert renew_interval(lease) == pytest.approx(interval)


@pytest.mark.parametrize(
    ("now", "ready_at", "bound", "expired"),
    [
        (NOW, NOW - 10_000, None, False),
        (NOW, NOW - 10_000, 10_000, True),  # ready_at + bound == now: passed
        (NOW, NOW - 9_999, 10_000, False),
        (NOW, NOW - 20_000, 10_000, True),
        (NOW, NOW + 5_000, 1_000, False),  # not yet ready
    ],
)
def test_schedule_to_start_expired(
    now: int, ready_at: int, bound: int | None, expired: bool
) -> None:
    assert schedule_to_start_expired(now, ready_at, bound) is expired


@pytest.mark.parametrize(
    ("lease", "deadline", "heartbeat", "expected"),
    [
        (NOW, None, None, NOW),  # no deadline: the lease
        (NOW + 30_000, NOW + 60_000, None, NOW + 30_000),  # the lease ends first
        (NOW + 30_000, NOW + 5_000, None, NOW + 5_000 + M),  # the deadline, a margin later
        (NOW + M, NOW, None, NOW + M),  # both at once
        (NOW + 30_000, NOW + 9_000, NOW + 4_000, NOW + 4_000 + M),  # the heartbeat first
        (NOW + 30_000, NOW + 2_000, NOW + 4_000, NOW + 2_000 + M),
    ],
)
def test_reap_due_is_the_first_time_expired_bound_answers(
    lease: int, deadline: int | None, heartbeat: int | None, expected: int
) -> None:
    assert reap_due(lease, deadline, heartbeat) == expected
    # an index sorted by it finds every attempt the reaper may end, and none before
    assert (
        expired_bound(
            expected - 1, lease_expires_at=lease, deadline=deadline, heartbeat_expires_at=heartbeat
        )
        is None
    )
    assert (
        expired_bound(
            expected, lease_expires_at=lease, deadline=deadline, heartbeat_expires_at=heartbeat
        )
        is not None
    )


@pytest.mark.parametrize(
    ("now", "flow_deadline_at", "refused"),
    [(999, 1000, False), (1000, 1000, True), (1001, 1000, True), (10**12, None, False)],
)
def test_a_step_is_refused_from_its_flow_s_deadline_on(
    now: int, flow_deadline_at: int | None, refused: bool
) -> None:
    assert step_refused(now, flow_deadline_at) is refused
