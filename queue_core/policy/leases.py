"""Lease, timeout, heartbeat and schedule-to-start timing rules (SPEC §4).

Pure functions of explicit times: ``now`` and every bound are epoch milliseconds
(except :func:`renew_interval`, which works in seconds like the lease option). A bound
has passed when ``bound <= now``, the same rule as "ready when ``run_at <= now``".
"""

from __future__ import annotations

from queue_core.model import Reason

__all__ = [
    "expired_bound",
    "heartbeat_write_due",
    "renew_interval",
    "schedule_to_start_expired",
]


def expired_bound(
    now: int,
    *,
    lease_expires_at: int | None,
    deadline: int | None,
    heartbeat_expires_at: int | None,
) -> Reason | None:
    """Which bound of a running attempt has passed at ``now``, if any.

    When several have passed the most specific wins: ``TIMEOUT`` (the attempt's
    deadline) over ``HEARTBEAT_TIMEOUT`` over ``LEASE_EXPIRED``.

    Returns:
        The reaping reason, or ``None`` while every given bound is in the future.
    """
    if deadline is not None and deadline <= now:
        return Reason.TIMEOUT
    if heartbeat_expires_at is not None and heartbeat_expires_at <= now:
        return Reason.HEARTBEAT_TIMEOUT
    if lease_expires_at is not None and lease_expires_at <= now:
        return Reason.LEASE_EXPIRED
    return None


def heartbeat_write_due(last_write_ms: int | None, now_ms: int, heartbeat_ms: int) -> bool:
    """Whether ``ctx.heartbeat()`` should write to storage now.

    Writes are throttled to at most one every ``heartbeat_ms / 3``, so a body may call
    ``ctx.heartbeat()`` in a tight loop cheaply while storage still hears from it well
    within the heartbeat bound.

    Returns:
        ``True`` when nothing was written yet, or ``heartbeat_ms / 3`` or more has
        passed since the last write.
    """
    if last_write_ms is None:
        return True
    return (now_ms - last_write_ms) * 3 >= heartbeat_ms


def renew_interval(lease_s: float) -> float:
    """Seconds between lease renewals for a lease of ``lease_s`` seconds (a third of it).

    Renewing at a third of the lease survives two missed renewals before it expires.
    """
    return lease_s / 3.0


def schedule_to_start_expired(now: int, ready_at: int, schedule_to_start_ms: int | None) -> bool:
    """Whether a queued job, ready since ``ready_at``, waited past ``schedule_to_start``.

    Returns:
        ``True`` when ``ready_at + schedule_to_start_ms <= now``; always ``False`` when
        the bound is off (``None``).
    """
    if schedule_to_start_ms is None:
        return False
    return ready_at + schedule_to_start_ms <= now
