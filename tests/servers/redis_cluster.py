"""Session fixture for a real 3-master Redis Cluster (owned by the redis backend).

Three ``redis-server --cluster-enabled yes`` on free loopback ports below 55536 (the
cluster bus of each listens on its port + 10000), joined with ``redis-cli --cluster
create ... --cluster-replicas 0``; the fixture waits until every node reports
``cluster_state:ok``. A cluster that does not form is an error, never a skip. Tests
isolate with a fresh key prefix (``redis_cluster_url``).
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest

from tests.servers.redis import RedisServer, start_redis_server, stop_redis_server

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
_MAX_PORT = 55535  # the cluster bus of a node listens on port + 10000


@dataclass(frozen=True)
class RedisClusterServers:
    """A running Redis Cluster of three masters."""

    nodes: tuple[RedisServer, ...]
    workdir: str

    def url(self, **query: str) -> str:
        """A ``redis+cluster://`` URL seeded with the first node (query appended)."""
        q = "&".join(f"{k}={v}" for k, v in query.items())
        node = self.nodes[0]
        return f"redis+cluster://{node.host}:{node.port}/" + (f"?{q}" if q else "")


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_cluster_port(taken: set[int]) -> int:
    """A port below 55536 that is free, and whose bus port (+10000) is free too."""
    for _ in range(200):
        port = random.randint(20000, _MAX_PORT)
        if port in taken or port + 10000 in taken:
            continue
        if _port_is_free(port) and _port_is_free(port + 10000):
            return port
    raise RuntimeError("no free port pair (port, port + 10000) found below 55536")


def _cluster_info(port: int) -> str:
    out = subprocess.run(
        [REDIS_CLI, "-h", "127.0.0.1", "-p", str(port), "cluster", "info"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return out.stdout


def _node_args(port: int, extra_args: Sequence[str]) -> list[str]:
    return [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        f"nodes-{port}.conf",
        "--cluster-node-timeout",
        "5000",
        *extra_args,
    ]


def _start_node(
    i: int, workdir: str, taken: set[int], extra_args: Sequence[str] = ()
) -> RedisServer:
    """Start node ``i`` on a free port pair; a port taken meanwhile by another process
    (parallel test sessions) is retried on another pair, up to 5 times."""
    for attempt in range(5):
        port = _free_cluster_port(taken)
        taken |= {port, port + 10000}
        try:
            return start_redis_server(
                port=port,
                workdir=tempfile.mkdtemp(prefix=f"node{i}-", dir=workdir),
                extra_args=_node_args(port, extra_args),
            )
        except RuntimeError:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


def restart_node(node: RedisServer, down: float, extra_args: Sequence[str] = ()) -> RedisServer:
    """Stop ``node`` (SIGTERM: it writes its AOF, when it keeps one, and exits), stay down
    ``down`` seconds, start it again on its port and data directory (its
    ``nodes-<port>.conf`` keeps its id and slots) and wait until it reports
    ``cluster_state:ok``. ``extra_args`` as given when the cluster was started."""
    node.process.terminate()
    node.process.wait(15)
    if node.process.stderr:
        node.process.stderr.close()
    time.sleep(down)
    new = start_redis_server(
        port=node.port, workdir=node.workdir, extra_args=_node_args(node.port, extra_args)
    )
    _wait_ok([new])
    return new


def _wait_ok(nodes: Sequence[RedisServer], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all("cluster_state:ok" in _cluster_info(n.port) for n in nodes):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the redis cluster did not reach cluster_state:ok within {timeout} s")


def _join(nodes: list[RedisServer]) -> None:
    """Make one cluster of ``nodes``: ``redis-cli --cluster create`` for 3 or more (what it
    accepts), every slot given to the one node with ``CLUSTER ADDSLOTSRANGE`` for 1."""
    if len(nodes) == 1:
        node = nodes[0]
        cmd = [REDIS_CLI, "-h", node.host, "-p", str(node.port), "cluster", "addslotsrange"]
        done = subprocess.run([*cmd, "0", "16383"], capture_output=True, text=True, timeout=10)
        if done.returncode != 0 or "OK" not in done.stdout:
            raise RuntimeError(f"CLUSTER ADDSLOTSRANGE failed: {done.stdout}{done.stderr}")
        return
    create = subprocess.run(
        [
            REDIS_CLI,
            "--cluster",
            "create",
            *(f"{n.host}:{n.port}" for n in nodes),
            "--cluster-replicas",
            "0",
            "--cluster-yes",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if create.returncode != 0:
        raise RuntimeError(f"redis-cli --cluster create failed: {create.stdout}{create.stderr}")


def start_redis_cluster(masters: int = 3, extra_args: Sequence[str] = ()) -> RedisClusterServers:
    """Start ``masters`` cluster-enabled servers, create the cluster, wait for ``ok``
    (``redis-cli --cluster create`` wants 3 masters or more; a 1-master cluster is one
    node given every slot with ``CLUSTER ADDSLOTSRANGE``). ``extra_args`` go to every
    node (``--appendonly yes`` for nodes whose data survives :func:`restart_node`).

    Raises:
        RuntimeError: a node did not start, the cluster could not be made, or it did not
            report ``cluster_state:ok`` within 30 s.
    """
    workdir = tempfile.mkdtemp(prefix="qc-redis-cluster-")
    nodes: list[RedisServer] = []
    taken: set[int] = set()
    try:
        for i in range(masters):
            nodes.append(_start_node(i, workdir, taken, extra_args))
        _join(nodes)
        _wait_ok(nodes)
        return RedisClusterServers(tuple(nodes), workdir)
    except BaseException:
        for node in nodes:
            stop_redis_server(node)
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def stop_redis_cluster(cluster: RedisClusterServers) -> None:
    """Stop every node and remove the working directory."""
    for node in cluster.nodes:
        stop_redis_server(node)
    shutil.rmtree(cluster.workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """One real 3-master Redis Cluster for the whole session."""
    cluster = start_redis_cluster()
    try:
        yield cluster
    finally:
        stop_redis_cluster(cluster)


@pytest.fixture
def redis_cluster_url(redis_cluster: RedisClusterServers) -> str:
    """A ``redis+cluster://`` URL with a key prefix no other test uses."""
    return redis_cluster.url(prefix=f"t{uuid.uuid4().hex[:12]}")
