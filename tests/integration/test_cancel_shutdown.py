"""Issue 6 end to end: cancellation and graceful shutdown through the real worker.

Real SQLite files; cancellation runs a worker in a thread of the test process (its
process-isolated bodies in real child process groups); shutdown sends real SIGTERMs to
worker subprocesses (``python -c`` and the ``queue-core worker`` console script).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_core import JobCancelled, JobHandle, JobState, Outcome, Queue
from queue_core.rules.outcomes import MAX_HELD_REFUNDS
from tests.integration.helpers.timeout_app import (
    FLOWS,
    build,
    group_alive,
    started,
    wait_for,
    worker_thread,
)

ROOT = Path(__file__).resolve().parents[2]
SLACK = 2.0
LEASE = 3.0
"""Seconds; the worker renews every LEASE / 3 and learns of cancel requests then."""


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.fixture
def queue(url: str) -> Iterator[Queue]:
    q = build(url, lease=LEASE)
    yield q
    q.close()


@pytest.fixture
def markers(tmp_path: Path) -> str:
    path = tmp_path / "markers"
    path.mkdir()
    return str(path)


# --------------------------------------------------------------------------- cancellation


def test_cancel_queued_job_ends_it_at_once(queue: Queue, markers: str) -> None:
    by_handle = queue.enqueue("sleep_thread", args=(markers, 0.0))
    by_queue = queue.enqueue("sleep_thread", args=(markers, 0.0))
    assert by_handle.cancel() is JobState.CANCELLED
    assert queue.cancel(by_queue.id) is JobState.CANCELLED
    for job in (by_handle, by_queue):
        assert job.status() is JobState.CANCELLED
        with pytest.raises(JobCancelled):
            job.result(timeout=1)
    # a worker never runs them
    queue.run_worker(burst=True, reap_interval=0.2, install_signal_handlers=False)
    assert by_handle.attempts() == []
    assert by_queue.attempts() == []
    assert not list(Path(markers).iterdir())
    assert queue.dead_letters() == []


@pytest.mark.parametrize(
    ("task_name", "mode"),
    [
        ("sleep_async", "async"),
        ("sleep_process", "process"),
        ("poll_cancelled", "thread"),
    ],
)
def test_cancel_running_job_stops_it_without_retry(
    queue: Queue, markers: str, task_name: str, mode: str
) -> None:
    args: tuple[object, ...] = (markers,) if task_name == "poll_cancelled" else (markers, 60.0)
    job = queue.enqueue(task_name, args=args)  # max_retries=3, backoff 0.5 s
    with worker_thread(queue, slots=1) as worker:
        _pid, pgid = wait_for(lambda: started(markers), 20, "the body started")
        asked = time.monotonic()
        assert job.cancel() is JobState.RUNNING  # a running job is asked to stop
        wait_for(lambda: job.status() is JobState.CANCELLED, LEASE / 3 + 0.5 + SLACK + 3)
        took = time.monotonic() - asked
        assert took <= LEASE / 3 + 0.5 + SLACK, took
        if mode == "process":
            # killed: the child's whole process group is gone
            wait_for(lambda: not group_alive(pgid), 0.5 + SLACK, "the process group gone")
            with pytest.raises(ProcessLookupError):
                os.killpg(pgid, 0)
        if mode == "thread":
            assert Path(markers, "saw-cancel").read_text() == "yes"
        wait_for(lambda: worker.stats()["running"] == 0, 5, "the slot freed")
        time.sleep(0.8)  # past the retry backoff: nothing is retried
        assert started(markers, 2) is None
    with pytest.raises(JobCancelled):
        job.result(timeout=1)
    info = job.info()
    assert info.state is JobState.CANCELLED
    assert info.attempts == 1
    (record,) = job.attempts()
    assert record.outcome is Outcome.CANCELLED
    assert record.mode == mode
    assert queue.dead_letters() == []


# --------------------------------------------------------------------------- shutdown


def _env(url: str) -> dict[str, str]:
    return dict(os.environ, QC_TEST_URL=url, QC_TEST_LEASE=str(LEASE), PYTHONPATH=str(ROOT))


def _log(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///")).with_name("worker.log")


def _exited(proc: subprocess.Popen[bytes], url: str) -> None:
    """Wait for a clean exit; show the worker's stderr if it was not clean."""
    code = proc.wait(15)
    assert code == 0, f"worker exited with {code}:\n{_log(url).read_text()[-4000:]}"


def _python_worker(url: str, grace: float, prefetch: int | None = None) -> subprocess.Popen[bytes]:
    code = (
        "import os\n"
        "from tests.integration.helpers.timeout_app import build\n"
        "q = build(os.environ['QC_TEST_URL'], lease=3)\n"
        f"q.run_worker(slots=1, reap_interval=0.2, shutdown_grace={grace}, prefetch={prefetch})\n"
    )
    return _spawn([sys.executable, "-c", code], url)


