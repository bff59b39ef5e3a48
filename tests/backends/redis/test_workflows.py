"""Durable workflows on Redis: what the published contract cannot see -- every workflow
key in the storage's one slot on a cluster, a parked job's score, the jobs a workflow
holds from the retention losing their backstop expiry, and nothing left after prune."""

from __future__ import annotations

import redis
from redis.cluster import RedisCluster

from backends.redis import RedisStorage
from queue_core.records.flows import ExecutionState
from queue_core.records.workflows import PARKED_AT, Suspension
from queue_core.storage.flows import step_job_id
from queue_core.testing.fixtures import DAY, LEASE, T0, complete_end, dead_end
from queue_core.testing.suite._durable_base import (
    child,
    child_memo,
    claim_function,
    event_wait,
    make_workflow,
    sub_flow,
    suspended,
)
from queue_core.testing.suite._flows_base import claim_steps
from tests.contract.urls import with_option
from tests.servers.redis_cluster import RedisClusterServers


def _run_one(s: RedisStorage) -> str:
    """A workflow through a memo, a child, a sub-execution, an event wait and its end."""
    new = make_workflow()
    s.start_execution(new, now=T0)
    fn = claim_function(s, new.id, T0 + 1)
    assert fn is not None
    s.put_memo(fn.ref, new.id, "s:a", b'"A"', now=T0 + 2)
    s.start_child_execution(fn.ref, sub_flow(new.id, 1), "sub#0", "c:0", now=T0 + 3)
    kid = child(new.id, 2, 1)
    stop = Suspension(ready_at=None, memos=(child_memo(1, 2),), children=(kid,), awaiting=(1, 2))
    assert s.finish([suspended(fn.ref, stop)], now=T0 + 4) == [True]
    steps = claim_steps(s, T0 + 5)
    s.finish([complete_end(steps["a"].ref), dead_end(steps["tests.child#1"].ref)], now=T0 + 6)
    fn = claim_function(s, new.id, T0 + 7)
    assert fn is not None
    wait = Suspension(ready_at=None, wait=event_wait(2, "go", since=T0 + 7), reason="event")
    assert s.finish([suspended(fn.ref, wait)], now=T0 + 8) == [True]
    assert s.send_event("go", None, b"1", now=T0 + 9) == 1
    fn = claim_function(s, new.id, T0 + 10)
    assert fn is not None
    s.finish([complete_end(fn.ref)], now=T0 + 11)
    return new.id


def _keys_of(raw: RedisCluster[bytes], prefix: str) -> list[bytes]:
    found: list[bytes] = []
    for node in raw.get_primaries():
        found += raw.keys(f"{{{prefix}}}:*", target_nodes=node)
    return found


def test_every_workflow_key_shares_the_storage_s_slot(
    redis_cluster: RedisClusterServers,
) -> None:
    s = RedisStorage.from_url(redis_cluster.url(prefix="wfslot"))
    node = redis_cluster.nodes[0]
    raw: RedisCluster[bytes] = RedisCluster(host=node.host, port=node.port)
    try:
        eid = _run_one(s)
        keys = _keys_of(raw, "wfslot")
        names = {k.decode() for k in keys}
        # memos, the event, the held jobs' execution, the sub-execution
        assert f"{{wfslot}}:xm:{eid}" in names and "{wfslot}:ev:go" in names
        assert f"{{wfslot}}:x:{eid}.1" in names
        assert {raw.keyslot(k) for k in keys} == {raw.keyslot("{wfslot}")}
    finally:
        raw.close()
        s.close()


