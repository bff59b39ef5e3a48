"""queue_core.rules.throughput: the bucket rule and the one fold every backend's answer goes
through (pure: no storage, no clock)."""

from __future__ import annotations

import pytest

from queue_core.records.errors import ConfigError
from queue_core.rules.throughput import (
    THROUGHPUT_RESOLUTION_MS,
    ThroughputCount,
    bucket_start,
    check_bucket_ms,
    fold_counts,
)

MIN = THROUGHPUT_RESOLUTION_MS


def test_buckets_are_epoch_aligned() -> None:
    assert bucket_start(0, MIN) == 0
    assert bucket_start(MIN - 1, MIN) == 0
    assert bucket_start(MIN, MIN) == MIN
    assert bucket_start(7 * MIN + 5, 5 * MIN) == 5 * MIN


@pytest.mark.parametrize("bad", [0, -MIN, MIN // 2, MIN + 1, True, 60_000.0, "60000"])
def test_bucket_width_must_be_whole_minutes(bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        check_bucket_ms(bad)  # type: ignore[arg-type]
    assert err.value.code == "invalid_option" and err.value.field == "bucket_ms"
    assert repr(bad) in str(err.value)


def test_fold_sums_filters_and_sorts() -> None:
    events = [
        ("b", 3 * MIN + 1, "succeeded", 2),
        ("a", 3 * MIN + 2, "succeeded", 1),
        ("a", 4 * MIN, "enqueued", 4),
        ("a", 4 * MIN + 59_999, "enqueued", 1),
        ("a", 2 * MIN + 59_999, "dead", 9),  # before the bucket holding since
        ("a", 6 * MIN + 1, "dead", 9),  # after now
        ("a", 5 * MIN, "cancelled", 0),  # zero sums are dropped
    ]
    got = fold_counts(events, since_ms=3 * MIN + 30_000, now=6 * MIN, bucket_ms=MIN)
    assert got == [
        ThroughputCount("a", 3 * MIN, "succeeded", 1),
        ThroughputCount("a", 4 * MIN, "enqueued", 5),
        ThroughputCount("b", 3 * MIN, "succeeded", 2),
    ]
    assert fold_counts(events, 3 * MIN, 6 * MIN, 5 * MIN, queues=["b"]) == [
        ThroughputCount("b", 0, "succeeded", 2)
    ]
