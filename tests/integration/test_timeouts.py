"""Issue 6 end to end: timeouts, heartbeats and schedule-to-start through the real worker.

Real SQLite files, real child processes and signals; the worker runs in a thread of the
test process (its process-isolated bodies run in real child process groups).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_core import JobState, Outcome, Queue
from tests.integration.helpers.timeout_app import (
    build,
    group_alive,
    started,
    wait_for,
    worker_thread,
)

SLACK = 2.0
"""Extra seconds allowed on a loaded, shared 2-core machine."""


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Queue]:
    q = build(f"sqlite:///{tmp_path / 'jobs.db'}", lease=3)
    yield q
    q.close()


@pytest.fixture
def markers(tmp_path: Path) -> str:
    path = tmp_path / "markers"
    path.mkdir()
    return str(path)


# --------------------------------------------------------------------------- process isolation


@pytest.mark.parametrize(
    ("task_name", "needs_sigkill"), [("spin", False), ("spin_ignoring_sigterm", True)]
)
def test_process_timeout_kills_the_group_and_frees_the_slot(
    queue: Queue, markers: str, task_name: str, needs_sigkill: bool
) -> None:
    # timeout=1, isolation="process", kill_grace=0.5; `while True: pass`
    with worker_thread(queue, slots=1) as worker:
        # the timeout counts from the claim, a cold child's start-up included: warm it first
        warm = queue.enqueue("quick", args=("warm",), isolation="process")
        assert warm.result(timeout=30) == "ok warm"
        spinning = queue.enqueue(task_name, args=(markers,))
        after = queue.enqueue("quick", args=("after",), isolation="process")
        _pid, pgid = wait_for(lambda: started(markers), 20, "the spinning body started")
        began = time.monotonic()
        assert group_alive(pgid)
        wait_for(lambda: not group_alive(pgid), 1 + 0.5 + SLACK + 3, "the process group gone")
        gone_after = time.monotonic() - began
        assert gone_after <= 1 + 0.5 + SLACK, gone_after
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)
        # the only slot is free again: the next job runs on it and succeeds
        assert after.result(timeout=10) == "ok after"
        assert worker.stats()["slots"] == 1
    records = spinning.attempts()
    assert len(records) == 1
    first = records[0]
    assert first.outcome is Outcome.TIMED_OUT
    assert first.reason == "timeout"
    assert first.mode == "process"
    assert first.error_class == "TimeoutError"
    assert first.started_at is not None and first.finished_at is not None
    assert 0.85 <= (first.finished_at - first.started_at).total_seconds() <= 1 + 0.5 + SLACK
    (done,) = after.attempts()
    assert done.outcome is Outcome.SUCCEEDED
    assert done.mode == "process"  # in a new child: the killed one is not reused
    assert done.worker_id == first.worker_id
    # it was claimed once the group was gone, past the spinning attempt's deadline
    assert done.started_at is not None
    assert (done.started_at - first.started_at).total_seconds() >= 0.85
    # max_retries=0: a timed-out attempt that used the budget dead-letters the job
    info = spinning.info()
    assert info.state is JobState.DEAD
    assert info.reason == "retries_exhausted"
    if needs_sigkill:
        assert gone_after >= 1 + 0.5 - 0.2  # SIGTERM was ignored: it took the grace


def test_crashed_child_is_recorded_with_its_exit_code_and_retried(
    queue: Queue, markers: str
) -> None:
    job = queue.enqueue("crash_first", args=(markers,))  # attempt 1: os._exit(3)
    with worker_thread(queue, slots=1):
        assert job.result(timeout=30) == "survived on attempt 2"
    first, second = job.attempts()
    assert first.outcome is Outcome.FAILED  # the body's own crash: a failed attempt
    assert first.reason == "process_died"
    assert first.mode == "process"
    assert first.message is not None and "exited with code 3" in first.message
    assert second.outcome is Outcome.SUCCEEDED
    pid1, pid2 = started(markers, 1), started(markers, 2)
    assert pid1 is not None and pid2 is not None and pid1[0] != pid2[0]  # a new child


# --------------------------------------------------------------------------- heartbeats


@pytest.mark.parametrize("task_name", ["beat_thread", "beat_async", "beat_process"])
def test_silent_attempt_heartbeat_timed_out_then_beating_attempt_succeeds(
    queue: Queue, markers: str, task_name: str
) -> None:
    # heartbeat=2.5: attempt 1 sleeps 20 s without a beat; attempt 2 beats every 0.2 s
    # for 2 s. One slot, so attempt 2 needs the slot the silent attempt 1 held.
    job = queue.enqueue(task_name, args=(markers, 20.0))
    t0 = time.monotonic()
    with worker_thread(queue, slots=1):
        assert job.result(timeout=15) == "beat on attempt 2"
    took = time.monotonic() - t0
    # 2.5 s of silence + 0.5 s backoff + 2 s of beats
    assert took < 2.5 + 0.5 + 2 + SLACK + 2, took
    first, second = job.attempts()
    assert first.outcome is Outcome.TIMED_OUT
    assert first.reason == "heartbeat_timeout"
    assert second.outcome is Outcome.SUCCEEDED
    mode = task_name.removeprefix("beat_")
    # a live worker judges the silence itself, so its record (mode, error) lands first
    assert first.mode == mode
    assert first.error_class == "TimeoutError"
    assert first.message == "attempt 1 sent no heartbeat for 2.5 s"
    assert second.mode == mode
    assert first.finished_at is not None and first.started_at is not None
    silent = (first.finished_at - first.started_at).total_seconds()
    assert 2.5 <= silent <= 2.5 + SLACK, silent  # at the bound, never before it
    assert second.started_at is not None and second.finished_at is not None
    assert (second.finished_at - second.started_at).total_seconds() >= 2.0
    if task_name == "beat_process":
        # the silent child was stopped, not left sleeping
        pid1 = started(markers, 1)
        assert pid1 is not None
        wait_for(lambda: not group_alive(pid1[1]), 5, "the silent child's group gone")


# --------------------------------------------------------------------------- schedule-to-start


def test_schedule_to_start_dead_letters_without_an_attempt(queue: Queue) -> None:
    job = queue.enqueue("quick", args=("late",), schedule_to_start=1)
    other = queue.enqueue("quick", args=("in time",))
    time.sleep(1.2)
    with worker_thread(queue, slots=2, reap_interval=0.2):
        wait_for(lambda: job.status() is JobState.DEAD, 10, "the late job dead-lettered")
        assert other.result(timeout=10) == "ok in time"
    info = job.info()
    assert info.state is JobState.DEAD
    assert info.reason == "schedule_to_start"
    assert info.attempts == 0
    assert job.attempts() == []
    (entry,) = queue.dead_letters(task_name="quick")
    assert entry.job_id == job.id
    assert entry.reason == "schedule_to_start"
    assert entry.attempts == []
    assert entry.args == ("late",)


# --------------------------------------------------------------------------- thread isolation


def test_thread_timeout_is_recorded_at_the_deadline_and_the_slot_reported_stuck(
    queue: Queue, markers: str
) -> None:
    # timeout=1, max_retries=1, backoff 0.5 s; attempt 1 sleeps 4 s in its thread
    job = queue.enqueue("stuck_thread", args=(markers, 4.0))
    with worker_thread(queue, slots=1, max_replacement_slots=1) as worker:
        wait_for(lambda: started(markers, 1), 10, "attempt 1 started")
        # at the deadline: recorded timed out, the slot reported stuck, a replacement opens
        stats = wait_for(
            lambda: (s := worker.stats())["stuck"] == 1 and s, 1 + SLACK + 1, "a stuck slot"
        )
        assert stats["running"] == 1
        assert stats["free"] == 1  # the replacement slot
        # retried on schedule, on the replacement slot, while attempt 1's thread still sleeps
        assert job.result(timeout=10) == "done on attempt 2"
        assert not Path(markers, "returned-1").exists()
        assert worker.stats()["stuck"] == 1
        # once the thread returns by itself, its slot is back and nothing else is recorded
        wait_for(lambda: Path(markers, "returned-1").exists(), 10, "attempt 1's thread returned")
        wait_for(lambda: worker.stats()["stuck"] == 0, 5, "the stuck slot released")
        assert worker.stats()["running"] == 0
        assert worker.stats()["free"] == 1
    first, second = job.attempts()
    assert first.outcome is Outcome.TIMED_OUT
    assert first.reason == "timeout"
    assert first.mode == "thread"
    assert first.started_at is not None and first.finished_at is not None
    # at the deadline, never before it (the reaper leaves the worker a margin after it)
    assert 1.0 <= (first.finished_at - first.started_at).total_seconds() <= 1 + SLACK
    assert second.outcome is Outcome.SUCCEEDED
    assert second.mode == "thread"
    assert second.started_at is not None
    gap = (second.started_at - first.finished_at).total_seconds()
    assert 0.45 <= gap <= 0.5 + SLACK, gap
    assert job.status() is JobState.SUCCEEDED


# --------------------------------------------------------------------------- worker default


def test_worker_isolation_default_applies_to_tasks_that_set_none(queue: Queue) -> None:
    # "quick" sets no isolation; "crash_first" sets isolation="process" itself
    with worker_thread(queue, slots=1):
        plain = queue.enqueue("quick", args=("t",))
        assert plain.result(timeout=30) == "ok t"
    with worker_thread(queue, slots=1, isolation="process"):
        isolated = queue.enqueue("quick", args=("p",))
        assert isolated.result(timeout=30) == "ok p"
        per_call = queue.enqueue("quick", args=("c",), isolation="thread")
        assert per_call.result(timeout=30) == "ok c"
    assert [a.mode for a in plain.attempts()] == ["thread"]
    assert [a.mode for a in isolated.attempts()] == ["process"]
    assert [a.mode for a in per_call.attempts()] == ["thread"]  # a per-call override wins
