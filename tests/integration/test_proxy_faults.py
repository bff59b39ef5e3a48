"""A worker drains jobs through a TCP proxy that stalls, then drops every connection.

:class:`tests.servers.proxy.FaultProxy` sits between the clients and the real server
(PostgreSQL, Redis). One console-script burst worker drains short jobs through it;
mid-drain the proxy stalls all traffic for a few seconds (connections open, no bytes:
a hung middlebox), then resets every connection, then passes traffic again. The URL
sets a 2 s socket timeout (``?socket_timeout=2``, both backends), so:

* a producer's call during the stall fails with ``StorageUnavailable`` within the bound
  (not a driver exception, not a hang), and during the drop at once;
* the worker survives (exits 0 after its burst) and no job is lost: each one succeeds,
  and none ran more often than once per attempt. A claim whose reply was lost to the
  fault never ran; its job is reaped after the lease and runs as the next attempt.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from queue_core import Queue, StorageUnavailable
from tests.integration.helpers.drain_app import (
    count_started,
    read_log,
    register,
    spawn_workers,
    stop_all,
    wait_all,
    wait_for,
)
from tests.servers.postgres import PostgresServer
from tests.servers.proxy import fault_proxy
from tests.servers.redis import RedisServer

JOBS = 300
STALL_S = 4.0
BOUND_S = 2.0
# the watchdog (PostgreSQL) checks every bound/4; redis-py's timeout is exact: 1 s slack
LIMIT_S = BOUND_S + 1.0
LEASE_S = 8.0  # longer than the outage; a claim lost in it comes back this soon


def _url(backend: str, request: pytest.FixtureRequest, port: int) -> str:
    """A fresh storage of ``backend`` reached through the proxy on ``port``."""
    if backend == "postgresql":
        pg: PostgresServer = request.getfixturevalue("postgres_server")
        template = request.getfixturevalue("postgres_template")
        pg.create_database(f"qc_proxy_{port}", template=template)
        request.addfinalizer(lambda: pg.drop_database(f"qc_proxy_{port}"))
        return (
            f"postgresql+psycopg://postgres@127.0.0.1:{port}/qc_proxy_{port}"
            f"?socket_timeout={BOUND_S}"
        )
    return f"redis://127.0.0.1:{port}/0?socket_timeout={BOUND_S}&prefix=p{port}"


def _target(backend: str, request: pytest.FixtureRequest) -> tuple[str, int]:
    name = "postgres_server" if backend == "postgresql" else "redis_server"
    server: PostgresServer | RedisServer = request.getfixturevalue(name)
    return server.host, server.port


def _timed_enqueue(q: Queue) -> tuple[type[BaseException] | None, float]:
    t0 = time.monotonic()
    try:
        q.enqueue("probe", (0,), allow_unregistered=True, queue="probe")
    except StorageUnavailable:
        return StorageUnavailable, time.monotonic() - t0
    return None, time.monotonic() - t0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["postgresql", "redis"])
def test_worker_drains_through_a_stall_and_a_drop_losing_nothing(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    host, port = _target(backend, request)
    with fault_proxy(host, port) as proxy:
        url = _url(backend, request, proxy.port)
        log = tmp_path / "executions.log"
        q = Queue(url)
        q.migrate()
        try:
            register(q).map([(i,) for i in range(JOBS)])
            workers = spawn_workers(
                url, log, 1, "--burst", "--reap-interval", "0.5", sleep=0.02, lease=LEASE_S
            )
            try:
                wait_for(lambda: count_started(log) >= 20, 60, "draining", workers, log)
                proxy.stall()
                stalled = _timed_enqueue(q)
                time.sleep(max(0.0, STALL_S - stalled[1]))
                proxy.drop()
                dropped = _timed_enqueue(q)
                time.sleep(1.0)
                proxy.pass_traffic()
                assert count_started(log) < JOBS, "the drain ended before the fault"
                wait_all(workers, log, timeout=90)
            finally:
                stop_all(workers)
            print(
                f"{backend}: stalled call failed after {stalled[1]:.2f} s, "
                f"dropped after {dropped[1]:.2f} s"
            )
            assert stalled[0] is StorageUnavailable and stalled[1] < LIMIT_S, stalled
            assert dropped[0] is StorageUnavailable and dropped[1] < LIMIT_S, dropped
            runs = read_log(log)
            assert sorted(runs) == list(range(JOBS)), "a job was lost"
            for execs in runs.values():
                # a claim whose reply the fault ate never ran: its job comes back after the
                # lease, so attempt numbers may skip, but never repeat
                attempts = [e.attempt for e in execs]
                assert attempts == sorted(set(attempts)), execs
                assert execs[-1].ended is not None, execs
            stats = {s.queue: s for s in q.stats()}["default"]
            assert (stats.succeeded, stats.ready, stats.running, stats.dead) == (JOBS, 0, 0, 0)
        finally:
            q.close()
