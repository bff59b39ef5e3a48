"""Server faults while heartbeating bodies run: a PostgreSQL restart and
``pg_terminate_backend``, a Redis restart and ``CLIENT KILL``.

One console-script worker runs three jobs that beat their heartbeat for a few seconds —
an async body, a thread body and a process-isolated body
(:mod:`tests.integration.helpers.heartbeat_app`). While all three run, the server goes
away (or cuts every connection). The worker must survive (exit 0 after its burst), every
job must succeed on its first attempt (the outage is far shorter than the lease and the
heartbeat), no driver exception may reach the log, and the outage must be logged once
(``storage unavailable`` ... ``storage available again``), not once per failed call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from queue_core import JobState, Queue
from tests.integration.helpers import heartbeat_app
from tests.integration.helpers.drain_app import CLI, ROOT
from tests.servers.postgres import PostgresServer
from tests.servers.redis import RedisServer, start_redis_server, stop_redis_server

APP = "tests.integration.helpers.heartbeat_app:queue"
_AOF = ["--appendonly", "yes", "--appendfsync", "always"]


def _spawn(
    url: str, tmp_path: Path, tasks: list[str], *, seconds: int, args: list[str]
) -> tuple[list[str], subprocess.Popen[bytes], Path, Path]:
    """Enqueue ``tasks`` on ``url``, start a console-script worker (``args``) and wait
    until every body beats; return the job ids, the worker, the beats log and the path
    of the worker's stderr. The caller ends the worker."""
    log = tmp_path / "beats.log"
    q = Queue(url)
    q.migrate()
    try:
        ids = [q.enqueue(name, allow_unregistered=True).id for name in tasks]
    finally:
        q.close()
    env = dict(
        os.environ,
        QUEUE_CORE_URL=url,
        QC_BEAT_LOG=str(log),
        QC_BEAT_SECONDS=str(seconds),
        PYTHONPATH=str(ROOT),
    )
    err_path = tmp_path / "worker.err"
    with open(err_path, "wb") as err:
        worker = subprocess.Popen(
            [CLI, "worker", APP, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        end = time.monotonic() + 60
        while not (log.exists() and log.read_text().count(" start") == len(tasks)):
            assert worker.poll() is None, err_path.read_text()[-3000:]
            assert time.monotonic() < end, f"not every body of {tasks} started"
            time.sleep(0.02)
    except BaseException:
        worker.kill()
        worker.wait(10)
        raise
    return ids, worker, log, err_path


def _run_through(url: str, tmp_path: Path, fault: Callable[[], None]) -> str:
    """Run the three beating jobs through ``fault``; return the worker's stderr."""
    args = ["--burst", "--reap-interval", "0.5"]
    ids, worker, log, err_path = _spawn(
        url, tmp_path, list(heartbeat_app.TASKS), seconds=5, args=args
    )
    try:
        fault()
        worker.wait(120)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    stderr = err_path.read_text()
    assert worker.returncode == 0, stderr[-3000:]
    assert log.read_text().count(" end") == 3, (log.read_text(), stderr[-3000:])
    q = Queue(url)
    try:
        for job_id in ids:
            handle = q.job(job_id)
            assert handle.status() is JobState.SUCCEEDED, (handle.info(), stderr[-3000:])
            assert [a.outcome.value for a in handle.attempts()] == ["succeeded"]
    finally:
        q.close()
    assert "Traceback" not in stderr, stderr[-3000:]
    for driver in ("psycopg.", "redis.exceptions", "sqlalchemy.exc"):
        assert driver not in stderr, stderr[-3000:]
    return stderr


def _one_outage(stderr: str) -> None:
    down = [line for line in stderr.splitlines() if "storage unavailable" in line]
    up = [line for line in stderr.splitlines() if "storage available again" in line]
    assert len(down) == 1 and " WARNING " in down[0], stderr[-3000:]
    assert len(up) == 1 and " INFO " in up[0], stderr[-3000:]
    assert stderr.index(down[0]) < stderr.index(up[0])
    assert "failed (" not in stderr.replace(down[0], ""), stderr[-3000:]


def _cut_connections(stderr: str) -> None:
    """Cut connections (the server stays up): each of the worker's connections that was
    cut fails one call and is replaced at once, so each outage is a pair of lines and
    there are at most as many as the worker has storage threads."""
    down = [line for line in stderr.splitlines() if "storage unavailable" in line]
    up = [line for line in stderr.splitlines() if "storage available again" in line]
    assert len(down) == len(up) <= 4, stderr[-3000:]


@pytest.mark.timeout(240)
def test_postgresql_restart_under_heartbeating_bodies(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    def restart() -> None:
        postgres_server.stop()
        time.sleep(1.5)
        postgres_server.start()

    _one_outage(_run_through(postgres_url, tmp_path, restart))


@pytest.mark.timeout(240)
def test_pg_terminate_backend_under_heartbeating_bodies(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    database = postgres_url.rsplit("/", 1)[1]

    def terminate() -> None:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()) t",
                (database,),
            ).fetchone()
        assert killed is not None and killed[0] >= 1

    _cut_connections(_run_through(postgres_url, tmp_path, terminate))


@pytest.fixture
def persistent_redis() -> Iterator[list[RedisServer]]:
    holder = [start_redis_server(extra_args=_AOF)]
    try:
        yield holder
    finally:
        stop_redis_server(holder[0])


@pytest.mark.timeout(240)
def test_redis_restart_under_heartbeating_bodies(
    persistent_redis: list[RedisServer], tmp_path: Path
) -> None:
    first = persistent_redis[0]

    def restart() -> None:
        first.process.terminate()
        first.process.wait(15)
        for pipe in (first.process.stdout, first.process.stderr):
            if pipe:
                pipe.close()
        time.sleep(1.5)
        persistent_redis[0] = start_redis_server(
            port=first.port, workdir=first.workdir, extra_args=_AOF
        )

    _one_outage(_run_through(first.url(prefix="faults"), tmp_path, restart))


@pytest.mark.timeout(240)
def test_redis_client_kill_under_heartbeating_bodies(
    persistent_redis: list[RedisServer], tmp_path: Path
) -> None:
    server = persistent_redis[0]

    def kill_clients() -> None:
        admin = redis.Redis(host=server.host, port=server.port)
        try:
            killed = admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            assert int(killed) >= 1
        finally:
            admin.close()

    _cut_connections(_run_through(server.url(prefix="faults"), tmp_path, kill_clients))


@pytest.mark.timeout(120)
def test_an_orphaned_process_child_exits_quietly(tmp_path: Path) -> None:
    """SIGKILL the worker (not its children) while a process-isolated body beats: the
    orphaned child's next heartbeat finds the pipe closed and the child exits at once,
    without a BrokenPipeError traceback in the worker's log."""
    url = f"sqlite:///{tmp_path / 'orphan.db'}"
    _, worker, log, err_path = _spawn(url, tmp_path, ["beat.process"], seconds=30, args=[])
    try:
        child = int(log.read_text().split()[-1])
        assert child != worker.pid
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        end = time.monotonic() + 5
        while _alive(child):
            assert time.monotonic() < end, "the orphaned child still runs"
            time.sleep(0.02)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    time.sleep(0.2)  # anything the child would print is written by now
    stderr = err_path.read_text()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr[-3000:]
    assert "beat.process end" not in log.read_text()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by init) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
