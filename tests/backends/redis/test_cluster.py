"""``redis+cluster://``: hash-tagged keys, routing across masters, URL errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from backends.redis import RedisStorage
from backends.redis.pinned import Pinned
from queue_core import Queue
from queue_core.app.config import open_storage
from queue_core.records.errors import ConfigError, StorageUnavailable
from queue_core.records.jobs import NewJob
from queue_core.testing.fixtures import complete_end
from tests.fds import descriptors_past_select_limit
from tests.servers.redis import stop_redis_server
from tests.servers.redis_cluster import (
    RedisClusterServers,
    restart_node,
    start_redis_cluster,
    stop_redis_cluster,
)


@pytest.fixture
def raw(redis_cluster: RedisClusterServers) -> Iterator[RedisCluster[bytes]]:
    node = redis_cluster.nodes[0]
    client: RedisCluster[bytes] = RedisCluster(host=node.host, port=node.port)
    try:
        yield client
    finally:
        client.close()


def _job(i: int) -> NewJob:
    return NewJob(id=f"job-{i}", task_name="t", queue=f"q{i % 3}", payload=b"[]")


def _keys_of(raw: RedisCluster[bytes], prefix: str) -> list[bytes]:
    found: list[bytes] = []
    for node in raw.get_primaries():
        found += raw.keys(f"{{{prefix}*", target_nodes=node)
    return found


def test_each_queue_keeps_its_keys_in_the_slot_of_its_hash_tag(
    redis_cluster: RedisClusterServers, raw: RedisCluster[bytes]
) -> None:
    s = open_storage(redis_cluster.url(prefix="slot1"))
    try:
        assert isinstance(s, RedisStorage)
        s.enqueue([_job(i) for i in range(30)])
        claimed = s.claim("w", ["q0", "q1", "q2"], 10, 30_000)
        assert len(claimed) == 10
        keys = _keys_of(raw, "slot1")
        # jobs, per-queue ready sets and counts, wake lists, ... and the registry of homes
        assert len(keys) > 30
        tags = {k[1 : k.index(b"}")] for k in keys}
        assert tags == {b"slot1", b"slot1:q0", b"slot1:q1", b"slot1:q2"}
        assert all(raw.keyslot(k) == raw.keyslot(b"{" + k[1 : k.index(b"}")] + b"}") for k in keys)
        assert len({raw.keyslot(b"{" + t + b"}") for t in tags}) == 4
    finally:
        s.close()


def test_prefixes_spread_over_the_masters(redis_cluster: RedisClusterServers) -> None:
    """Several prefixes land on different masters, and each works on its own."""
    node = redis_cluster.nodes[0]
    probe: RedisCluster[bytes] = RedisCluster(host=node.host, port=node.port)
    owners: dict[str, str] = {}
    try:
        for i in range(60):
            prefix = f"spread{i}"
            owner = probe.get_node_from_key(f"{{{prefix}}}")
            assert owner is not None
            owners.setdefault(owner.name, prefix)
            if len(owners) == 3:
                break
    finally:
        probe.close()
    assert len(owners) == 3
    for prefix in owners.values():
        q = Queue(redis_cluster.url(prefix=prefix))
        try:
            q.storage().enqueue([_job(1)])
            assert q.storage().get_job("job-1") is not None
            got = q.storage().claim("w", ["q1"], 5, 30_000)
            assert [c.id for c in got] == ["job-1"]
        finally:
            q.close()


def test_wait_for_jobs_wakes_on_a_cluster(redis_cluster: RedisClusterServers) -> None:
    url = redis_cluster.url(prefix="wake1")
    waiter = RedisStorage.from_url(url)
    producer = RedisStorage.from_url(url)
    try:
        assert waiter.wait_for_jobs(["q0", "q1"], 0.05) is False
        # the waiter blocks (BLPOP on the wake lists of two homes at once) until the enqueue
        later = threading.Timer(0.3, producer.enqueue, args=([_job(1)],))
        later.start()
        t0 = time.monotonic()
        try:
            assert waiter.wait_for_jobs(["q0", "q1"], 10) is True
        finally:
            later.join()
        assert 0.2 < time.monotonic() - t0 < 5
    finally:
        waiter.close()
        producer.close()


def test_a_wait_on_sockets_numbered_past_select_limit(redis_cluster: RedisClusterServers) -> None:
    """A long-lived worker may hold more than 1,024 descriptors: the wait still works."""
    url = redis_cluster.url(prefix="wake2")
    with descriptors_past_select_limit():
        waiter = RedisStorage.from_url(url)
        try:
            assert waiter.wait_for_jobs(["q0", "q1"], 0.05) is False
            waiter.enqueue([_job(1)])
            assert waiter.wait_for_jobs(["q0", "q1"], 5) is True
        finally:
            waiter.close()


@pytest.mark.parametrize("prefix", ["{qc}", "a}b", "x{"])
def test_braces_in_a_cluster_prefix_are_refused(
    redis_cluster: RedisClusterServers, prefix: str
) -> None:
    with pytest.raises(ConfigError) as info:
        RedisStorage.from_url(redis_cluster.url(prefix=prefix))
    assert info.value.code == "invalid_option"
    assert prefix in str(info.value)


def test_a_database_other_than_0_is_refused(redis_cluster: RedisClusterServers) -> None:
    node = redis_cluster.nodes[0]
    with pytest.raises(ConfigError) as info:
        RedisStorage.from_url(f"redis+cluster://{node.host}:{node.port}/3")
    assert info.value.code == "invalid_url"
    assert "database 0" in str(info.value)


def test_unreachable_seed_is_storage_unavailable_at_the_first_call_not_at_build() -> None:
    s = RedisStorage.from_url("redis+cluster://127.0.0.1:1/?socket_connect_timeout=0.5")
    try:
        assert repr(s).startswith("RedisStorage(cluster 127.0.0.1:1,")  # repr never connects
        with pytest.raises(StorageUnavailable, match="cannot be connected"):
            s.enqueue([_job(0)])
        with pytest.raises(StorageUnavailable):  # tried again, not a cached failure
            s.stats()
    finally:
        s.close()


def test_a_storage_built_while_its_seed_node_is_down_works_once_it_is_back() -> None:
    """A worker started (or respawned) while the URL's node restarts waits for it like
    any storage outage, instead of failing at start-up."""
    cluster = start_redis_cluster(masters=1)
    nodes = list(cluster.nodes)
    node = nodes[0]
    url = f"{cluster.url(prefix='seed1')}&socket_connect_timeout=0.5"
    restarted = threading.Thread(target=lambda: nodes.__setitem__(0, restart_node(node, 2.0)))
    try:
        restarted.start()
        deadline = time.monotonic() + 10
        while node.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert node.process.poll() is not None, "the node did not stop"
        s = RedisStorage.from_url(url)  # the seed is down: no error yet
        try:
            with pytest.raises(StorageUnavailable):
                s.enqueue([_job(0)])
            restarted.join(30)
            s.enqueue([_job(1)])
            assert s.get_job("job-1") is not None
            assert s.get_job("job-0") is None  # the failed call wrote nothing
        finally:
            s.close()
    finally:
        restarted.join(30)
        for n in nodes:
            stop_redis_server(n)
        stop_redis_cluster(cluster)


def test_a_url_may_name_several_seeds_and_the_first_that_answers_serves(
    redis_cluster: RedisClusterServers,
) -> None:
    node = redis_cluster.nodes[1]
    url = f"redis+cluster://127.0.0.1:1,{node.host}:{node.port}/?prefix=seeds1"
    s = RedisStorage.from_url(url + "&socket_connect_timeout=0.5")
    try:
        assert repr(s).startswith("RedisStorage(cluster 127.0.0.1:1,")  # not connected yet
        s.enqueue([_job(0)])  # the first seed refuses: the second answers
        assert s.get_job("job-0") is not None
    finally:
        s.close()


@pytest.mark.parametrize(
    "hosts", ["127.0.0.1:7000,", "127.0.0.1:7000,127.0.0.1:port", "127.0.0.1:7000,:7001"]
)
def test_a_bad_seed_in_a_cluster_url_is_a_config_error_without_the_password(hosts: str) -> None:
    with pytest.raises(ConfigError) as info:
        RedisStorage.from_url(f"redis+cluster://u:pw-s3cret@{hosts}/")
    assert info.value.code == "invalid_url"
    assert "pw-s3cret" not in str(info.value)
    assert "host[:port][,host[:port]...]" in str(info.value)


def test_repr_names_the_cluster_and_hides_the_password(
    redis_cluster: RedisClusterServers,
) -> None:
    s = RedisStorage.from_url(redis_cluster.url(prefix="r1"))
    try:
        text = repr(s)
        assert text.startswith("RedisStorage(cluster 127.0.0.1:")
        assert "prefix='r1'" in text
        assert s.key_prefix == "{r1}"
    finally:
        s.close()
    node = redis_cluster.nodes[0]
    s = RedisStorage.from_url(f"redis+cluster://u:pw-s3cret@{node.host}:{node.port}/")
    try:
        assert "pw-s3cret" not in repr(s)
        with pytest.raises(StorageUnavailable) as info:  # the nodes have no such user
            s.stats()
        assert "pw-s3cret" not in str(info.value)
    finally:
        s.close()


def test_a_script_cache_flush_on_every_node_is_survived(
    redis_cluster: RedisClusterServers, raw: RedisCluster[bytes]
) -> None:
    s = RedisStorage.from_url(redis_cluster.url(prefix="flush1"))
    try:
        s.enqueue([_job(0)])
        owner = raw.get_node_from_key("{flush1}")
        plain = s.enqueuing._one  # a single plain job goes through enqueue_one.lua
        assert plain is not None
        sha = plain.sha
        assert raw.execute_command("SCRIPT", "EXISTS", sha, target_nodes=owner) == [1]
        for node in raw.get_primaries():
            raw.execute_command("SCRIPT", "FLUSH", target_nodes=node)
        assert raw.execute_command("SCRIPT", "EXISTS", sha, target_nodes=owner) == [0]
        s.enqueue([_job(3)])  # NOSCRIPT -> the script is loaded again on the owning node
        got = s.claim("w", ["q0"], 5, 30_000)
        assert sorted(c.id for c in got) == ["job-0", "job-3"]
    finally:
        s.close()


def test_a_script_sent_to_a_master_that_does_not_own_the_slot_follows_moved(
    redis_cluster: RedisClusterServers,
) -> None:
    """The hot paths send EVALSHA straight to the master the client's slot map names, with
    the home in KEYS: a stale map gets MOVED (nothing ran) and the call goes through the
    cluster client, which follows it."""
    s = RedisStorage.from_url(redis_cluster.url(prefix="moved1"))
    try:
        s.enqueue([_job(0), _job(3)])  # q0
        home = s.store.homes.of_queue("q0")
        slot = s.store.client.keyslot(home)
        owner = s.store.client.nodes_manager.get_node_from_slot(slot)
        other = next(n for n in s.store.client.get_primaries() if n.name != owner.name)
        wrong = s.store.client.get_redis_connection(other).connection_pool
        s.store._routes[slot] = (Pinned(), wrong)
        got = s.claim("w", ["q0"], 5, 30_000)
        assert sorted(c.id for c in got) == ["job-0", "job-3"]
        assert s.store._route(slot)[1] is not wrong
        assert s.finish([complete_end(c.ref) for c in got]) == [True, True]
    finally:
        s.close()


def test_a_workflow_s_child_on_another_queue_runs(redis_cluster: RedisClusterServers) -> None:
    """The child lives in the shared home, as an execution's step jobs: its queue is
    marked there when the suspension adds it, so a worker of that queue claims it (it
    stayed ready, unclaimed, and the workflow waited for ever)."""
    from queue_core import DurableContext

    q = Queue(redis_cluster.url(prefix="wfkids"))
    try:

        @q.task(name="kid", queue="kids")
        def kid(x: int) -> int:
            return x * 3

        @q.workflow(name="parent", queue="parents")
        async def parent(ctx: DurableContext) -> int:
            return await ctx.run(kid, 2)

        execution = parent.start()
        q.run_worker(
            queues=["parents", "kids"], burst=True, install_signal_handlers=False, reap_interval=0.1
        )
        assert execution.result(timeout=5) == 6
    finally:
        q.close()
