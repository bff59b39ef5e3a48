"""Flow control on the SQL backend beyond the contract: what a flow-controlled job carries
is kept through a dead letter's retry, prune forgets the debounce keys of the jobs it
deletes, and round-robin keys keep their turns while they have jobs, and only then."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from backends.sql import SQLStorage
from queue_core.records.jobs import NewJob
from queue_core.testing import LEASE, SEC, T0, complete_end, dead_end, new_job, retry_end

_MARKS = "concurrency_behavior, concurrency_group, debounce_key, debounce_ms, debounce_max_ms"


def _marks(path: Path, job_id: str) -> tuple[object, ...]:
    db = sqlite3.connect(path)
    try:
        return tuple(db.execute(f"SELECT {_MARKS} FROM qc_jobs WHERE id = ?", (job_id,)).fetchone())
    finally:
        db.close()


def test_retry_dead_replays_the_round_robin_and_debounce_fields(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    storage = SQLStorage(f"sqlite:///{path}")
    try:
        job = new_job(
            concurrency_behavior="round_robin",
            concurrency_group="tests.task",
            concurrency_key="tests.task:a",
            concurrency_limit=2,
            debounce_key="tests.task:k",
            debounce_ms=SEC,
            debounce_max_ms=10 * SEC,
        )
        storage.enqueue([job], now=T0)
        want = ("round_robin", "tests.task", "tests.task:k", SEC, 10 * SEC)
        assert _marks(path, job.id) == want
        (claimed,) = storage.claim("w", ["default"], 1, LEASE, now=T0 + SEC)
        assert storage.finish([dead_end(claimed.ref)], now=T0 + 2 * SEC) == [True]
        (dead,) = storage.list_dead()
        replay = storage.retry_dead(dead.id, now=T0 + 3 * SEC)
        assert _marks(path, replay) == want
    finally:
        storage.close()


def test_prune_forgets_the_debounce_key_of_a_deleted_job(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    storage = SQLStorage(f"sqlite:///{path}?retention=0")
    try:
        call = new_job(debounce_key="tests.task", debounce_ms=SEC, debounce_max_ms=10 * SEC)
        (got,) = storage.enqueue_debounced([call], now=T0)
        (claimed,) = storage.claim("w", ["default"], 1, LEASE, now=T0 + SEC)
        storage.finish([complete_end(claimed.ref)], now=T0 + 2 * SEC)
        assert storage.prune(now=T0 + 3 * SEC) == 1
        db = sqlite3.connect(path)
        try:
            assert db.execute("SELECT count(*) FROM qc_debounce").fetchone() == (0,)
        finally:
            db.close()
        assert got.job_id == call.id
    finally:
        storage.close()


def _rr_job(key: str) -> NewJob:
    return new_job(
        concurrency_behavior="round_robin",
        concurrency_group="tests.fair",
        concurrency_key=f"tests.fair:{key}",
        concurrency_limit=5,
    )


def test_a_retried_round_robin_job_keeps_its_turn_and_a_done_key_is_swept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "q.db"
    storage = SQLStorage(f"sqlite:///{path}")
    try:
        storage.enqueue([_rr_job("a")], now=T0)
        storage.enqueue([_rr_job("b")], now=T0 + 1)
        a, b = storage.claim("w", ["default"], 2, LEASE, now=T0 + SEC)
        assert storage.finish([retry_end(a.ref, delay_ms=0)], now=T0 + 2 * SEC) == [True]
        (again,) = storage.claim("w", ["default"], 2, LEASE, now=T0 + 3 * SEC)
        assert again.id == a.id, "a retried round-robin job is claimed again"
        ends = [complete_end(b.ref), complete_end(again.ref)]
        assert storage.finish(ends, now=T0 + 4 * SEC) == [True, True]
        storage.enqueue([_rr_job("a")], now=T0 + 5 * SEC)  # b, served before a, comes first
        assert len(storage.claim("w", ["default"], 2, LEASE, now=T0 + 6 * SEC)) == 1
        db = sqlite3.connect(path)
        try:
            keys = [r[0] for r in db.execute("SELECT key FROM qc_rr ORDER BY key")]
        finally:
            db.close()
        assert keys == ["", "tests.fair:a"], "key b, done, left when a claim considered it"
    finally:
        storage.close()