def test_a_parked_function_sits_above_every_claim_s_now(
    storage: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    new = make_workflow()
    storage.start_execution(new, now=T0)
    fn = claim_function(storage, new.id, T0 + 1)
    assert fn is not None
    storage.finish([suspended(fn.ref, Suspension(ready_at=None))], now=T0 + 2)
    key = storage.keys.job(step_job_id(new.id, 0))
    assert raw.hget(key, "ra") == str(PARKED_AT).encode()  # the record's ready time is exact
    member = raw.hget(key, "mem")
    assert member is not None
    score = raw.zscore(f"{storage.key_prefix}:r:default:0", member)
    assert score is not None and score > PARKED_AT  # a double cannot tell PARKED_AT - 1 apart


def test_held_jobs_lose_their_backstop_and_go_with_the_execution(
    redis_url: str, raw: redis.Redis[bytes]
) -> None:
    s = RedisStorage.from_url(with_option(redis_url, "retention", "0"))
    try:
        new = make_workflow()
        s.start_execution(new, now=T0)
        fn = claim_function(s, new.id, T0 + 1)
        assert fn is not None
        stop = Suspension(ready_at=None, children=(child(new.id, 1, 0),), awaiting=(1,))
        s.finish([suspended(fn.ref, stop)], now=T0 + 2)
        s.finish([complete_end(claim_steps(s, T0 + 3)["tests.child#0"].ref)], now=T0 + 4)
        kid = s.keys.job(step_job_id(new.id, 1))
        assert raw.pttl(kid) > 0  # the backstop expiry of a finished job
        assert s.prune(now=T0 + DAY) == 0  # the child is kept back: not counted deleted
        assert raw.exists(kid) and raw.pttl(kid) == -1  # held by its execution, no expiry
        assert raw.smembers(f"{s.key_prefix}:xh:{new.id}")
        fn = claim_function(s, new.id, T0 + DAY)
        assert fn is not None
        s.finish([complete_end(fn.ref)], now=T0 + DAY + 1)
        s.send_event("unheard", None, b"1", now=T0 + DAY + 2)
        assert s.prune(now=T0 + 2 * DAY) == 2  # the function's and the child's, with it
        assert raw.keys(f"{s.key_prefix}:x*") == [f"{s.key_prefix}:xseq".encode()]
        assert raw.keys(f"{s.key_prefix}:ev*") == [f"{s.key_prefix}:evn".encode()]  # counters
        assert raw.keys(f"{s.key_prefix}:wn*") == []
        assert not raw.exists(kid)
    finally:
        s.close()


def _waiting_for_go(s: RedisStorage) -> str:
    """A workflow whose function waits for event ``go``, sent: its function is queued and
    the execution ``waiting`` until the function's claim."""
    new = make_workflow()
    s.start_execution(new, now=T0)
    fn = claim_function(s, new.id, T0 + 1)
    assert fn is not None
    wait = Suspension(ready_at=None, wait=event_wait(1, "go", since=T0 + 1), reason="event")
    assert s.finish([suspended(fn.ref, wait)], now=T0 + 2) == [True]
    assert s.send_event("go", None, b"1", now=T0 + 3) == 1
    assert _state(s, new.id) is ExecutionState.WAITING
    return new.id


def _state(s: RedisStorage, execution_id: str) -> ExecutionState:
    record = s.get_execution(execution_id)
    assert record is not None
    return record.state


def test_wait_and_claim_of_a_function_runs_its_workflow_again(storage: RedisStorage) -> None:
    eid = _waiting_for_go(storage)
    got = storage.wait_and_claim("w", ["default"], 5, LEASE, 1.0)
    assert [g.id for g in got] == [step_job_id(eid, 0)]
    assert _state(storage, eid) is ExecutionState.RUNNING


def test_a_cluster_claim_of_a_function_runs_its_workflow_again(
    redis_cluster: RedisClusterServers,
) -> None:
    s = RedisStorage.from_url(redis_cluster.url(prefix="wfclaim"))
    try:
        eid = _waiting_for_go(s)
        fn = claim_function(s, eid, T0 + 4)  # the shared home's claim, one of the homes
        assert fn is not None
        assert _state(s, eid) is ExecutionState.RUNNING
        eid = _waiting_for_go(s)
        got = s.wait_and_claim("w", ["default", "other"], 5, LEASE, 1.0)  # wait, then claim
        assert [g.id for g in got] == [step_job_id(eid, 0)]
        assert _state(s, eid) is ExecutionState.RUNNING
    finally:
        s.close()
