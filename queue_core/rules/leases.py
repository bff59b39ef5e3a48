"""Lease, timeout, heartbeat and schedule-to-start timing rules (SPEC §4).

Pure functions of explicit times: ``now`` and every bound are epoch milliseconds
(except :func:`renew_interval`, which works in seconds like the lease option). A bound
has passed when ``bound <= now``, the same rule as "ready when ``run_at <= now``"; for
the reaper, a deadline (an attempt's, a heartbeat bound, a flow's) passes
:data:`REAP_MARGIN_MS` later (:func:`reap_cutoff`).
"""

from __future__ import annotations

from typing import Final

from queue_core.records.jobs import Reason

__all__ = [
    "REAP_MARGIN_MS",
    "expired_bound",
    "heartbeat_write_due",
    "reap_cutoff",
    "reap_due",
    "renew_interval",
    "schedule_to_start_expired",
    "step_refused",
]

REAP_MARGIN_MS: Final = 1_000
"""How long after a deadline the reaper judges it passed (SPEC §4 "Never early").

A live worker stops a body at its deadline -- the attempt's ``timeout``, its heartbeat
bound, its flow's deadline -- never before, and records the end itself (with the mode
and the error message); the reaper, the backstop for a worker that is gone, waits this
margin more so that the worker's record lands first. Lease expiry has no margin: a live
worker renews its leases long before they expire."""


def reap_cutoff(now: int) -> int:
    """The latest deadline the reaper treats as passed at ``now``: ``now -``
    :data:`REAP_MARGIN_MS`. It applies to attempt deadlines, heartbeat bounds and flow
    execution deadlines (``deadline_at``); storage selects what to reap with it."""
    return now - REAP_MARGIN_MS


def reap_due(
    lease_expires_at: int, deadline: int | None, heartbeat_expires_at: int | None = None
) -> int:
    """The earliest time the reaper may end a running attempt: its lease's expiry, or its
    deadline or heartbeat bound plus :data:`REAP_MARGIN_MS` when that comes first -- the
    first time :func:`expired_bound` is not ``None``. A storage may keep its running
    attempts in one index sorted by it (Redis: ``run_score`` in ``_running.lua``; SQS,
    without the heartbeat bound, which has its own index there)."""
    due = lease_expires_at
    for bound in (deadline, heartbeat_expires_at):
        if bound is not None and bound + REAP_MARGIN_MS < due:
            due = bound + REAP_MARGIN_MS
    return due


def expired_bound(
    now: int,
    *,
    lease_expires_at: int | None,
    deadline: int | None,
    heartbeat_expires_at: int | None,
) -> Reason | None:
    """Which bound of a running attempt has passed at ``now`` for the reaper, if any.

    The lease has passed when ``lease_expires_at <= now``; the deadline and the
    heartbeat bound only :data:`REAP_MARGIN_MS` later (``bound <= reap_cutoff(now)``),
    so a live worker, which stops the body at the bound itself, records it first.
    When several have passed the most specific wins: ``TIMEOUT`` (the attempt's
    deadline) over ``HEARTBEAT_TIMEOUT`` over ``LEASE_EXPIRED``.

    Returns:
        The reaping reason, or ``None`` while no bound has passed.
    """
    cutoff = reap_cutoff(now)
    if deadline is not None and deadline <= cutoff:
        return Reason.TIMEOUT
    if heartbeat_expires_at is not None and heartbeat_expires_at <= cutoff:
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


def queued_expiry(ready_at: int, schedule_to_start_ms: int | None) -> int | None:
    """The instant a queued job, ready at ``ready_at``, is dead-lettered unrun for
    ``schedule_to_start`` (SPEC §4), or ``None`` when the bound is off.

    Storage keeps it beside the queued job (an index the reaper reads); a SQL statement
    that computes it at insert mirrors this function and says so.
    """
    if schedule_to_start_ms is None:
        return None
    return ready_at + schedule_to_start_ms


def schedule_to_start_expired(now: int, ready_at: int, schedule_to_start_ms: int | None) -> bool:
    """Whether a queued job, ready since ``ready_at``, waited past ``schedule_to_start``.

    Returns:
        ``True`` when :func:`queued_expiry` has come (``<= now``); always ``False`` when
        the bound is off (``None``).
    """
    expiry = queued_expiry(ready_at, schedule_to_start_ms)
    return expiry is not None and expiry <= now


def step_deadline(attempt_deadline: int | None, flow_deadline_at: int | None) -> int | None:
    """The deadline a claimed attempt is handed (``ClaimedJob.deadline``): the earlier of
    its own (``started_at + timeout_ms``) and its flow execution's, of those that are set."""
    if flow_deadline_at is None:
        return attempt_deadline
    if attempt_deadline is None:
        return flow_deadline_at
    return min(attempt_deadline, flow_deadline_at)


def step_refused(now: int, flow_deadline_at: int | None) -> bool:
    """Whether a claim at ``now`` refuses a queued flow step: its execution's deadline has
    come (SPEC §7: at the deadline storage refuses new steps). The step stays queued for
    the reaper, which ends it ``not_run`` without an attempt (``decide.advance``); a job
    that is no flow step (``None``) is never refused."""
    return flow_deadline_at is not None and flow_deadline_at <= now
