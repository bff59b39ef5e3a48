"""decide / lost_delay_ms: the decision table after an attempt ends (SPEC §3)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_core.records.jobs import Action, Decision, Outcome
from queue_core.rules import RetryPolicy, decide, lost_delay_ms

EXACT = RetryPolicy(max_attempts=3, initial=30, jitter=0)


def rng_half() -> float:
    return 0.5


@pytest.mark.parametrize(
    ("attempt", "outcome", "retryable", "expected"),
    [
        (1, Outcome.SUCCEEDED, True, Decision(action=Action.COMPLETE)),
        (3, Outcome.SUCCEEDED, False, Decision(action=Action.COMPLETE)),
        (1, Outcome.CANCELLED, True, Decision(action=Action.CANCEL)),
        (1, Outcome.CANCELLED, False, Decision(action=Action.CANCEL)),
        (1, Outcome.FAILED, True,
         Decision(action=Action.RETRY, delay_ms=30_000, lost_delay_ms=60_000)),
        (2, Outcome.FAILED, True,
         Decision(action=Action.RETRY, delay_ms=60_000, lost_delay_ms=120_000)),
        (1, Outcome.TIMED_OUT, True,
         Decision(action=Action.RETRY, delay_ms=30_000, lost_delay_ms=60_000)),
        (2, Outcome.LOST, True,
         Decision(action=Action.RETRY, delay_ms=60_000, lost_delay_ms=120_000)),
        (3, Outcome.FAILED, True, Decision(action=Action.DEAD, reason="retries_exhausted")),
        (3, Outcome.TIMED_OUT, True, Decision(action=Action.DEAD, reason="retries_exhausted")),
        (3, Outcome.LOST, True, Decision(action=Action.DEAD, reason="retries_exhausted")),
        (7, Outcome.FAILED, True, Decision(action=Action.DEAD, reason="retries_exhausted")),
        (1, Outcome.FAILED, False, Decision(action=Action.DEAD, reason="fatal")),
        (1, Outcome.TIMED_OUT, False, Decision(action=Action.DEAD, reason="fatal")),
        (3, Outcome.FAILED, False, Decision(action=Action.DEAD, reason="fatal")),
    ],
)
def test_decision_table(
    attempt: int, outcome: Outcome, retryable: bool, expected: Decision
) -> None:
    assert decide(EXACT, attempt, outcome, retryable=retryable, rng=rng_half) == expected


def test_no_retry_policy_dead_letters_the_first_failure() -> None:
    d = decide(RetryPolicy(), 1, Outcome.FAILED, rng=rng_half)
    assert d == Decision(action=Action.DEAD, reason="retries_exhausted")


def test_retry_delays_are_jittered_with_the_given_rng() -> None:
    policy = RetryPolicy(max_attempts=5, initial=10, jitter=0.5)
    values = iter([0.0, 1.0 - 2**-53, 0.5])
    d = decide(policy, 1, Outcome.FAILED, rng=lambda: next(values))
    assert d.action is Action.RETRY
    assert d.delay_ms == 10_000  # rng 0 -> full delay
    assert d.lost_delay_ms == 10_000  # ~ 20 s * (1 - 0.5)


def test_retry_delay_is_capped() -> None:
    policy = RetryPolicy(max_attempts=50, initial=30, jitter=0, max_delay="5m")
    d = decide(policy, 40, Outcome.LOST, rng=rng_half)
    assert (d.delay_ms, d.lost_delay_ms) == (300_000, 300_000)


@pytest.mark.parametrize(
    ("attempt", "ms"), [(1, 30_000), (2, 60_000), (3, 120_000), (10, 600_000)]
)
def test_lost_delay_ms(attempt: int, ms: int) -> None:
    policy = RetryPolicy(initial=30, jitter=0)
    assert lost_delay_ms(policy, attempt, rng_half) == ms


@settings(max_examples=200, deadline=None)
@given(
    max_attempts=st.integers(1, 100),
    attempt=st.integers(1, 120),
    outcome=st.sampled_from([Outcome.FAILED, Outcome.TIMED_OUT, Outcome.LOST]),
    retryable=st.booleans(),
    r=st.floats(0.0, 1.0, exclude_max=True),
)
def test_failures_retry_exactly_while_attempts_remain(
    max_attempts: int, attempt: int, outcome: Outcome, retryable: bool, r: float
) -> None:
    policy = RetryPolicy(max_attempts=max_attempts)
    d = decide(policy, attempt, outcome, retryable=retryable, rng=lambda: r)
    if not retryable:
        assert (d.action, d.reason) == (Action.DEAD, "fatal")
    elif attempt < max_attempts:
        assert d.action is Action.RETRY
        assert 0 <= d.delay_ms <= 600_000
        assert d.lost_delay_ms is not None and 0 <= d.lost_delay_ms <= 600_000
    else:
        assert (d.action, d.reason) == (Action.DEAD, "retries_exhausted")


@pytest.mark.parametrize("attempt", [1, 3, 7])
@pytest.mark.parametrize("retryable", [True, False])
def test_a_shutdown_release_retries_at_once_and_spends_no_attempt(
    attempt: int, retryable: bool
) -> None:
    # SPEC §4: whatever budget is left, a worker_shutdown loss never dead-letters
    d = decide(
        EXACT, attempt, Outcome.LOST, retryable=retryable, rng=rng_half,
        reason="worker_shutdown",
    )  # fmt: skip
    assert d == Decision(action=Action.RETRY, spends_attempt=False)


def test_other_losses_spend_an_attempt() -> None:
    d = decide(EXACT, 1, Outcome.LOST, rng=rng_half, reason="lease_expired")
    assert d.action is Action.RETRY and d.spends_attempt


@pytest.mark.parametrize(
    ("attempt", "budget", "action"),
    [(3, 4, Action.RETRY), (4, 4, Action.DEAD), (150, 151, Action.RETRY)],
)
def test_the_jobs_stored_budget_overrides_the_policys(
    attempt: int, budget: int, action: Action
) -> None:
    # releases raise a job's max_attempts past its policy's (even past the 1..100 range)
    d = decide(EXACT, attempt, Outcome.FAILED, rng=rng_half, max_attempts=budget)
    assert d.action is action
