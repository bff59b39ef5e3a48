"""Pauses on the SQL backend beyond the contract: other storage objects (other workers)
see a pause or a resume at their next claim (the claim statements check the pauses'
version), and an idle worker's wait does not count paused jobs."""

from __future__ import annotations

from pathlib import Path

from backends.sql import SQLStorage
from queue_core.records.control import PauseKind
from queue_core.records.jobs import JobState
from queue_core.testing import LEASE, T0, new_job


def test_another_storage_object_sees_a_pause_at_its_next_claim(url: str) -> None:
    a, b = SQLStorage(url), SQLStorage(url)
    try:
        task = "tests.fresh_pause"
        a.enqueue([new_job(task_name=task) for _ in range(3)], now=T0)
        assert len(b.claim("w", ["default"], 1, LEASE, now=T0)) == 1  # b's cache: no pause
        assert a.pause(PauseKind.TASK, task, now=T0) is True  # b's cached pauses: stale
        assert b.claim("w", ["default"], 5, LEASE, now=T0 + 1) == []
        assert b.count_pending(["default"], 0, now=T0 + 1) == 1  # the running one
        assert a.resume(PauseKind.TASK, task) is True
        assert len(b.claim("w", ["default"], 5, LEASE, now=T0 + 2)) == 2
        a.pause(PauseKind.QUEUE, "default", now=T0)
        a.enqueue([new_job()], now=T0)
        assert b.claim("w", ["default"], 5, LEASE, now=T0 + 3) == []
    finally:
        a.close()
        b.close()


def test_an_idle_wait_does_not_count_paused_jobs(tmp_path: Path) -> None:
    storage = SQLStorage(f"sqlite:///{tmp_path / 'q.db'}")
    try:
        storage.pause(PauseKind.TASK, "tests.held")
        storage.pause(PauseKind.QUEUE, "held-queue")
        storage.enqueue([new_job(task_name="tests.held"), new_job(queue="held-queue")])
        assert storage.wait_for_jobs(["default", "held-queue"], 0.05) is False
        assert storage.wait_for_jobs(["held-queue"], 0.05) is False
        storage.enqueue([new_job()])
        assert storage.wait_for_jobs(["default"], 0.05) is True
    finally:
        storage.close()


def _held(storage: SQLStorage) -> dict[str, str | None]:
    """Job id -> ``qc_jobs.held`` of every queued job."""
    with storage.store.stmt() as cur:
        rows = cur.execute("SELECT id, held FROM qc_jobs WHERE state = 'queued'").fetchall()
    return {r["id"]: r["held"] for r in rows}


def test_a_paused_tasks_jobs_leave_the_ready_index_and_come_back_in_order(url: str) -> None:
    """Pausing a task sets its queued jobs aside (out of the claim's index); one enqueued
    later is set aside by the first claim that meets it; the resume puts every one back
    and they are claimed in their order; reads show them queued all along."""
    storage = SQLStorage(url)
    task = "tests.aside"
    try:
        before = [new_job(task_name=task) for _ in range(3)]
        storage.enqueue(before, now=T0)
        assert storage.pause(PauseKind.TASK, task, now=T0 + 1) is True
        assert _held(storage) == {j.id: f"task:{task}" for j in before}
        after, plain = new_job(task_name=task, priority=5), new_job()
        storage.enqueue([after, plain], now=T0 + 2)
        assert _held(storage)[after.id] is None  # not met by a claim yet
        assert [c.id for c in storage.claim("w", ["default"], 10, LEASE, now=T0 + 3)] == [plain.id]
        assert set(_held(storage).values()) == {f"task:{task}"}  # the claim set it aside
        queued = storage.list_jobs(state=JobState.QUEUED)
        assert {j.id for j in queued} == {j.id for j in [*before, after]}
        (stats,) = storage.stats(now=T0 + 3)
        assert (stats.ready, stats.running) == (4, 1)
        assert storage.resume(PauseKind.TASK, task) is True
        assert set(_held(storage).values()) == {None}
        got = storage.claim("w", ["default"], 10, LEASE, now=T0 + 4)
        assert [c.id for c in got] == [after.id] + [j.id for j in before]  # priority, then age
    finally:
        storage.close()


def test_a_claim_reads_past_more_paused_jobs_than_its_rounds(url: str) -> None:
    """Jobs of a paused task enqueued after the pause, ahead of a plain one, many times
    the claim's limit: the one claim sets them all aside and still claims the plain job."""
    storage = SQLStorage(url)
    try:
        storage.pause(PauseKind.TASK, "tests.many", now=T0)
        storage.enqueue([new_job(task_name="tests.many", priority=9) for _ in range(600)], now=T0)
        plain = new_job()
        storage.enqueue([plain], now=T0)
        assert [c.id for c in storage.claim("w", ["default"], 2, LEASE, now=T0 + 1)] == [plain.id]
        assert list(_held(storage).values()).count("task:tests.many") == 600
    finally:
        storage.close()


def test_a_paused_flows_queued_steps_are_set_aside_and_put_back(url: str) -> None:
    from queue_core.testing.suite._flows_base import make_execution, make_spec

    storage = SQLStorage(url)
    try:
        run = make_execution(make_spec({"a": []}, name="aside-flow"))
        storage.start_execution(run, now=T0)
        storage.pause(PauseKind.FLOW, "aside-flow", now=T0 + 1)
        assert set(_held(storage).values()) == {"flow:aside-flow"}
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 2) == []
        storage.resume(PauseKind.FLOW, "aside-flow")
        got = storage.claim("w", ["default"], 5, LEASE, now=T0 + 3)
        assert [c.execution_id for c in got] == [run.id]
    finally:
        storage.close()


def test_a_claim_sets_nothing_aside_for_a_pause_resumed_since_it_read_the_pauses(
    url: str,
) -> None:
    """A claim that met a job of a pause resumed meanwhile (its cached pauses are older)
    leaves it in the ready index: the resume's sweep is over, nothing would put it back."""
    storage = SQLStorage(url)
    try:
        job = new_job(task_name="tests.raced")
        storage.enqueue([job], now=T0)
        storage.pause(PauseKind.TASK, "tests.raced", now=T0)
        storage.resume(PauseKind.TASK, "tests.raced")
        with storage.store.tx() as cur:
            seq = cur.execute("SELECT seq FROM qc_jobs").fetchone()["seq"]
            assert storage.pauses.hold(cur, {"task:tests.raced": [seq]}) == [seq]
        assert _held(storage) == {job.id: None}
        assert [c.id for c in storage.claim("w", ["default"], 5, LEASE, now=T0 + 1)] == [job.id]
    finally:
        storage.close()


def test_a_claim_past_paused_jobs_takes_no_more_than_its_limit(url: str) -> None:
    """The reads that set jobs aside grow past the claim's limit: the claim still
    starts at most ``limit`` jobs, the first in order."""
    storage = SQLStorage(url)
    try:
        storage.pause(PauseKind.TASK, "tests.mixed", now=T0)
        jobs = [new_job(task_name="tests.mixed" if i % 3 else "tests.plain") for i in range(90)]
        storage.enqueue(jobs, now=T0)
        plain = [j.id for j in jobs if j.task_name == "tests.plain"]
        got = storage.claim("w", ["default"], 4, LEASE, now=T0 + 1)
        assert [c.id for c in got] == plain[:4]
        got = storage.claim("w", ["default"], 100, LEASE, now=T0 + 2)
        assert [c.id for c in got] == plain[4:]
    finally:
        storage.close()
