"""The applying half of the core: end states, reap verdicts, replays, retention.

Every backend applies these rules (Lua and DynamoDB mirror them); the contract suite pins
the same cases end to end. Here they are tables of inputs.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from queue_core.records.errors import ConfigError
from queue_core.records.jobs import (
    Action,
    Decision,
    JobState,
    NewJob,
    Outcome,
    Reason,
)
from queue_core.rules import RetryPolicy, decide
from queue_core.rules.leases import REAP_MARGIN_MS
from queue_core.rules.outcomes import (
    DEFAULT_RETENTION_MS,
    MAX_HELD_REFUNDS,
    end_state,
    parse_retention,
    reap_place_at,
    reap_ready_at,
    reap_verdict,
    replay_count,
    replay_job,
)


@pytest.mark.parametrize(
    ("decision", "attempt_reason", "expected"),
    [
        (Decision(action=Action.COMPLETE), None, (JobState.SUCCEEDED, None)),
        (Decision(action=Action.RETRY, delay_ms=5), "error", (JobState.QUEUED, None)),
        (
            Decision(action=Action.DEAD, reason="retries_exhausted"),
            "error",
            (JobState.DEAD, "retries_exhausted"),
        ),
        (Decision(action=Action.DEAD), "error", (JobState.DEAD, "fatal")),
        (Decision(action=Action.CANCEL), "cancelled", (JobState.CANCELLED, "cancelled")),
        (
            Decision(action=Action.TIME_OUT, reason="flow_timeout"),
            "timeout",
            (JobState.TIMED_OUT, "flow_timeout"),
        ),
        (Decision(action=Action.TIME_OUT), "flow_timeout", (JobState.TIMED_OUT, "flow_timeout")),
        (Decision(action=Action.TIME_OUT), None, (JobState.TIMED_OUT, "flow_timeout")),
    ],
)
def test_end_state_of_each_action(
    decision: Decision, attempt_reason: str | None, expected: tuple[JobState, str | None]
) -> None:
    assert end_state(decision, attempt_reason) == expected


NOW = 1_000_000
M = REAP_MARGIN_MS


def _verdict(**kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = dict(
        lease_expires_at=NOW + 1,
        deadline=None,
        heartbeat_expires_at=None,
        cancel_requested=False,
        attempt=1,
        max_attempts=3,
        lost_delay_ms=250,
        run_at=NOW - 5000,
        schedule_to_start_ms=None,
    )
    args.update(kw)
    return reap_verdict(NOW, **args)  # type: ignore[arg-type]


def test_no_verdict_while_every_bound_is_in_the_future() -> None:
    assert _verdict(deadline=NOW + 5, heartbeat_expires_at=NOW + 5) is None


def test_no_verdict_while_a_deadline_is_within_the_reapers_margin() -> None:
    # never early (SPEC §4): the live worker stops the body and records it first
    assert _verdict(deadline=NOW) is None
    assert _verdict(heartbeat_expires_at=NOW - M + 1) is None


@pytest.mark.parametrize(
    ("bounds", "reason", "outcome"),
    [
        (dict(lease_expires_at=NOW), Reason.LEASE_EXPIRED, Outcome.LOST),
        (dict(heartbeat_expires_at=NOW - M - 1), Reason.HEARTBEAT_TIMEOUT, Outcome.TIMED_OUT),
        (dict(deadline=NOW - M), Reason.TIMEOUT, Outcome.TIMED_OUT),
        # several passed: timeout > heartbeat > lease
        (
            dict(lease_expires_at=NOW - 9, heartbeat_expires_at=NOW - M - 5, deadline=NOW - M - 1),
            Reason.TIMEOUT,
            Outcome.TIMED_OUT,
        ),
        (
            dict(lease_expires_at=NOW - 9, heartbeat_expires_at=NOW - M - 5),
            Reason.HEARTBEAT_TIMEOUT,
            Outcome.TIMED_OUT,
        ),
        # a lease gone while the deadline is within its margin: the worker is gone
        (dict(lease_expires_at=NOW, deadline=NOW - 1), Reason.LEASE_EXPIRED, Outcome.LOST),
    ],
)
def test_the_most_specific_bound_wins(
    bounds: dict[str, int], reason: Reason, outcome: Outcome
) -> None:
    v = _verdict(**bounds)
    assert v is not None and (v.reason, v.outcome) == (reason, outcome)


def test_attempts_left_queue_the_job_again_after_the_precomputed_delay() -> None:
    v = _verdict(lease_expires_at=NOW, attempt=2, max_attempts=3)
    assert v is not None
    assert (v.state, v.job_reason, v.ready_at) == (JobState.QUEUED, None, NOW + 250)


def test_a_held_attempt_is_queued_again_unspent_whatever_its_budget() -> None:
    """SPEC §8: claimed ahead of a free slot, its body never started -- the job is queued
    again without backoff and its budget refunded, even on its last attempt."""
    v = _verdict(lease_expires_at=NOW, attempt=3, max_attempts=3, held=True)
    assert v is not None
    assert (v.state, v.ready_at, v.refund) == (JobState.QUEUED, NOW - 5000, True)
    assert (v.reason, v.outcome) == (Reason.LEASE_EXPIRED, Outcome.LOST)
    spent = _verdict(lease_expires_at=NOW, attempt=3, max_attempts=3)
    assert spent is not None and (spent.state, spent.refund) == (JobState.DEAD, False)


def test_held_refunds_are_bounded() -> None:
    """Past MAX_HELD_REFUNDS a held attempt is reaped as a running one (a body that kills
    its worker at once must still reach the dead-letter store)."""
    last = MAX_HELD_REFUNDS - 1
    v = _verdict(lease_expires_at=NOW, attempt=3, max_attempts=3, held=True, held_refunds=last)
    assert v is not None and (v.state, v.refund) == (JobState.QUEUED, True)
    v = _verdict(
        lease_expires_at=NOW, attempt=3, max_attempts=3, held=True, held_refunds=last + 1
    )
    assert v is not None and (v.state, v.refund) == (JobState.DEAD, False)
    v = _verdict(lease_expires_at=NOW, held=True, held_refunds=last + 1)
    assert v is not None and (v.state, v.ready_at, v.refund) == (JobState.QUEUED, NOW + 250, False)


def test_a_held_attempt_with_a_cancel_pending_is_cancelled() -> None:
    v = _verdict(lease_expires_at=NOW, cancel_requested=True, held=True)
    assert v is not None and (v.state, v.refund) == (JobState.CANCELLED, False)


def test_a_lost_delay_of_0_keeps_the_previous_ready_time() -> None:
    v = _verdict(lease_expires_at=NOW, lost_delay_ms=0)
    assert v is not None and (v.state, v.ready_at) == (JobState.QUEUED, NOW - 5000)


@pytest.mark.parametrize(
    ("run_at", "lost_delay_ms", "schedule_to_start_ms", "expected"),
    [
        (NOW - 5000, 0, None, NOW - 5000),  # its place in line
        (NOW + 5000, 0, None, NOW),  # never later than now
        (None, 0, None, NOW),  # previous ready time unknown
        (NOW - 5000, 1, None, NOW + 1),  # any backoff: ready after it (never early)
        (NOW - 5000, 0, 60_000, NOW),  # a schedule-to-start bound restarts its wait
    ],
)
def test_reap_ready_at(
    run_at: int | None, lost_delay_ms: int, schedule_to_start_ms: int | None, expected: int
) -> None:
    got = reap_ready_at(
        NOW,
        run_at=run_at,
        lost_delay_ms=lost_delay_ms,
        schedule_to_start_ms=schedule_to_start_ms,
    )
    assert got == expected


@pytest.mark.parametrize(
    ("place_at", "run_at", "ready_at", "expected"),
    [
        (None, NOW - 5000, NOW + 1000, NOW - 5000),  # its place, whatever its backoff
        (NOW - 9000, NOW - 5000, NOW + 1000, NOW - 9000),  # reaped before: that place
        (None, NOW - 5000, NOW - 5000, NOW - 5000),  # lost delay 0: its ready time
        (None, None, NOW + 1000, NOW + 1000),  # nothing known: its ready time
        (None, NOW + 5000, NOW + 1000, NOW + 1000),  # never after its ready time
    ],
)
def test_reap_place_at(
    place_at: int | None, run_at: int | None, ready_at: int, expected: int
) -> None:
    assert reap_place_at(place_at=place_at, run_at=run_at, ready_at=ready_at) == expected


def test_a_reaped_job_keeps_its_place_behind_its_backoff() -> None:
    v = _verdict(lease_expires_at=NOW, lost_delay_ms=1000)
    assert v is not None
    assert (v.state, v.ready_at, v.place_at) == (JobState.QUEUED, NOW + 1000, NOW - 5000)


def test_a_verdict_that_does_not_queue_has_no_place() -> None:
    v = _verdict(deadline=NOW - M, attempt=3, max_attempts=3)
    assert v is not None and v.place_at is None


def test_no_attempts_left_dead_letters_retries_exhausted() -> None:
    v = _verdict(deadline=NOW - M, attempt=3, max_attempts=3)
    assert v is not None
    assert (v.state, v.job_reason, v.ready_at) == (JobState.DEAD, "retries_exhausted", None)


def test_a_pending_cancel_wins_over_retry_and_dead() -> None:
    for attempt in (1, 3):
        v = _verdict(lease_expires_at=NOW, cancel_requested=True, attempt=attempt)
        assert v is not None
        assert (v.state, v.job_reason, v.outcome) == (JobState.CANCELLED, "cancelled", Outcome.LOST)


def test_replay_keeps_the_spec_with_a_fresh_start() -> None:
    spec = NewJob(
        id="old",
        task_name="t",
        queue="q",
        payload=b"p",
        priority=3,
        run_at=5,
        delay_ms=7,
        max_attempts=4,
        lost_delay_ms=1000,
        timeout_ms=9,
        heartbeat_ms=2000,
        schedule_to_start_ms=3000,
        concurrency_key="k",
        concurrency_limit=1,
        concurrency_skip=True,
        options='{"replays":1,"x":1}',
        replay_of="older",
    )
    new = replay_job(spec, dead_id="d1", new_id="new", queue=None, now=NOW)
    assert (new.id, new.queue, new.run_at, new.delay_ms, new.replay_of) == (
        "new",
        "q",
        NOW,
        0,
        "d1",
    )
    kept = (
        "task_name",
        "payload",
        "priority",
        "max_attempts",
        "lost_delay_ms",
        "timeout_ms",
        "heartbeat_ms",
        "schedule_to_start_ms",
        "concurrency_key",
        "concurrency_limit",
        "concurrency_skip",
    )
    assert all(getattr(new, f) == getattr(spec, f) for f in kept)
    assert new.options == '{"replays":2,"x":1}'
    assert replay_job(spec, dead_id="d1", new_id="n", queue="other", now=NOW).queue == "other"


def _replayed(options: str | None, replay_of: str | None = None) -> str | None:
    spec = NewJob(
        id="j", task_name="t", queue="q", payload=b"", options=options, replay_of=replay_of
    )
    return replay_job(spec, dead_id="d", new_id="n", queue=None, now=NOW).options


@pytest.mark.parametrize(
    ("options", "replay_of", "expected"),
    [
        # never replayed: the count starts, every other member kept as written
        (None, None, '{"replays":1}'),
        ("", None, '{"replays":1}'),
        ("{}", None, '{"replays":1}'),
        (" { } ", None, '{"replays":1} '),
        ('{"o":1}', None, '{"replays":1,"o":1}'),
        (
            '{"policy": {"max_attempts": 2}, "retry_on": []}',
            None,
            '{"replays":1,"policy": {"max_attempts": 2}, "retry_on": []}',
        ),
        # counted: the leading member goes up by one
        ('{"replays":1}', "d0", '{"replays":2}'),
        ('{"replays":2,"o":1}', "d0", '{"replays":3,"o":1}'),
        ('{ "replays" : 4 , "a":[]}', "d0", '{"replays":5, "a":[]}'),
        # unknown counts stay unknown: the options are kept as they are
        ('{"o":1}', "d0", '{"o":1}'),
        (None, "d0", None),
        ('{"o":1,"replays":2}', "d0", '{"o":1,"replays":2}'),
        ('{"replays":true}', "d0", '{"replays":true}'),
        ('{"replays":1.0}', "d0", '{"replays":1.0}'),
        ('{"replays":1,"replays":5}', "d0", '{"replays":1,"replays":5}'),
        ("[1]", None, "[1]"),
        ("not json", None, "not json"),
    ],
)
def test_replay_counts_itself_in_the_options(
    options: str | None, replay_of: str | None, expected: str | None
) -> None:
    assert _replayed(options, replay_of) == expected


@pytest.mark.parametrize(
    ("options", "replay_of", "count"),
    [
        (None, None, 0),
        ('{"o":1}', None, 0),
        ('{"replays":3,"o":1}', "d", 3),
        ('{"replays":0}', None, 0),
        (None, "d", None),
        ('{"o":1}', "d", None),
        ('{"o":1,"replays":3}', "d", None),
        ('{"replays":-1}', "d", None),
        ('{"replays":"2"}', "d", None),
        ("[]", None, None),
        ("{", None, None),
    ],
)
def test_replay_count_reads_what_replay_job_writes(
    options: str | None, replay_of: str | None, count: int | None
) -> None:
    assert replay_count(options, replay_of) == count


def test_a_chain_of_replays_counts_up() -> None:
    options: str | None = '{"isolation":"process"}'
    replay_of: str | None = None
    for n in range(1, 5):
        options = _replayed(options, replay_of)
        replay_of = f"d{n}"
        assert replay_count(options, replay_of) == n
        assert json.loads(options or "") == {"replays": n, "isolation": "process"}


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        (0, 0),
        ("0", 0),
        ("0s", 0),
        (3600, 3_600_000),
        ("90m", 5_400_000),
        ("12h", 43_200_000),
        ("7d", 7 * 86_400_000),
        ("1d12h", 36 * 3_600_000),
        (timedelta(hours=2), 7_200_000),
        (timedelta(0), 0),
        ("250ms", 250),
        (1.5, 1500),
    ],
)
def test_parse_retention_accepts(value: object, ms: int) -> None:
    assert parse_retention(value) == ms  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, "-5s", "abc", "7x", "d", "1d-3h", True, timedelta(-1)])
def test_parse_retention_refuses_with_the_value_quoted(value: object) -> None:
    with pytest.raises(ConfigError) as err:
        parse_retention(value)  # type: ignore[arg-type]
    assert err.value.code == "invalid_duration"
    assert repr(value) in str(err.value)


def test_default_retention_is_seven_days() -> None:
    assert DEFAULT_RETENTION_MS == 7 * 86_400_000


def test_a_flow_deadline_ends_the_attempt_without_retry() -> None:
    policy = RetryPolicy(max_attempts=5)
    d = decide(policy, 1, Outcome.TIMED_OUT, rng=lambda: 0.0, reason=Reason.FLOW_TIMEOUT)
    assert d.action is Action.TIME_OUT
    assert end_state(d, "flow_timeout") == (JobState.TIMED_OUT, "flow_timeout")
    # the attempt's own timeout is retried
    assert decide(policy, 1, Outcome.TIMED_OUT, rng=lambda: 0.0, reason="timeout").action is (
        Action.RETRY
    )
