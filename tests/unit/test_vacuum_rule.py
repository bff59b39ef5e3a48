"""queue_core.rules.vacuum: when the jobs table's dead rows call for a vacuum."""

from __future__ import annotations

import pytest

from queue_core.rules.vacuum import VACUUM_DEAD_ROWS, VACUUM_DUTY, vacuum_due


@pytest.mark.parametrize(
    ("dead", "since_ms", "took_ms", "due"),
    [
        (0, None, 0, False),
        (VACUUM_DEAD_ROWS - 1, None, 0, False),  # below the count: never, however long ago
        (VACUUM_DEAD_ROWS - 1, 10**9, 0, False),
        (VACUUM_DEAD_ROWS, None, 0, True),  # never vacuumed
        (VACUUM_DEAD_ROWS, 0, 0, True),  # just vacuumed by someone else, none here yet
        (VACUUM_DEAD_ROWS, 0, 500, False),  # ours took 500 ms: wait 500 / duty
        (VACUUM_DEAD_ROWS, round(500 / VACUUM_DUTY) - 1, 500, False),
        (VACUUM_DEAD_ROWS, round(500 / VACUUM_DUTY), 500, True),
        (10**7, None, 500, True),  # never vacuumed: our last one's length does not matter
    ],
)
def test_due_from_a_fixed_dead_row_count_and_a_duty_share(
    dead: int, since_ms: int | None, took_ms: int, due: bool
) -> None:
    assert vacuum_due(dead, since_ms, took_ms) is due


def test_the_count_does_not_grow_with_the_history() -> None:
    # the rule takes no live-row count: a million kept jobs allow no more dead rows
    assert vacuum_due(VACUUM_DEAD_ROWS, 60_000, 100)
    assert not vacuum_due(VACUUM_DEAD_ROWS - 1, 60_000, 100)


def test_threshold_and_duty_are_arguments() -> None:
    assert vacuum_due(50, None, 0, dead_rows_at=50)
    assert not vacuum_due(49, None, 0, dead_rows_at=50)
    assert vacuum_due(50, 1_000, 1_000, dead_rows_at=50, duty=1.0)
    assert not vacuum_due(50, 999, 1_000, dead_rows_at=50, duty=1.0)
