"""Real worker subprocesses on a real redis-server: SIGKILL recovery. (The exactly-once
drain of four workers on Redis is ``tests/integration/test_multiworker.py``'s, which reads
every execution from the workers' log.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from queue_core import Outcome, Queue

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.integration.redis_workers_app:queue"
CLI = str(Path(sys.executable).parent / "queue-core")  # the installed console script


@pytest.fixture
def env(redis_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    e = dict(os.environ, QC_TEST_URL=redis_url, QC_TEST_LOG=str(tmp_path / "log"))
    e["PYTHONPATH"] = str(ROOT)
    yield e


def _producer(env: dict[str, str]) -> Queue:
    return Queue(env["QC_TEST_URL"])


def _spawn(env: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [CLI, "worker", APP, *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _lines(env: dict[str, str]) -> list[list[str]]:
    path = Path(env["QC_TEST_LOG"])
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines()]


def _wait_for(pred: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr:
        proc.stderr.close()


def test_sigkilled_worker_job_is_reaped_and_succeeds_elsewhere(env: dict[str, str]) -> None:
    q = _producer(env)
    a = _spawn(env, "--lease", "1", "--reap-interval", "0.2")
    b: subprocess.Popen[bytes] | None = None
    try:
        handle = q.enqueue(
            "hang_first", args=("x",), max_retries=2, retry_backoff="10ms", allow_unregistered=True
        )
        _wait_for(lambda: any(p[0] == "hang_first" for p in _lines(env)), 30)
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        b = _spawn(env, "--lease", "1", "--reap-interval", "0.2")
        assert handle.result(timeout=30) == "x"
        attempts = handle.attempts()
        assert [r.outcome for r in attempts] == [Outcome.LOST, Outcome.SUCCEEDED]
        assert attempts[0].reason == "lease_expired"
        pids = {p[3] for p in _lines(env)}
        assert str(a.pid) in pids and str(b.pid) in pids
    finally:
        _reap(a)
        if b is not None:
            _reap(b)
        q.close()
