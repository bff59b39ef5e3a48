"""The decision after an attempt ends: complete, retry, dead-letter or cancel (SPEC §3).

A pure function of the policy, the attempt number, the outcome and the classification;
the random source for jitter is an argument.
"""

from __future__ import annotations

from collections.abc import Callable

from queue_core.records.durations import to_ms
from queue_core.records.jobs import (
    Action,
    Decision,
    Outcome,
    Reason,
)
from queue_core.rules.retry import RetryPolicy

__all__ = ["decide", "lost_delay_ms"]

_FAILURES = frozenset({Outcome.FAILED, Outcome.TIMED_OUT, Outcome.LOST})


def lost_delay_ms(policy: RetryPolicy, attempt: int, rng: Callable[[], float]) -> int:
    """The retry delay to precompute for attempt ``attempt`` should storage reap it.

    Storage reaps lost or overdue attempts on its own, so the core stores this delay
    with the job at enqueue (for attempt 1) and with every retry (for the next one).

    Returns:
        ``to_ms(policy.delay(attempt, rng))``, in milliseconds.
    """
    return to_ms(policy.delay(attempt, rng))


def decide(
    policy: RetryPolicy,
    attempt: int,
    outcome: Outcome,
    *,
    retryable: bool = True,
    rng: Callable[[], float],
    reason: Reason | str | None = None,
    max_attempts: int | None = None,
) -> Decision:
    """Decide what happens to a job after attempt ``attempt`` ended with ``outcome``.

    Args:
        policy: the job's merged retry policy.
        attempt: the number of the attempt that ended, ``>= 1``.
        outcome: how it ended.
        retryable: the classification of the error (:func:`~queue_core.rules.classify`);
            ignored for successes and cancellations.
        rng: uniform ``[0, 1)`` source for jitter.
        reason: the attempt's reason; ``flow_timeout`` (the attempt was ended by its
            flow's deadline, SPEC §7) is never retried; a ``lost`` attempt with
            ``worker_shutdown`` (released when its worker's shutdown grace ended, SPEC §4)
            is retried at once and spends no attempt.
        max_attempts: the job's stored budget (``ClaimedJob.max_attempts``), which
            attempts that spent none have raised past ``policy.max_attempts``; default
            ``policy.max_attempts``.

    Returns:
        ``COMPLETE`` for a success; ``CANCEL`` for a cancellation; ``TIME_OUT`` (reason
        ``flow_timeout``) for an attempt ended by its flow's deadline; ``RETRY`` with no
        delay and ``spends_attempt=False`` for a shutdown release, whatever budget is
        left (a deploy never dead-letters a job); for a failure, timeout or loss:
        ``DEAD`` with reason ``fatal`` when not retryable, ``RETRY`` (with ``delay_ms``
        and the next attempt's ``lost_delay_ms``) while ``attempt < max_attempts``,
        else ``DEAD`` with ``retries_exhausted``.
    """
    if outcome is Outcome.SUCCEEDED:
        return Decision(action=Action.COMPLETE)
    if outcome is Outcome.CANCELLED:
        return Decision(action=Action.CANCEL)
    if outcome not in _FAILURES:
        raise ValueError(f"unknown attempt outcome: {outcome!r}")
    if reason == Reason.FLOW_TIMEOUT.value:
        return Decision(action=Action.TIME_OUT, reason=Reason.FLOW_TIMEOUT.value)
    if outcome is Outcome.LOST and reason == Reason.WORKER_SHUTDOWN.value:
        return Decision(action=Action.RETRY, spends_attempt=False)
    if not retryable:
        return Decision(action=Action.DEAD, reason=Reason.FATAL.value)
    budget = policy.max_attempts if max_attempts is None else max_attempts
    if attempt < budget:
        return Decision(
            action=Action.RETRY,
            delay_ms=to_ms(policy.delay(attempt, rng)),
            lost_delay_ms=lost_delay_ms(policy, attempt + 1, rng),
        )
    return Decision(action=Action.DEAD, reason=Reason.RETRIES_EXHAUSTED.value)
