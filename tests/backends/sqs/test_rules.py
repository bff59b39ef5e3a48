"""The shared rules (``queue_core.rules.outcomes``) as the SQS backend stores them.

The contract suite pins the rules end to end; these cases pin what is SQS-specific:
the URL's retention option, and the attempt-1 lost delay a dead-letter entry carries
although the job item's ``ld`` moves on with every retry.
"""

from __future__ import annotations

from backends.sqs import SQSStorage
from queue_core.app.config import open_storage
from queue_core.records.jobs import JobState
from queue_core.testing.fixtures import (
    SEC,
    T0,
    claim_one,
    complete_end,
    dead_end,
    enqueue_one,
    retry_end,
)
from tests.backends.sqs.conftest import Factory


def test_retention_accepts_days_and_zero(sqs_url: str) -> None:
    for option, ms in (("1d12h", 36 * 3_600_000), ("0", 0)):
        s = open_storage(f"{sqs_url}&retention={option}")
        try:
            assert isinstance(s, SQSStorage) and s.store.retention_ms == ms
        finally:
            s.close()


def test_retention_zero_prunes_a_job_finished_now(sqs_url: str) -> None:
    s = SQSStorage.from_url(f"{sqs_url}&retention=0")
    try:
        job_id = enqueue_one(s)
        got = claim_one(s, now=T0)
        assert s.finish([complete_end(got.ref)], now=T0 + SEC) == [True]
        assert s.prune(now=T0 + SEC - 1) == 0
        assert s.prune(now=T0 + SEC) == 1
        assert s.get_job(job_id) is None
    finally:
        s.close()


def test_replay_reaps_with_the_lost_delay_given_at_enqueue(make_storage: Factory) -> None:
    s = make_storage()
    job_id = enqueue_one(s, max_attempts=3, lost_delay_ms=2 * SEC, priority=4)
    first = claim_one(s, now=T0)
    # the core moves the reap delay on for attempt 2; the dead entry must not carry it
    s.finish([retry_end(first.ref, 0, lost_delay_ms=50 * SEC)], now=T0 + SEC)
    second = claim_one(s, now=T0 + SEC)
    assert s.finish([dead_end(second.ref)], now=T0 + 2 * SEC) == [True]
    dead = s.get_job(job_id)
    assert dead is not None and dead.state is JobState.DEAD and dead.dead_id is not None

    t1 = T0 + 100 * SEC
    new_id = s.retry_dead(dead.dead_id, now=t1)
    replay = s.get_job(new_id)
    assert replay is not None
    assert (replay.state, replay.run_at, replay.attempts, replay.max_attempts) == (
        JobState.QUEUED,
        t1,
        0,
        3,
    )
    assert (replay.priority, replay.replay_of) == (4, dead.dead_id)
    got = claim_one(s, now=t1, lease_ms=SEC)
    assert got.id == new_id and got.attempt == 1
    [reaped] = s.reap(now=t1 + SEC)
    assert reaped.state is JobState.QUEUED
    again = s.get_job(new_id)
    assert again is not None and again.run_at == t1 + SEC + 2 * SEC


def test_a_job_stored_before_ld1_replays_with_its_current_lost_delay(
    make_storage: Factory,
) -> None:
    s = make_storage()
    job_id = enqueue_one(s, max_attempts=2, lost_delay_ms=2 * SEC)
    # an item written by an older version has no ld1 attribute
    s.store.ddb.update_item(
        TableName=s.store.table, Key=s.store.keys.job(job_id), UpdateExpression="REMOVE ld1"
    )
    first = claim_one(s, now=T0)
    s.finish([retry_end(first.ref, 0, lost_delay_ms=7 * SEC)], now=T0 + SEC)
    second = claim_one(s, now=T0 + SEC)
    s.finish([dead_end(second.ref)], now=T0 + 2 * SEC)
    dead = s.get_job(job_id)
    assert dead is not None and dead.dead_id is not None
    t1 = T0 + 100 * SEC
    new_id = s.retry_dead(dead.dead_id, now=t1)
    claim_one(s, now=t1, lease_ms=SEC)
    [reaped] = s.reap(now=t1 + SEC)
    assert reaped.state is JobState.QUEUED
    again = s.get_job(new_id)
    assert again is not None and again.run_at == t1 + SEC + 7 * SEC
