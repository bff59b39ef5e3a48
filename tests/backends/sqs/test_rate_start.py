"""Rate-limited claims on SQS + DynamoDB: the grant, and the attempt's start, count from
the claim's write."""

from __future__ import annotations

import itertools

from queue_core.records.jobs import NewJob
from queue_core.rules.limits import RATE_START_MS
from tests.backends.sqs.conftest import Factory

T0 = 1_700_000_000_000


def test_on_the_storage_clock_a_grant_counts_from_its_write(make_storage: Factory) -> None:
    ticks = itertools.count(T0, 300)  # every reading of the clock is 300 ms later
    s = make_storage(clock=lambda: next(ticks))
    job = NewJob(
        id="r1",
        task_name="t",
        queue="default",
        payload=b"{}",
        rate_key="k",
        rate_limit=1,
        rate_window_ms=1000,
    )
    s.enqueue([job], now=T0)
    (claimed,) = s.claim("w", ["default"], 1, 30_000)
    assert claimed.start_by is not None
    # the reads before the grant took "300 ms": the attempt starts at the grant's reading
    # of the clock, not the claim's first, and its body keeps the whole RATE_START_MS
    assert claimed.started_at > T0
    assert claimed.start_by == claimed.started_at + RATE_START_MS
    assert s.rate_usage("k", 1000, now=claimed.start_by) == 1
