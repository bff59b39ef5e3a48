"""Superseding keys on Redis (enqueue.lua, prune.lua): ``P:sup:<key>`` lists the key's
jobs that may be active, and loses each at prune (nothing grows with the key values)."""

from __future__ import annotations

import redis

from backends.redis import RedisStorage
from queue_core.records.jobs import Action, AttemptEnd, Decision, JobState, NewJob, Outcome
from queue_core.testing import DAY, LEASE, SEC, T0


def _job(job_id: str, behavior: str) -> NewJob:
    return NewJob(
        id=job_id, task_name="t", queue="q", payload=b"{}", concurrency_key="t:k",
        concurrency_limit=1, concurrency_behavior=behavior,
    )  # fmt: skip


def test_a_superseding_key_loses_its_jobs_as_they_are_pruned(
    storage: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    key = f"{storage.key_prefix}:sup:t:k"
    storage.enqueue_superseding([_job("a", "latest")], now=T0)
    got = storage.enqueue_superseding([_job("b", "latest")], now=T0 + 1)
    assert got[0].superseded == ("a",)
    assert raw.zrange(key, 0, -1) == [b"b"]  # a: ended, out of the key at once
    (c,) = storage.claim("w", ["q"], 1, LEASE, now=T0 + SEC)
    end = AttemptEnd(
        ref=c.ref, outcome=Outcome.SUCCEEDED, decision=Decision(action=Action.COMPLETE)
    )
    assert storage.finish([end], now=T0 + SEC) == [True]
    record = storage.get_job("b")
    assert record is not None and record.state is JobState.SUCCEEDED
    assert storage.prune(now=T0 + 8 * DAY) == 2
    assert not raw.exists(key)
