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
from queue_core.testing import T0, new_job


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
