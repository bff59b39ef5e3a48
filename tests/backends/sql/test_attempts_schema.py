"""Schema step 8: a running attempt lives on its job row, its record is written once at
the end; a database made by version 7 (open record inserted at claim) keeps working."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from backends.sql import SQLStorage
from backends.sql.schema import SCHEMA_VERSION
from queue_core.records.jobs import Outcome
from queue_core.testing import SEC, T0
from queue_core.testing.fixtures import LEASE, claim_one, complete_end, enqueue_one


def _downgrade_to_7(path: Path, job_id: str, started_at: int) -> None:
    """What version 7 stored for a running attempt: an open qc_attempts row."""
    raw = sqlite3.connect(path)
    raw.execute(
        "INSERT INTO qc_attempts (job_id, number, worker_id, started_at) VALUES (?, 1, 'w', ?)",
        (job_id, started_at),
    )
    raw.execute("UPDATE qc_meta SET value = '7' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()


def test_claim_writes_no_attempt_row_and_finish_writes_one(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    storage = SQLStorage(f"sqlite:///{path}")
    try:
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0 + SEC, worker_id="w")
        raw = sqlite3.connect(path)
        assert raw.execute("SELECT count(*) FROM qc_attempts").fetchone() == (0,)
        assert [a.worker_id for a in storage.list_attempts(job_id)] == ["w"]
        assert storage.finish([complete_end(got.ref)], now=T0 + 2 * SEC) == [True]
        rows = raw.execute("SELECT number, worker_id, started_at, outcome FROM qc_attempts")
        assert rows.fetchall() == [(1, "w", T0 + SEC, "succeeded")]
        raw.close()
    finally:
        storage.close()


def test_a_version_7_running_attempt_is_finished_once(tmp_path: Path) -> None:
    path = tmp_path / "v7.db"
    first = SQLStorage(f"sqlite:///{path}")
    job_id = enqueue_one(first)
    got = claim_one(first, now=T0 + SEC, worker_id="w")
    first.close()
    _downgrade_to_7(path, job_id, T0 + SEC)
    storage = SQLStorage(f"sqlite:///{path}")
    try:
        assert [a.number for a in storage.list_attempts(job_id)] == [1]
        assert storage.schema_version() == SCHEMA_VERSION >= 8
        assert storage.finish([complete_end(got.ref)], now=T0 + 2 * SEC) == [True]
        attempts = storage.list_attempts(job_id)
        assert [(a.number, a.outcome) for a in attempts] == [(1, Outcome.SUCCEEDED)]
        assert storage.claim("w", ["default"], 1, LEASE, now=T0 + 3 * SEC) == []
    finally:
        storage.close()
