"""The chaos drain with flows and durable workflows (see tests/chaos/durable_driver.py for
what is checked): worker processes SIGKILLed every 1-3 s, and server faults mid-drain
while flows and workflows run: a Redis restart, a PostgreSQL restart, a restart of the
Redis Cluster node that holds the flows' hash slot, and DynamoDB/SQS throttling (a share
of the requests answered as throttled for a few seconds, by a wrapper in front of moto).

Backends: SQLite, PostgreSQL, Redis, a Redis Cluster and a memory storage served to every
process (:mod:`tests.integration.helpers.memproxy`) run both; SQS+DynamoDB has no
``SupportsWorkflows`` and runs the flows only.

Sizes: ``QC_CHAOS_FLOWS`` diamond executions and ``QC_CHAOS_WORKFLOWS`` workflows per
backend, by default a 33rd of ``QC_CHAOS_JOBS`` each, at least 30 (so 30 + 30 in the
bounded form ``nox -s soak`` runs, 303 + 303 under ``nox -s chaos``); on SQS, whose moto
server handles one DynamoDB request at a time, a fifth of the flows (at least 20).
``QC_CHAOS_RESTARTS`` server faults per fault drain (1 by default, 3 under
``nox -s chaos``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from queue_core import Queue
from tests.chaos.durable_driver import DurableChaosReport, Target, run_durable_chaos
from tests.servers.moto import TABLE, moto_server
from tests.servers.postgres import PostgresServer
from tests.servers.redis import RedisServer, start_redis_server, stop_redis_server
from tests.servers.redis_cluster import (
    RedisClusterServers,
    restart_node,
    start_redis_cluster,
    stop_redis_cluster,
)

JOBS = int(os.environ.get("QC_CHAOS_JOBS", "1000"))
FLOWS = int(os.environ.get("QC_CHAOS_FLOWS", str(max(30, JOBS // 33))))
WORKFLOWS = int(os.environ.get("QC_CHAOS_WORKFLOWS", str(max(30, JOBS // 33))))
RESTARTS = int(os.environ.get("QC_CHAOS_RESTARTS", "1"))
DOWN = 1.0  # seconds a restarted server stays down
THROTTLE = (0.5, 3.0)  # share of DynamoDB/SQS requests throttled, for how many seconds
LEASE = 2.0
SIZES = {  # (flows, workflows)
    "sqlite": (FLOWS, WORKFLOWS),
    "postgresql": (FLOWS, WORKFLOWS),
    "redis": (FLOWS, WORKFLOWS),
    "redis-cluster": (FLOWS, WORKFLOWS),
    "memory-proxy": (FLOWS, WORKFLOWS),
    "sqs": (max(20, FLOWS // 5), 0),
}
KILL_EVERY = {"sqs": (4.0, 8.0)}  # moto drains slowly: fewer kills
FIXTURES = {
    "postgresql": "postgres_url",
    "redis": "redis_url",
    "redis-cluster": "redis_cluster_url",
    "sqs": "sqs_url",
}
_AOF = ["--appendonly", "yes", "--appendfsync", "everysec"]

pytestmark = [pytest.mark.soak, pytest.mark.chaos, pytest.mark.timeout(3600)]


def _url_target(url: str) -> Target:
    return Target(url, lambda: Queue(url, lease=LEASE))


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    backend = request.param
    if backend == "memory-proxy":
        from tests.integration.helpers.memproxy import ENV, connect, serve

        with serve() as address:
            yield Target(
                "memory://",
                lambda: Queue(storage=connect(address), lease=LEASE),  # type: ignore[arg-type]
                {ENV: address},
            )
        return
    if backend == "sqlite":
        yield _url_target(f"sqlite:///{tmp_path / 'jobs.db'}")
        return
    yield _url_target(str(request.getfixturevalue(FIXTURES[backend])))


def _check(report: DurableChaosReport) -> None:
    assert report.kills >= 1, "no worker was killed: the drain ended too soon to test anything"
    assert (report.stuck, report.wrong) == (0, 0), "\n".join(report.violations[:20])
    assert report.violations == [], "\n".join(report.violations[:20])
    assert report.lost_attempts >= 1, "the kills hit no running attempt"
    if report.workflows:
        assert report.suspended >= 3 * report.workflows
        assert report.events == report.workflows
    if not report.restarts:  # with no server fault no attempt may fail on a storage error
        assert report.fault_failed == 0


@pytest.mark.parametrize("target", list(SIZES), indirect=True)
def test_chaos_flows_and_workflows_end_right_under_sigkill(
    target: Target,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    durable_reports: list[DurableChaosReport],
) -> None:
    backend = request.node.callspec.id
    flows, workflows = SIZES[backend]
    report = run_durable_chaos(
        target,
        backend,
        flows,
        workflows,
        tmp_path / "chaos",
        kill_every=KILL_EVERY.get(backend, (1.0, 3.0)),
        lease=LEASE,
        timeout=1800,
    )
    durable_reports.append(report)
    _check(report)


# --------------------------------------------------------------------------- server faults


@pytest.fixture
def persistent_redis() -> Iterator[list[RedisServer]]:
    """A redis-server of this test's own with AOF persistence, so its data survives a
    restart (see tests/integration/test_server_restart.py); a list, so the restart can
    swap in the new process (same port and data dir)."""
    holder = [start_redis_server(extra_args=_AOF)]
    try:
        yield holder
    finally:
        stop_redis_server(holder[0])


def _fault_drain(
    url: str, backend: str, fault: str, inject: Callable[[], None], tmp_path: Path
) -> DurableChaosReport:
    flows, workflows = SIZES[backend]
    return run_durable_chaos(
        _url_target(url),
        backend,
        flows,
        workflows,
        tmp_path / "chaos",
        fault=inject,
        fault_name=fault,
        restarts=RESTARTS,
        kill_every=KILL_EVERY.get(backend, (1.0, 3.0)),
        lease=LEASE,
        timeout=1800,
    )


def test_chaos_flows_and_workflows_through_redis_restarts(
    persistent_redis: list[RedisServer],
    tmp_path: Path,
    durable_reports: list[DurableChaosReport],
) -> None:
    first = persistent_redis[0]

    def restart() -> None:
        server = persistent_redis[0]
        server.process.terminate()  # SIGTERM: redis flushes the AOF and exits
        server.process.wait(15)
        for pipe in (server.process.stdout, server.process.stderr):
            if pipe:
                pipe.close()
        time.sleep(DOWN)
        persistent_redis[0] = start_redis_server(
            port=first.port, workdir=first.workdir, extra_args=_AOF
        )

    report = _fault_drain(first.url(prefix="chaos"), "redis", "Redis restart", restart, tmp_path)
    durable_reports.append(report)
    assert report.restarts == RESTARTS
    _check(report)


def test_chaos_flows_and_workflows_through_postgresql_restarts(
    postgres_server: PostgresServer,
    postgres_url: str,
    tmp_path: Path,
    durable_reports: list[DurableChaosReport],
) -> None:
    def restart() -> None:
        postgres_server.stop()
        time.sleep(DOWN)
        postgres_server.start()

    report = _fault_drain(postgres_url, "postgresql", "PostgreSQL restart", restart, tmp_path)
    durable_reports.append(report)
    assert report.restarts == RESTARTS
    _check(report)


@pytest.fixture
def persistent_cluster() -> Iterator[RedisClusterServers]:
    """A 3-master Redis Cluster of this test's own whose nodes keep an AOF, so a restarted
    node comes back with its data."""
    cluster = start_redis_cluster(extra_args=_AOF)
    try:
        yield cluster
    finally:
        stop_redis_cluster(cluster)


def _owner(cluster: RedisClusterServers, nodes: list[RedisServer], tag: str) -> int:
    """The index in ``nodes`` of the master serving the hash slot of ``{tag}``."""
    import redis
    from redis.crc import key_slot

    slot = key_slot(tag.encode())
    client = redis.Redis(host=nodes[0].host, port=nodes[0].port)
    try:
        for start, end, master, *_ in client.execute_command("CLUSTER SLOTS"):
            if start <= slot <= end:
                return next(i for i, n in enumerate(nodes) if n.port == int(master[1]))
    finally:
        client.close()
    raise AssertionError(f"no master serves slot {slot}")


def test_chaos_flows_and_workflows_through_redis_cluster_node_restarts(
    persistent_cluster: RedisClusterServers,
    tmp_path: Path,
    durable_reports: list[DurableChaosReport],
) -> None:
    """The node restarted is the one serving the storage's shared hash tag ``{chaos}``,
    where every flow and workflow key lives: the harshest node to lose."""
    nodes = list(persistent_cluster.nodes)
    i = _owner(persistent_cluster, nodes, "chaos")

    def restart() -> None:
        nodes[i] = restart_node(nodes[i], DOWN, _AOF)

    try:
        url = persistent_cluster.url(prefix="chaos")
        report = _fault_drain(url, "redis-cluster", "Cluster node restart", restart, tmp_path)
    finally:  # the fixture stops the nodes it started; a restarted one is a new process
        for n, old in zip(nodes, persistent_cluster.nodes, strict=True):
            if n is not old:
                stop_redis_server(n)
    durable_reports.append(report)
    assert report.restarts == RESTARTS
    _check(report)


def test_chaos_flows_through_dynamodb_and_sqs_throttling(
    tmp_path: Path, durable_reports: list[DurableChaosReport]
) -> None:
    """For ``THROTTLE[1]`` seconds, ``THROTTLE[0]`` of the DynamoDB and SQS requests are
    answered throttled (botocore retries them, then queue-core sees the error)."""
    with moto_server() as (endpoint, server):
        rate, seconds = THROTTLE

        def throttle() -> None:
            server.throttle.rate = rate
            time.sleep(seconds)
            server.throttle.rate = 0.0

        url = f"sqs://?region=us-east-1&table={TABLE}&prefix=chaos&endpoint_url={endpoint}"
        report = _fault_drain(url, "sqs", "DynamoDB/SQS throttling", throttle, tmp_path)
        throttled = server.throttle.throttled
    report.fault += f" ({throttled} requests throttled)"
    durable_reports.append(report)
    assert report.restarts == RESTARTS
    assert throttled >= 10, f"only {throttled} requests were throttled: the fault did not bite"
    _check(report)
