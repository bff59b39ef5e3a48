"""The reaper pass vacuums PostgreSQL's ``qc_jobs`` when its dead rows pile up (issue 30):
against a real PostgreSQL, the dead rows drop after a reap; below the count nothing runs;
another vacuum holding the table makes it skip, not wait; SQLite has no such part."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg

from backends.sql import SQLStorage
from queue_core.rules.vacuum import VACUUM_DEAD_ROWS
from queue_core.testing import SEC, T0, complete_end, new_job


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _table(url: str) -> tuple[int, int]:
    """``qc_jobs``'s (dead rows, manual vacuums) as the statistics show them now."""
    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT n_dead_tup, vacuum_count FROM pg_stat_user_tables WHERE relname = 'qc_jobs'"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _churn(storage: SQLStorage, n: int) -> None:
    """``n`` jobs enqueued, claimed and finished (each leaves dead row versions), the
    statistics of this thread's connection flushed so other sessions see them."""
    storage.enqueue([new_job() for _ in range(n)], now=T0)
    claimed = storage.claim("w1", ["default"], n, 30 * SEC, now=T0)
    assert len(claimed) == n
    assert storage.finish([complete_end(c.ref) for c in claimed], now=T0 + SEC) == [True] * n
    with storage.store.stmt() as cur:
        cur.execute("SELECT pg_stat_force_next_flush()")


def test_a_reap_vacuums_the_jobs_table_when_dead_rows_pass_the_count(postgres_url: str) -> None:
    storage = SQLStorage(postgres_url)
    try:
        assert storage.vacuum is not None
        storage.vacuum.dead_rows_at = 100
        _churn(storage, 100)
        dead, vacuums = _table(postgres_url)
        assert dead >= 100
        assert storage.reap(now=T0 + 2 * SEC) == []
        after, vacuums_after = _table(postgres_url)
        assert vacuums_after == vacuums + 1
        assert after < dead // 10
        assert storage.vacuum.runs == 1 and storage.vacuum.last_took_ms > 0
        # the table works on: a job enqueued after the vacuum is claimed
        _churn(storage, 1)
    finally:
        storage.close()


def test_below_the_count_a_reap_does_not_vacuum(postgres_url: str) -> None:
    storage = SQLStorage(postgres_url)
    try:
        assert storage.vacuum is not None
        assert storage.vacuum.dead_rows_at == VACUUM_DEAD_ROWS
        _churn(storage, 100)
        dead, vacuums = _table(postgres_url)
        assert 100 <= dead < VACUUM_DEAD_ROWS
        storage.reap(now=T0 + 2 * SEC)
        assert _table(postgres_url) == (dead, vacuums)
        assert storage.vacuum.runs == 0
    finally:
        storage.close()


def test_a_vacuum_already_holding_the_table_is_not_waited_for(postgres_url: str) -> None:
    storage = SQLStorage(postgres_url)
    holder = psycopg.connect(_dsn(postgres_url))
    try:
        assert storage.vacuum is not None
        storage.vacuum.dead_rows_at = 100
        _churn(storage, 100)
        dead, vacuums = _table(postgres_url)
        # the lock a VACUUM (another worker's, or autovacuum) holds on the table
        holder.execute("LOCK TABLE qc_jobs IN SHARE UPDATE EXCLUSIVE MODE")
        done: list[Any] = []
        reaper = threading.Thread(target=lambda: done.append(storage.reap(now=T0 + 2 * SEC)))
        reaper.start()
        reaper.join(30)
        assert not reaper.is_alive(), "the reap waited for the other vacuum"
        assert done == [[]]
        holder.rollback()
        after, vacuums_after = _table(postgres_url)
        assert vacuums_after == vacuums and after >= dead
    finally:
        holder.close()
        storage.close()


def test_sqlite_has_no_vacuum_part(tmp_path: Path) -> None:
    storage = SQLStorage(f"sqlite:///{tmp_path / 'q.db'}")
    try:
        assert storage.vacuum is None
        storage.enqueue([new_job()], now=T0)
        assert storage.reap(now=T0 + SEC) == []
    finally:
        storage.close()
