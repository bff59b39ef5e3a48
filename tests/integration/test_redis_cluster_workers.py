"""Real worker subprocesses on a real 3-master Redis Cluster: exactly-once drain, SIGKILL
recovery (the same app as test_redis_workers.py, reached through ``redis+cluster://``),
and a worker started while its cluster node is down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO

import pytest

from queue_core import JobState, Outcome, Queue
from tests.servers.redis import stop_redis_server
from tests.servers.redis_cluster import restart_node, start_redis_cluster, stop_redis_cluster

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.integration.redis_workers_app:queue"
CLI = str(Path(sys.executable).parent / "queue-core")


@pytest.fixture
def env(redis_cluster_url: str, tmp_path: Path) -> dict[str, str]:
    e = dict(os.environ, QC_TEST_URL=redis_cluster_url, QC_TEST_LOG=str(tmp_path / "log"))
    e["PYTHONPATH"] = str(ROOT)
    return e


_ERR: dict[int, IO[bytes]] = {}
"""Each worker's stderr, a file: a pipe that nobody reads while the worker logs a line per
job fills up and freezes the worker (its leases then run out)."""


def _spawn(env: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [CLI, "worker", APP, *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    _ERR[proc.pid] = err
    return proc


def _stderr(proc: subprocess.Popen[bytes]) -> str:
    err = _ERR[proc.pid]
    err.seek(0)
    return err.read().decode(errors="replace")


def _lines(env: dict[str, str]) -> list[list[str]]:
    path = Path(env["QC_TEST_LOG"])
    return [ln.split() for ln in path.read_text().splitlines()] if path.exists() else []


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    err = _ERR.pop(proc.pid, None)
    if err is not None:
        err.close()


def test_three_workers_drain_2000_jobs_each_exactly_once(env: dict[str, str]) -> None:
    q = Queue(env["QC_TEST_URL"])
    try:
        handles = q.enqueue_many("record", [(i,) for i in range(2000)], allow_unregistered=True)
        workers = [_spawn(env, "--burst") for _ in range(3)]
        try:
            for w in workers:
                w.wait(timeout=120)
                assert w.returncode == 0, _stderr(w)[-2000:]
        finally:
            for w in workers:
                _stop(w)
        runs = Counter(int(p[1]) for p in _lines(env) if p[0] == "record")
        assert set(runs) == set(range(2000))
        assert max(runs.values()) == 1
        assert len({p[3] for p in _lines(env)}) >= 2  # the work was shared
        assert q.storage().count_pending(["default"], 60_000) == 0
        assert q.job(handles[1999].id).status() is JobState.SUCCEEDED
    finally:
        q.close()


def test_sigkilled_worker_job_is_reaped_on_the_cluster(env: dict[str, str]) -> None:
    q = Queue(env["QC_TEST_URL"])
    a = _spawn(env, "--lease", "1", "--reap-interval", "0.2")
    b: subprocess.Popen[bytes] | None = None
    try:
        handle = q.enqueue(
            "hang_first", args=("x",), max_retries=2, retry_backoff="10ms", allow_unregistered=True
        )
        end = time.monotonic() + 30
        while not any(p[0] == "hang_first" for p in _lines(env)):
            assert time.monotonic() < end, "the first attempt never started"
            time.sleep(0.05)
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        b = _spawn(env, "--lease", "1", "--reap-interval", "0.2")
        assert handle.result(timeout=30) == "x"
        attempts = handle.attempts()
        assert [r.outcome for r in attempts] == [Outcome.LOST, Outcome.SUCCEEDED]
        assert attempts[0].reason == "lease_expired"
    finally:
        _stop(a)
        if b is not None:
            _stop(b)
        q.close()


def test_a_worker_started_while_the_cluster_node_is_down_waits_for_it(tmp_path: Path) -> None:
    """SPEC §10 (storage unreachable: the worker retries with backoff, no crash loop) at
    start-up: a burst worker spawned while the node its URL names is down logs the outage,
    keeps trying, and runs the job stored before the outage once the node is back."""
    aof = ["--appendonly", "yes", "--appendfsync", "always"]
    cluster = start_redis_cluster(masters=1, extra_args=aof)
    nodes = list(cluster.nodes)
    url = f"{cluster.url(prefix='late')}&socket_connect_timeout=0.5"
    env = dict(os.environ, QC_TEST_URL=url, QC_TEST_LOG=str(tmp_path / "log"))
    env["PYTHONPATH"] = str(ROOT)
    worker: subprocess.Popen[bytes] | None = None
    try:
        q = Queue(url)
        try:
            handle = q.enqueue("record", args=(7,), allow_unregistered=True)
        finally:
            q.close()
        node = nodes[0]
        back = threading.Thread(target=lambda: nodes.__setitem__(0, restart_node(node, 3.0, aof)))
        back.start()
        end = time.monotonic() + 15
        while node.process.poll() is None:
            assert time.monotonic() < end, "the node did not stop"
            time.sleep(0.02)
        worker = _spawn(env, "--burst")
        back.join(60)
        assert worker.wait(timeout=90) == 0, _stderr(worker)[-2000:]
        err = _stderr(worker)
        assert "storage unavailable" in err and "storage available again" in err, err[-2000:]
        assert [p[:2] for p in _lines(env)] == [["record", "7"]]
        q = Queue(url)
        try:
            assert q.job(handle.id).status() is JobState.SUCCEEDED
        finally:
            q.close()
    finally:
        if worker is not None:
            _stop(worker)
        for n in nodes:
            stop_redis_server(n)
        stop_redis_cluster(cluster)
