"""Issue 14: ``cancel()`` of a running job reaches its body within 1 s on every backend.

One real worker subprocess per backend with a 30 s lease (so lease renewal, every 10 s,
cannot be what carries the cancel: the worker's half-second cancel poll does). An async
body, a process-isolated body and a thread body run at once; each is cancelled and must
be stopped (async: cancelled; process: its process group gone) or flagged (thread:
``ctx.cancelled`` seen) within 1 s of its ``cancel()``. (memory:// lives in one process:
its poll is tested on the manual clock in tests/unit/worker/test_presence_clock.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_core import JobState, Outcome, Queue
from tests.integration.helpers.timeout_app import build, group_alive, started, wait_for

ROOT = Path(__file__).resolve().parents[2]
LEASE = 30.0
BOUND = 1.0
BACKENDS = ["sqlite", "postgres", "redis", "redis_cluster", "sqs"]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def queue(url: str) -> Iterator[Queue]:
    q = build(url, lease=LEASE)
    yield q
    q.close()


@pytest.fixture
def worker(url: str, queue: Queue, tmp_path: Path) -> Iterator[Path]:
    code = (
        "import os\n"
        "from tests.integration.helpers.timeout_app import build\n"
        f"q = build(os.environ['QC_TEST_URL'], lease={LEASE})\n"
        "q.run_worker(slots=3, reap_interval=5, shutdown_grace=0.5)\n"
    )
    log = tmp_path / "worker.log"
    env = dict(os.environ, QC_TEST_URL=url, PYTHONPATH=str(ROOT))
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        yield log
    finally:
        proc.kill()
        proc.wait(10)


def _saw_cancel(markers: Path) -> bool:
    return (markers / "saw-cancel").exists()


def test_cancel_stops_async_process_and_thread_bodies_within_a_second(
    queue: Queue, worker: Path, tmp_path: Path
) -> None:
    dirs = {name: tmp_path / name for name in ("async", "process", "thread")}
    for d in dirs.values():
        d.mkdir()
    jobs = {
        "async": queue.enqueue("sleep_async", args=(str(dirs["async"]), 60.0)),
        "process": queue.enqueue("sleep_process", args=(str(dirs["process"]), 60.0)),
        "thread": queue.enqueue("poll_cancelled", args=(str(dirs["thread"]),)),
    }
    try:
        marks = {
            m: wait_for(lambda d=d: started(d), 60, f"the {m} body started")
            for m, d in dirs.items()
        }
    except AssertionError:
        raise AssertionError(worker.read_text()[-4000:]) from None
    _pid, pgid = marks["process"]
    stopped = {
        "async": lambda: jobs["async"].status() is JobState.CANCELLED,
        "process": lambda: not group_alive(pgid),
        "thread": lambda: _saw_cancel(dirs["thread"]),
    }
    took = {}
    for mode, job in jobs.items():
        asked = time.monotonic()
        assert job.cancel() is JobState.RUNNING
        wait_for(stopped[mode], BOUND + 5, f"the {mode} body stopped")
        took[mode] = time.monotonic() - asked
    assert all(t <= BOUND for t in took.values()), took
    for mode, job in jobs.items():
        wait_for(lambda job=job: job.status() is JobState.CANCELLED, 5, f"{mode} recorded")
        (record,) = job.attempts()
        assert (record.outcome, record.mode) == (Outcome.CANCELLED, mode)