def _console_worker(url: str) -> subprocess.Popen[bytes]:
    script = Path(sys.executable).with_name("queue-core")
    return _spawn(
        [
            str(script),
            "worker",
            "tests.integration.helpers.timeout_app:app",
            "--slots",
            "1",
            "--reap-interval",
            "0.2",
            "--log-level",
            "WARNING",
        ],
        url,
    )


def _spawn(argv: list[str], url: str) -> subprocess.Popen[bytes]:
    with _log(url).open("ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            argv, cwd=ROOT, env=_env(url), stdout=subprocess.DEVNULL, stderr=log
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def test_sigterm_releases_long_attempt_then_another_worker_finishes_it(
    url: str, queue: Queue, markers: str
) -> None:
    job = queue.enqueue("sleep_first", args=(markers, 60.0))  # attempt 1 sleeps 60 s
    worker = _python_worker(url, grace=0.5, prefetch=0)  # claims for its free slot only
    try:
        wait_for(lambda: started(markers), 20, "attempt 1 started")
        waiting = queue.enqueue("quick", args=("waiting",))  # the only slot is busy
        time.sleep(0.3)
        worker.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        _exited(worker, url)
        # grace 0.5 s, then the release is written and the worker exits
        assert time.monotonic() - t0 <= 0.5 + SLACK + 2
    finally:
        _stop(worker)
    # it stopped claiming: the waiting job was never taken
    assert waiting.status() is JobState.QUEUED
    assert waiting.attempts() == []
    (released,) = job.attempts()
    assert released.outcome is Outcome.LOST
    assert released.reason == "worker_shutdown"
    assert released.mode == "thread"
    assert job.status() is JobState.QUEUED
    # another worker runs it (and the waiting one) to success
    with worker_thread(queue, slots=2) as other:
        assert job.result(timeout=15) == "done on attempt 2"
        assert waiting.result(timeout=15) == "ok waiting"
    first, second = job.attempts()
    assert second.outcome is Outcome.SUCCEEDED
    assert second.worker_id == other.id
    assert first.worker_id != other.id


def _holding_worker(
    url: str, queue: Queue, markers: str
) -> tuple[subprocess.Popen[bytes], JobHandle, JobHandle]:
    """A worker of one slot running a 60 s job and holding a ``quick`` one (one attempt)
    claimed ahead of it: (the worker, the running job, the held job)."""
    job = queue.enqueue("sleep_first", args=(markers, 60.0))  # holds the only slot
    worker = _python_worker(url, grace=5.0)  # prefetch: as many as its slots (1)
    try:
        wait_for(lambda: started(markers), 20, "attempt 1 started")
        held = queue.enqueue("quick", args=("held",))  # max_retries=0: one attempt
        wait_for(lambda: held.status() is JobState.RUNNING, 20, "the job is held")
    except BaseException:
        _stop(worker)
        raise
    return worker, job, held


def test_sigterm_gives_a_prefetched_job_back_at_once_without_spending_an_attempt(
    url: str, queue: Queue, markers: str
) -> None:
    worker, job, held = _holding_worker(url, queue, markers)
    try:
        worker.send_signal(signal.SIGTERM)
        # given back at the stop, before the running attempt's 5 s grace ends
        wait_for(lambda: held.status() is JobState.QUEUED, 4.0, "the held job given back")
        assert job.status() is JobState.RUNNING
        _exited(worker, url)
    finally:
        _stop(worker)
    # SPEC §8: given back unstarted -- no attempt counted, none recorded
    assert held.attempts() == [] and held.info().attempts == 0
    with worker_thread(queue, slots=2):
        assert held.result(timeout=15) == "ok held"  # its one attempt was not spent
        assert job.result(timeout=15) == "done on attempt 2"


def test_a_sigkilled_workers_prefetched_job_runs_again_without_spending_an_attempt(
    url: str, queue: Queue, markers: str
) -> None:
    """SPEC §8: a job held ahead of a free slot by a worker that is killed never ran; the
    reaper queues it again with its one attempt whole, not dead-lettered
    ``retries_exhausted`` -- and the loss is on record."""
    worker, job, held = _holding_worker(url, queue, markers)
    try:
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
    finally:
        _stop(worker)
    with worker_thread(queue, slots=2):  # reaps both once their leases expire
        assert held.result(timeout=LEASE + 15) == "ok held"
        assert job.result(timeout=15) == "done on attempt 2"
    lost, ran = held.attempts()
    assert (lost.outcome, lost.reason) == (Outcome.LOST, "lease_expired")
    assert ran.outcome is Outcome.SUCCEEDED
    assert held.info().max_attempts == 2  # the held attempt was given back to its budget


def test_a_job_that_kills_its_worker_as_it_starts_from_held_is_dead_lettered(
    url: str, queue: Queue, markers: str
) -> None:
    """SPEC §5 with prefetch: a held job's start reaches storage a little after its body
    starts, so a body that kills its worker at once may be reaped as held, unspent; such
    refunds are bounded (``MAX_HELD_REFUNDS``), so the job still ends dead-lettered
    instead of killing workers for ever."""
    poison = queue.enqueue("kill_worker", args=(markers,))  # max_retries=0: one attempt
    kills = 0
    while poison.status() is not JobState.DEAD and kills <= MAX_HELD_REFUNDS:
        # a job of higher priority holds the only slot, so the poison is claimed ahead
        # (once reaped) and starts from being held when that job ends
        queue.enqueue("sleep_thread", args=(markers, 1.5), priority=10)
        worker = _python_worker(url, grace=5.0)
        try:
            assert worker.wait(30) == -signal.SIGKILL  # the poison killed it
        finally:
            _stop(worker)
        kills += 1
        with worker_thread(queue, queues=["elsewhere"]):  # reaps, never runs the poison
            wait_for(lambda: poison.status() is not JobState.RUNNING, LEASE + 10, "reaped")
    assert poison.status() is JobState.DEAD and poison.info().reason == "retries_exhausted"
    attempts = poison.attempts()
    assert len(attempts) == kills <= MAX_HELD_REFUNDS + 1
    assert {(a.outcome, a.reason) for a in attempts} == {(Outcome.LOST, "lease_expired")}


def test_sigterm_stops_a_process_isolated_attempt_group(
    url: str, queue: Queue, markers: str
) -> None:
    job = queue.enqueue("sleep_process", args=(markers, 60.0))
    worker = _python_worker(url, grace=0.5)
    try:
        _pid, pgid = wait_for(lambda: started(markers), 30, "the child started")
        worker.send_signal(signal.SIGTERM)
        _exited(worker, url)
    finally:
        _stop(worker)
    # no child outlives the worker
    wait_for(lambda: not group_alive(pgid), 0.5 + SLACK, "the child's process group gone")
    (released,) = job.attempts()
    assert released.outcome is Outcome.LOST
    assert released.reason == "worker_shutdown"
    assert released.mode == "process"
    assert job.status() is JobState.QUEUED


def test_sigterm_lets_a_short_attempt_finish_within_the_grace(
    url: str, queue: Queue, markers: str
) -> None:
    job = queue.enqueue("sleep_first", args=(markers, 1.0))  # attempt 1 sleeps 1 s
    worker = _console_worker(url)  # default grace: 30 s
    try:
        wait_for(lambda: started(markers), 20, "attempt 1 started")
        worker.send_signal(signal.SIGTERM)
        _exited(worker, url)
    finally:
        _stop(worker)
    assert job.result(timeout=1) == "done on attempt 1"
    (record,) = job.attempts()
    assert record.outcome is Outcome.SUCCEEDED
    assert record.mode == "thread"


def _logged_worker(url: str, grace: float) -> subprocess.Popen[bytes]:
    """``queue-core worker`` at INFO (its attempt-end lines go to the log file)."""
    script = Path(sys.executable).with_name("queue-core")
    argv = [
        str(script),
        "worker",
        "tests.integration.helpers.timeout_app:app",
        "--slots",
        "1",
        "--reap-interval",
        "0.2",
        "--shutdown-grace",
        str(grace),
        "--log-level",
        "INFO",
    ]
    return _spawn(argv, url)


def _sigterm_after_start(worker: subprocess.Popen[bytes], url: str, markers: str) -> None:
    try:
        wait_for(lambda: started(markers), 30, "attempt 1 started")
        worker.send_signal(signal.SIGTERM)
        _exited(worker, url)
    finally:
        _stop(worker)


def test_a_deploy_never_dead_letters_a_job_without_retries(
    url: str, queue: Queue, markers: str
) -> None:
    # SPEC §4 "Deploys lose nothing": 0 retries, still running when the 1 s grace ends
    job = queue.enqueue("sleep_first_no_retry", args=(markers, 60.0))
    _sigterm_after_start(_logged_worker(url, grace=1.0), url, markers)
    assert job.status() is JobState.QUEUED
    assert queue.dead_letters() == []
    assert job.info().max_attempts == 2  # the released attempt spent none of the budget
    log = _log(url).read_text()
    [line] = [x for x in log.splitlines() if job.id in x]  # one line says it all
    assert "lost (worker_shutdown)" in line and "released for retry" in line
    assert "spends no attempt" in line and "dead-letter" not in line
    with worker_thread(queue, slots=1):
        assert job.result(timeout=15) == "done on attempt 2"
    first, second = job.attempts()
    assert (first.outcome, first.reason) == (Outcome.LOST, "worker_shutdown")
    assert second.outcome is Outcome.SUCCEEDED


def test_a_deploy_never_fails_a_flow_step_without_retries(
    url: str, queue: Queue, markers: str
) -> None:
    execution = FLOWS[id(queue)].start({"markers": markers, "seconds": 60.0})
    _sigterm_after_start(_logged_worker(url, grace=1.0), url, markers)
    assert execution.status().value == "running"
    with worker_thread(queue, slots=1):
        assert execution.result(timeout=20) == {
            "fetch": "done on attempt 2",
            "report": "reported on attempt 1",
        }
    fetch = next(s for s in execution.steps() if s.step_id == "fetch")
    assert [(a.outcome, a.reason) for a in fetch.attempts] == [
        (Outcome.LOST, "worker_shutdown"),
        (Outcome.SUCCEEDED, None),
    ]
