"""Real subprocess workers on a real SQLite file: SIGKILL mid-job, SIGTERM shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_core import JobHandle, JobState, Outcome, Queue

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.fixture
def producer(url: str) -> Iterator[Queue]:
    q = Queue(url, lease=2)
    q.migrate()
    yield q
    q.close()


def _enqueue(q: Queue, tmp_path: Path, seconds: float) -> JobHandle:
    # by name, as a producer that does not import the task module would
    return q.enqueue(
        "slow_once",
        args=(str(tmp_path), seconds),
        max_retries=2,
        retry_backoff="10ms",
        allow_unregistered=True,
    )


def _spawn(url: str, *extra: str, grace: str = "5") -> subprocess.Popen[bytes]:
    env = dict(os.environ, QC_TEST_URL=url, QC_TEST_GRACE=grace, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.helpers.kill_app", *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for(pred: object, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def test_sigkilled_worker_job_runs_again_on_another_worker(
    url: str, producer: Queue, tmp_path: Path
) -> None:
    job = _enqueue(producer, tmp_path, 30.0)
    first = _spawn(url)
    second = None
    try:
        _wait_for(lambda: list(tmp_path.glob("attempt-1-*")), 15)
        first.send_signal(signal.SIGKILL)
        first.wait(5)
        killed_at = time.monotonic()
        second = _spawn(url)
        assert job.result(timeout=15) == "done on attempt 2"
        # lease (2 s) + reap interval (0.5 s), plus the new worker's start-up
        assert time.monotonic() - killed_at < 2 + 0.5 + 5
    finally:
        _stop(first)
        if second is not None:
            _stop(second)
    records = job.attempts()
    assert [r.outcome for r in records] == [Outcome.LOST, Outcome.SUCCEEDED]
    assert records[0].reason == "lease_expired"
    assert records[0].worker_id != records[1].worker_id


def test_sigterm_releases_running_attempt_for_retry(
    url: str, producer: Queue, tmp_path: Path
) -> None:
    job = _enqueue(producer, tmp_path, 30.0)
    worker = _spawn(url, grace="0.3")
    try:
        _wait_for(lambda: list(tmp_path.glob("attempt-1-*")), 15)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(10) == 0
    finally:
        _stop(worker)
    records = job.attempts()
    assert [r.outcome for r in records] == [Outcome.LOST]
    assert records[0].reason == "worker_shutdown"
    assert job.status() is JobState.QUEUED
    # a fresh worker picks it up and finishes it
    again = _spawn(url, "--burst")
    try:
        assert again.wait(20) == 0
    finally:
        _stop(again)
    assert job.result(timeout=1) == "done on attempt 2"


def test_sigterm_lets_short_attempt_finish(url: str, producer: Queue, tmp_path: Path) -> None:
    job = _enqueue(producer, tmp_path, 0.5)
    worker = _spawn(url, grace="10")
    try:
        _wait_for(lambda: list(tmp_path.glob("attempt-1-*")), 15)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(10) == 0
    finally:
        _stop(worker)
    assert job.result(timeout=1) == "done on attempt 1"
    assert [r.outcome for r in job.attempts()] == [Outcome.SUCCEEDED]
