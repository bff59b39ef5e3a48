"""Debounce keys on Redis (enqueue.lua, prune.lua): a key names its holder until the
holder is pruned, and no longer (nothing grows with the key values)."""

from __future__ import annotations

import redis

from backends.redis import RedisStorage
from queue_core.records.jobs import Action, AttemptEnd, Decision, NewJob, Outcome
from queue_core.testing import DAY, LEASE, SEC, T0


def _call(job_id: str, key: str) -> NewJob:
    return NewJob(
        id=job_id, task_name="t", queue="q", payload=b"{}", debounce_key=key,
        debounce_ms=SEC, debounce_max_ms=10 * SEC,
    )  # fmt: skip


def _run_one(s: RedisStorage, now: int) -> None:
    (c,) = s.claim("w", ["q"], 1, LEASE, now=now)
    end = AttemptEnd(
        ref=c.ref, outcome=Outcome.SUCCEEDED, decision=Decision(action=Action.COMPLETE)
    )
    assert s.finish([end], now=now) == [True]


def test_a_debounce_key_goes_with_its_holder_at_prune(
    storage: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    key = f"{storage.key_prefix}:db:t:a"
    storage.enqueue_debounced([_call("first", "t:a")], now=T0)
    assert raw.get(key) == b"first"
    _run_one(storage, T0 + SEC)
    storage.enqueue_debounced([_call("second", "t:a")], now=T0 + 2 * SEC)
    assert raw.get(key) == b"second"
    assert storage.prune(now=T0 + 8 * DAY) == 1  # "first": the key names another job
    assert raw.get(key) == b"second"
    _run_one(storage, T0 + 3 * SEC)
    assert storage.prune(now=T0 + 8 * DAY) == 1
    assert not raw.exists(key)
