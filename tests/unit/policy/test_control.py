"""The pure rules of flow control (queue_core.rules.control), as tables."""

from __future__ import annotations

import math

import pytest

from queue_core.records.control import PauseKind
from queue_core.records.errors import ConfigError
from queue_core.records.jobs import JobState
from queue_core.rules.control import (
    MAX_PROGRESS_MESSAGE,
    PROGRESS_EVERY_MS,
    Active,
    check_progress,
    debounce_ready_at,
    paused,
    progress_due_at,
    round_robin_order,
    supersede,
    superseded_end,
)

Q, R = JobState.QUEUED, JobState.RUNNING


@pytest.mark.parametrize(
    ("behavior", "active", "limit", "victims"),
    [
        ("cancel_in_progress", [], 1, []),
        ("cancel_in_progress", [("a", R, 1)], 1, ["a"]),
        ("cancel_in_progress", [("b", Q, 2), ("a", R, 1)], 1, ["a", "b"]),
        ("cancel_in_progress", [("a", R, 1), ("b", Q, 2)], 2, ["a"]),
        ("cancel_in_progress", [("a", R, 1)], 2, []),
        ("latest", [("a", R, 1)], 1, []),
        ("latest", [("a", R, 1), ("b", Q, 2)], 1, ["b"]),
        ("latest", [("b", Q, 2), ("c", Q, 3)], 5, ["b", "c"]),
        ("queue", [("a", R, 1), ("b", Q, 2)], 1, []),
        (None, [("a", R, 1)], 1, []),
    ],
)
def test_supersede_names_the_jobs_a_new_arrival_ends_oldest_first(
    behavior: str | None, active: list[tuple[str, JobState, int]], limit: int, victims: list[str]
) -> None:
    assert supersede(behavior, [Active(*a) for a in active], limit) == victims


def test_superseded_jobs_end_cancelled_or_skipped() -> None:
    assert superseded_end("cancel_in_progress") == (JobState.CANCELLED, "superseded")
    assert superseded_end("latest") == (JobState.SKIPPED, "superseded")


def test_round_robin_serves_the_least_recently_served_key_first() -> None:
    assert round_robin_order({"a": (3, 0), "b": (1, 5), "c": (0, 9)}) == ["c", "b", "a"]
    assert round_robin_order({"a": (0, 2), "b": (0, 1)}) == ["b", "a"]  # ties: best job
    assert round_robin_order({}) == []


def test_round_robin_a_new_key_waits_one_round_at_most() -> None:
    """A backlog key served once per round; a newcomer goes first (never served)."""
    served = {"a": 0}
    counter = 0
    order = []
    for step in range(6):
        keys = {k: (s, 0 if k == "a" else 1) for k, s in served.items()}
        if step == 2:
            keys["b"] = (0, 1)
        first = round_robin_order(keys)[0]
        order.append(first)
        counter += 1
        served[first] = counter
    assert order[:4] == ["a", "a", "b", "a"]


@pytest.mark.parametrize(
    ("first", "now", "want"),
    [
        (0, 0, 10_000),
        (0, 5_000, 15_000),
        (0, 95_000, 100_000),  # capped at first + debounce_max
        (0, 200_000, 100_000),  # the cap is in the past: ready at once
    ],
)
def test_debounce_moves_the_run_time_but_never_past_debounce_max(
    first: int, now: int, want: int
) -> None:
    assert debounce_ready_at(first, now, 10_000, 100_000) == want


def test_paused_matches_queue_task_or_flow() -> None:
    pauses = {(PauseKind.QUEUE, "emails"), (PauseKind.TASK, "t.a"), (PauseKind.FLOW, "f")}
    assert paused(pauses, "emails", "t.x", None)
    assert paused(pauses, "other", "t.a", None)
    assert paused(pauses, "other", "t.x", "f")
    assert not paused(pauses, "other", "t.x", "g")
    assert not paused(pauses, "other", "t.x", None)
    assert not paused(set(), "emails", "t.a", "f")


@pytest.mark.parametrize("good", [0, 0.0, 0.5, 1, 1.0])
def test_progress_accepts_fractions_from_zero_to_one(good: float) -> None:
    assert check_progress(good, "m") == (float(good), "m")


@pytest.mark.parametrize("bad", [-0.01, 1.01, math.nan, math.inf, True, "0.5", None, 2])
def test_a_bad_progress_fraction_is_a_config_error_naming_it(bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        check_progress(bad)
    assert err.value.code == "invalid_option"
    assert repr(bad) in str(err.value) and "0.0 to 1.0" in str(err.value)


def test_a_progress_message_must_be_text_and_is_capped() -> None:
    with pytest.raises(ConfigError, match="message"):
        check_progress(0.5, 42)
    _, message = check_progress(0.5, "x" * 5000)
    assert message is not None and len(message) == MAX_PROGRESS_MESSAGE


def test_progress_is_written_at_once_then_at_most_every_second() -> None:
    assert progress_due_at(None) == 0
    assert progress_due_at(10_000) == 10_000 + PROGRESS_EVERY_MS == 11_000
