"""An idle SQL worker's wait ends when the next delayed job falls due: ``next_due``, the
earliest ready time after ``now`` of the queues' queued jobs, read with an explicit
``now`` on both dialects, and its plans (an index skip scan, never a table scan)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from backends.sql import SQLStorage
from backends.sql.queries import load
from backends.sql.wakeup import due_in
from queue_core.records.control import PauseKind
from queue_core.testing import LEASE, SEC, T0, claim_one, new_job


def _next_due(storage: SQLStorage, queues: list[str], now: int) -> Any:
    with storage.store.stmt() as cur:
        r = cur.execute(
            storage.store.q["next_due"], {"queues": storage.store.array(queues), "now": now}
        ).fetchone()
    return r["due"], r["now_ms"]


def test_next_due_is_the_earliest_ready_time_after_now_of_the_queues(url: str) -> None:
    storage = SQLStorage(url)
    try:
        storage.enqueue(
            [
                new_job(priority=1, delay_ms=500),
                new_job(priority=7, delay_ms=900),
                new_job(priority=0, delay_ms=200),
                new_job(priority=3),  # ready now: not a due time to wait for
                new_job(queue="other", delay_ms=50),
                new_job(task_name="tests.due_paused", priority=2, delay_ms=100),
            ],
            now=T0,
        )
        assert _next_due(storage, ["default"], T0) == (T0 + 100, T0)
        storage.pause(PauseKind.TASK, "tests.due_paused", now=T0)  # set aside: not waited for
        assert _next_due(storage, ["default"], T0) == (T0 + 200, T0)
        assert _next_due(storage, ["default", "other"], T0) == (T0 + 50, T0)
        assert _next_due(storage, ["default"], T0 + 200) == (T0 + 500, T0 + 200)
        assert _next_due(storage, ["default"], T0 + 900) == (None, T0 + 900)
        assert _next_due(storage, ["empty"], T0) == (None, T0)
        assert due_in(T0 + 250, T0) == 0.25
        assert due_in(None, T0) is None
        assert due_in("yesterday", T0) is None  # a corrupt ready time (SQLite)
    finally:
        storage.close()


def test_next_due_waits_for_a_reaped_job_in_its_backoff_not_for_its_kept_place(url: str) -> None:
    """A reaped job keeps its place in line (``place_at``, before now) while its backoff
    (``run_at``) is ahead: the wait is for its ``run_at``, neither its place nor never."""
    storage = SQLStorage(url)
    try:
        job = new_job(max_attempts=3, lost_delay_ms=5 * SEC)
        storage.enqueue([job, new_job(delay_ms=60 * SEC)], now=T0)
        assert claim_one(storage, now=T0 + SEC).id == job.id
        reaped_at = T0 + SEC + LEASE
        assert [r.job_id for r in storage.reap(now=reaped_at)] == [job.id]
        assert _next_due(storage, ["default"], reaped_at) == (reaped_at + 5 * SEC, reaped_at)
        after = reaped_at + 5 * SEC  # its backoff passed: the delayed job is next
        assert _next_due(storage, ["default"], after) == (T0 + 60 * SEC, after)
    finally:
        storage.close()


def _next_due_steps(path: Path, delayed: int) -> int:
    """SQLite virtual machine steps (in hundreds) of one ``next_due`` read with
    ``delayed`` delayed jobs of one priority queued (a count, not a time)."""
    s = SQLStorage(f"sqlite:///{path}")
    try:
        s.enqueue([new_job(delay_ms=10 * SEC + i) for i in range(delayed)], now=T0)
    finally:
        s.close()
    conn = sqlite3.connect(path)
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    try:
        conn.set_progress_handler(count, 100)
        params = {"queues": json.dumps(["default"]), "now": T0}
        (due, _now) = conn.execute(load("sqlite")["next_due"], params).fetchone()
        assert due == T0 + 10 * SEC
    finally:
        conn.close()
    return steps


def test_next_due_does_not_walk_the_delayed_jobs_on_sqlite(tmp_path: Path) -> None:
    """The read seeks the first place after now: it costs the same with 50 or 5,000
    delayed jobs (it walked every one of them, 13 ms with 100,000)."""
    few = _next_due_steps(tmp_path / "few.db", 50)
    many = _next_due_steps(tmp_path / "many.db", 5_000)
    assert many <= few + 2, (few, many)


def test_next_due_and_the_ready_reads_search_the_ready_index_on_sqlite(tmp_path: Path) -> None:
    s = SQLStorage(f"sqlite:///{tmp_path / 'q.db'}")
    s.migrate()
    s.close()
    sqlite = load("sqlite")
    conn = sqlite3.connect(tmp_path / "q.db")
    params = {"queues": json.dumps(["a", "b"]), "now": T0, "horizon_ms": 0}
    try:
        for name in ("next_due", "ready_probe", "count_pending"):
            plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sqlite[name], params)]
            reads = [p for p in plan if "qc_jobs" in p]
            assert reads and all("ix_qc_jobs_" in p for p in reads), (name, plan)
            if name != "count_pending":  # (its running count uses the lease index)
                assert all("ix_qc_jobs_ready" in p for p in reads), (name, plan)
    finally:
        conn.close()


def test_next_due_searches_the_ready_index_on_postgresql(postgres_url: str) -> None:
    storage = SQLStorage(postgres_url)
    try:
        storage.enqueue([new_job(delay_ms=1000)], now=T0)
        with storage.store.stmt() as cur:
            cur.execute("SET enable_seqscan = off")  # a tiny table: show the index is usable
            sql = "EXPLAIN " + storage.store.q["next_due"]
            params = {"queues": storage.store.array(["default"]), "now": T0}
            plan = "\n".join(r["QUERY PLAN"] for r in cur.execute(sql, params).fetchall())
            cur.execute("RESET enable_seqscan")
        assert "ix_qc_jobs_ready" in plan and "Seq Scan on qc_jobs" not in plan, plan
    finally:
        storage.close()


def _next_due_buffers(url: str, queue: str, delayed: int) -> int:
    """Shared buffers one PostgreSQL ``next_due`` read of ``queue`` touches with ``delayed``
    delayed jobs of one priority queued there (``EXPLAIN (ANALYZE, BUFFERS)``: a count,
    not a time)."""
    storage = SQLStorage(url)
    try:
        jobs = [new_job(queue=queue, delay_ms=10 * SEC + i) for i in range(delayed)]
        storage.enqueue(jobs, now=T0)
        with storage.store.stmt() as cur:
            cur.execute("ANALYZE qc_jobs")
            sql = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + storage.store.q["next_due"]
            params = {"queues": storage.store.array([queue]), "now": T0}
            plan = cur.execute(sql, params).fetchone()["QUERY PLAN"][0]["Plan"]
        assert _next_due(storage, [queue], T0) == (T0 + 10 * SEC, T0)
    finally:
        storage.close()
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def test_next_due_does_not_walk_the_delayed_jobs_on_postgresql(postgres_url: str) -> None:
    """As on SQLite: the same buffers with 50 or 5,000 delayed jobs (it walked them all)."""
    few = _next_due_buffers(postgres_url, "few", 50)
    many = _next_due_buffers(postgres_url, "many", 5_000)
    assert many <= few + 10, (few, many)
