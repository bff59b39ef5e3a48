"""The throughput counters of Redis are bounded: one hash per minute with a TTL just
past the one-hour window, in the storage's key space (its hash slot on a cluster)."""

from __future__ import annotations

import redis

from backends.redis import RedisStorage
from backends.redis.throughput import TTL_MS
from queue_core.rules.throughput import THROUGHPUT_WINDOW_MS, ThroughputCount, bucket_start
from queue_core.testing import MIN, T0, claim_one, complete_end, enqueue_one


def test_one_hash_per_minute_expiring_after_the_window(
    storage: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    enqueue_one(storage, queue="q|x", now=T0)  # a '|' in a queue name survives the field
    c = claim_one(storage, now=T0 + MIN, queues=["q|x"])
    assert storage.finish([complete_end(c.ref)], now=T0 + MIN) == [True]
    keys = sorted(raw.keys(f"{storage.keys.prefix}:tp:*"))
    minute = T0 // MIN
    assert keys == [
        f"{storage.keys.prefix}:tp:{minute}".encode(),
        f"{storage.keys.prefix}:tp:{minute + 1}".encode(),
    ]
    assert raw.hgetall(keys[0]) == {b"enqueued|q|x": b"1"}
    assert raw.hgetall(keys[1]) == {b"succeeded|q|x": b"1"}
    for key in keys:
        assert THROUGHPUT_WINDOW_MS < raw.pttl(key) <= TTL_MS
    m0 = bucket_start(T0, MIN)
    assert storage.throughput(T0, now=T0 + MIN) == [
        ThroughputCount("q|x", m0, "enqueued", 1),
        ThroughputCount("q|x", m0 + MIN, "succeeded", 1),
    ]
    # minutes past the window are not even read
    assert storage.throughput(T0, now=T0 + 2 * MIN + TTL_MS) == []
