"""Workers survive a restart of the storage server mid-drain without losing a job.

Two console-script burst workers (:mod:`tests.integration.helpers.drain_app`) drain
1,000 jobs; once a fifth of them have started the server is stopped, kept down for a
second, and started again on the same port. Every job must end ``succeeded``, nothing
may be dead or missing, and no job may run twice at once. The lease (30 s) is far longer
than the outage, so a running attempt keeps its lease through it: a job runs more than
once only if storage itself recorded an earlier attempt ``lost`` (e.g. a claim whose
reply was cut by the restart), which the test checks for every such job and reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from queue_core import Outcome, Queue
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
from tests.servers.redis import RedisServer, start_redis_server, stop_redis_server

N = 1000
DOWN = 1.0  # seconds the server stays down

_AOF = ["--appendonly", "yes", "--appendfsync", "everysec"]


def _drain_through_restart(
    url: str, tmp_path: Path, stop: Callable[[], None], start: Callable[[], None]
) -> None:
    log = tmp_path / "executions.log"
    q = Queue(url)
    q.migrate()
    try:
        handles = register(q).map([(i,) for i in range(N)])
        # a 5 s lease: an attempt whose end was lost with the connection is reaped and run
        # again within seconds, not after the default 30 s
        workers = spawn_workers(
            url, log, 2, "--burst", "--reap-interval", "0.5", sleep=0.01, lease=5.0
        )
        try:
            wait_for(lambda: count_started(log) >= N // 5, 120, "a fifth started", workers, log)
            stop()
            started_before = count_started(log)
            time.sleep(DOWN)
            start()
            assert started_before < N, "the drain finished before the restart"
            wait_all(workers, log, timeout=150)
        finally:
            stop_all(workers)
        # a fresh connection: the producer's pooled one died with the server
        q.close()
        q = Queue(url)

        stats = {s.queue: s for s in q.stats()}["default"]
        assert (stats.succeeded, stats.dead, stats.ready, stats.running) == (N, 0, 0, 0)
        runs = read_log(log)
        assert sorted(runs) == list(range(N)), "some job never ran"
        rerun = 0
        for i, execs in runs.items():
            attempts = [e.attempt for e in execs]
            assert len(set(attempts)) == len(attempts), f"job {i}: one attempt ran twice"
            assert all(e.ended is not None for e in execs), f"job {i}: {execs}"
            for prev, nxt in zip(execs, execs[1:], strict=False):
                assert prev.ended is not None and prev.ended <= nxt.started, f"job {i}"
            if attempts != [1]:
                records = q.job(handles[i].id).attempts()
                outcomes = [r.outcome for r in records]
                assert outcomes[-1] is Outcome.SUCCEEDED, f"job {i}: {records}"
                assert set(outcomes[:-1]) <= {Outcome.LOST}, f"job {i}: {records}"
                rerun += 1
        print(f"restart: {started_before} of {N} started before it; {rerun} jobs ran again")
    finally:
        q.close()


@pytest.mark.timeout(300)
def test_postgresql_restart_mid_drain_loses_no_job(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    """A PostgreSQL fast shutdown (every connection terminated) and start on the same
    port: workers reconnect with backoff and finish the drain."""
    _drain_through_restart(postgres_url, tmp_path, postgres_server.stop, postgres_server.start)


@pytest.fixture
def persistent_redis() -> Iterator[list[RedisServer]]:
    """A redis-server of this test's own with AOF persistence (``appendonly yes``).

    A list, so the test can swap in the restarted process (same port and data dir).
    """
    holder = [start_redis_server(extra_args=_AOF)]
    try:
        yield holder
    finally:
        stop_redis_server(holder[0])


@pytest.mark.timeout(300)
def test_redis_restart_mid_drain_loses_no_job(
    persistent_redis: list[RedisServer], tmp_path: Path
) -> None:
    """A Redis restart (SIGTERM, then start on the same port and data dir).

    Redis without persistence starts empty after a restart: queued jobs, leases and
    attempt records are simply gone, and no client can prevent that — it is a property of
    the server's configuration, not of queue-core. The guarantee worth testing is the one
    an operator gets by configuring Redis durably, so this test runs its own server with
    ``appendonly yes`` (the session server stays non-persistent and is not restarted):
    the data survives the restart, the Lua scripts do not (``NOSCRIPT`` -> reload), and
    the workers ride through connection loss.
    """
    first = persistent_redis[0]
    url = first.url(prefix="restart")

    def stop() -> None:
        first.process.terminate()  # SIGTERM: redis flushes the AOF and exits
        first.process.wait(15)
        if first.process.stderr:
            first.process.stderr.close()

    def start() -> None:
        persistent_redis[0] = start_redis_server(
            port=first.port, workdir=first.workdir, extra_args=_AOF
        )

    _drain_through_restart(url, tmp_path, stop, start)
