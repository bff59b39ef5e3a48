"""Contract: throughput counts (``SupportsThroughput``, see :mod:`queue_core.rules.throughput`).

Each test skips naming the ability on a storage without it. Times are explicit; the
events of a test lie in distinct minutes so that per-minute counters and row reads
agree exactly.
"""

from __future__ import annotations

import pytest

from queue_core.records.errors import ConfigError
from queue_core.rules.throughput import ThroughputCount, bucket_start
from queue_core.storage.abilities import SupportsThroughput
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    MIN,
    T0,
    claim_one,
    complete_end,
    dead_end,
    enqueue_one,
    new_job,
    retry_end,
)
from queue_core.testing.suite._base import ContractBase, lacks

__all__ = ["ThroughputContract"]

M0 = bucket_start(T0, MIN)
"""The start of the minute holding ``T0``."""


def throughput_of(storage: Storage) -> SupportsThroughput:
    """The storage as :class:`SupportsThroughput`; the test skips without it."""
    if not isinstance(storage, SupportsThroughput):
        pytest.skip(lacks(SupportsThroughput))
    return storage


def _seed(storage: Storage) -> None:
    """Minute 0: 3 jobs enqueued on ``a``, 1 on ``b``. Minute 1: one ``a`` job
    succeeds, one fails and is retried (no finish), one is dead-lettered. Minute 2: the
    retried job succeeds. Minute 3: the ``b`` job is cancelled while queued."""
    storage.enqueue([new_job(queue="a") for _ in range(3)], now=T0)
    b_job = enqueue_one(storage, queue="b", now=T0 + 1)
    got = storage.claim("w", ["a"], 3, MIN, now=T0 + MIN)
    assert len(got) == 3
    ends = [complete_end(got[0].ref), retry_end(got[1].ref, 0), dead_end(got[2].ref)]
    assert storage.finish(ends, now=T0 + MIN) == [True, True, True]
    again = claim_one(storage, now=T0 + 2 * MIN, queues=["a"])
    assert storage.finish([complete_end(again.ref)], now=T0 + 2 * MIN) == [True]
    storage.cancel(b_job, now=T0 + 3 * MIN)


class ThroughputContract(ContractBase):
    """``throughput``: enqueues and final states per queue and bucket."""

    def test_counts_enqueues_and_finishes_per_minute(self, storage: Storage) -> None:
        tp = throughput_of(storage)
        _seed(storage)
        assert tp.throughput(M0, now=T0 + 4 * MIN) == [
            ThroughputCount("a", M0, "enqueued", 3),
            ThroughputCount("a", M0 + MIN, "dead", 1),
            ThroughputCount("a", M0 + MIN, "succeeded", 1),
            ThroughputCount("a", M0 + 2 * MIN, "succeeded", 1),
            ThroughputCount("b", M0, "enqueued", 1),
            ThroughputCount("b", M0 + 3 * MIN, "cancelled", 1),
        ]

    def test_wider_buckets_sum_the_minutes(self, storage: Storage) -> None:
        tp = throughput_of(storage)
        _seed(storage)
        wide = 60 * MIN
        start = bucket_start(T0, wide)
        assert bucket_start(T0 + 3 * MIN, wide) == start  # the seed lies in one hour
        assert tp.throughput(M0, wide, queues=["a"], now=T0 + 4 * MIN) == [
            ThroughputCount("a", start, "dead", 1),
            ThroughputCount("a", start, "enqueued", 3),
            ThroughputCount("a", start, "succeeded", 2),
        ]

    def test_since_and_now_bound_the_buckets(self, storage: Storage) -> None:
        tp = throughput_of(storage)
        _seed(storage)
        # since inside minute 1: that whole minute counts, minute 0 does not
        assert tp.throughput(T0 + MIN + 1, now=T0 + 2 * MIN) == [
            ThroughputCount("a", M0 + MIN, "dead", 1),
            ThroughputCount("a", M0 + MIN, "succeeded", 1),
            ThroughputCount("a", M0 + 2 * MIN, "succeeded", 1),
        ]
        # now in minute 0: nothing later
        assert tp.throughput(M0, queues=["b"], now=T0 + 1) == [
            ThroughputCount("b", M0, "enqueued", 1)
        ]
        assert tp.throughput(M0, queues=["nope"], now=T0 + 4 * MIN) == []

    def test_bucket_must_be_whole_minutes(self, storage: Storage) -> None:
        tp = throughput_of(storage)
        for bad in (0, -MIN, 30_000, MIN + 1):
            with pytest.raises(ConfigError) as err:
                tp.throughput(M0, bad, now=T0)
            assert err.value.code == "invalid_option"
            assert str(bad) in str(err.value)
