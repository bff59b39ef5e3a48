"""Where the Redis backend keeps attempt records: the newest one, when it names no reason
and no error (every first-time success), in the job hash (field ``la``), earlier ones in
the list ``P:a:<id>``. What the records say is the contract's (``AttemptsContract``);
these check the two places read as one list, in order, and that a store written before
``la`` existed reads the same."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from backends.redis import RedisStorage
from backends.redis.records import with_last
from queue_core.testing import T0
from queue_core.testing.fixtures import claim_one, complete_end, enqueue_one, retry_end
from tests.servers.redis import RedisServer


@pytest.fixture
def s(redis_server: RedisServer) -> Iterator[RedisStorage]:
    st = RedisStorage.from_url(redis_server.url(prefix=f"t{uuid.uuid4().hex[:12]}"))
    try:
        yield st
    finally:
        st.close()


def _keys(s: RedisStorage, raw: redis.Redis[bytes], job_id: str) -> tuple[str, str]:
    p = s.store.key_prefix
    return f"{p}:j:{job_id}", f"{p}:a:{job_id}"


def test_a_first_time_success_is_one_key_and_reads_whole(
    s: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    jid = enqueue_one(s, now=T0)
    c = claim_one(s, now=T0 + 5, worker_id="host-a:41:9f")
    assert s.finish([complete_end(c.ref, mode="process")], now=T0 + 17) == [True]
    job_key, list_key = _keys(s, raw, jid)
    assert not raw.exists(list_key)
    assert raw.object("encoding", job_key) == b"listpack"  # the record fits a listpack
    (a,) = s.list_attempts(jid)
    assert (a.number, a.worker_id, a.outcome, a.reason, a.error_class, a.mode) == (
        1,
        "host-a:41:9f",
        "succeeded",
        None,
        None,
        "process",
    )
    assert a.started_at is not None and a.finished_at is not None
    assert (a.finished_at - a.started_at).total_seconds() * 1000 == 12


def test_a_failure_goes_to_the_list_and_the_later_success_reads_after_it(
    s: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    jid = enqueue_one(s, now=T0, max_attempts=3)
    c = claim_one(s, now=T0, worker_id="w1")
    assert s.finish([retry_end(c.ref, 0)], now=T0 + 1) == [True]
    c = claim_one(s, now=T0 + 2, worker_id="w2")
    assert s.finish([complete_end(c.ref)], now=T0 + 3) == [True]
    _, list_key = _keys(s, raw, jid)
    assert raw.llen(list_key) == 1
    first, second = s.list_attempts(jid)
    assert (first.number, first.worker_id, first.outcome, first.error_class) == (
        1,
        "w1",
        "failed",
        "ValueError",
    )
    assert (second.number, second.worker_id, second.outcome) == (2, "w2", "succeeded")
    job = s.get_job(jid)
    assert job is not None and job.error is not None and job.error.error_class == "ValueError"


def test_a_pod_named_worker_keeps_the_hash_a_listpack(
    s: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    """A Kubernetes pod's worker id (about 40 characters) fits a listpack value as the
    hash's own ``wid`` does: the record keeps it in a field of its own."""
    wid = "myapp-worker-7d9f8c6b5-x2x9k:1:abcdef12"
    jid = enqueue_one(s, now=T0)
    c = claim_one(s, now=T0, worker_id=wid)
    assert s.finish([complete_end(c.ref)], now=T0 + 1) == [True]
    job_key, _ = _keys(s, raw, jid)
    assert raw.object("encoding", job_key) == b"listpack"
    (a,) = s.list_attempts(jid)
    assert a.worker_id == wid


def test_a_long_worker_id_is_kept_whole(s: RedisStorage, raw: redis.Redis[bytes]) -> None:
    wid = "ip-10-0-12-34.eu-west-1.compute.internal|with|bars:123456:0123456789abcdef"
    jid = enqueue_one(s, now=T0)
    c = claim_one(s, now=T0, worker_id=wid)
    assert s.finish([complete_end(c.ref)], now=T0 + 1) == [True]
    (a,) = s.list_attempts(jid)
    assert a.worker_id == wid and a.outcome == "succeeded"


def test_records_written_before_the_hash_field_read_the_same(
    s: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    """A store from before ``la``: every record in the list. Moving the record there by
    hand gives the same attempts and job."""
    jid = enqueue_one(s, now=T0)
    c = claim_one(s, now=T0, worker_id="w1")
    assert s.finish([complete_end(c.ref)], now=T0 + 9) == [True]
    before = (s.list_attempts(jid), s.get_job(jid))
    job_key, list_key = _keys(s, raw, jid)
    la, lw = raw.hmget(job_key, ["la", "lw"])
    assert la is not None and lw == b"w1"
    raw.rpush(list_key, *with_last([], la, lw))
    raw.hdel(job_key, "la", "lw")
    after = (s.list_attempts(jid), s.get_job(jid))
    assert after == before
