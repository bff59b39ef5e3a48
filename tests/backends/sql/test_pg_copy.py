"""PostgreSQL bulk enqueue with COPY stores what the ``insert_jobs`` statement stores."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from backends.sql import SQLStorage, pgcopy
from backends.sql.records import JOB_COLUMNS
from queue_core.records.jobs import JobState, NewJob
from queue_core.testing import LEASE

NOW = 1_700_000_000_000


def _jobs(tag: str, n: int) -> list[NewJob]:
    return [
        NewJob(
            id=f"{tag}{i:04d}", task_name="t", queue=f"q{i % 2}", payload=bytes([i % 256, 0, 39]),
            priority=i % 3, run_at=NOW + 1000 if i % 5 == 0 else None, delay_ms=i % 7,
            max_attempts=3, lost_delay_ms=900, timeout_ms=300_000 if i % 2 else None,
            heartbeat_ms=5000 if i % 3 == 0 else None,
            schedule_to_start_ms=60_000 if i % 4 == 0 else None,
            concurrency_key="k" if i % 6 == 0 else None,
            concurrency_limit=2 if i % 6 == 0 else None,
            options='{"x": "a\\tb"}' if i % 8 == 0 else None,
        )
        for i in range(n)
    ]  # fmt: skip


def _rows(url: str, prefix: str) -> list[dict[str, Any]]:
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        rows = conn.execute(
            "SELECT * FROM qc_jobs WHERE id LIKE %s ORDER BY id", [prefix + "%"]
        ).fetchall()
    seqs = [r.pop("seq") for r in rows]  # a serial: each batch's own numbers
    assert seqs == sorted(seqs)  # in batch order (the ids are in batch order too)
    for r in rows:
        r["id"] = r["id"][len(prefix) :]
    return rows


@pytest.fixture
def storage(postgres_url: str) -> Iterator[SQLStorage]:
    s = SQLStorage(postgres_url)
    try:
        yield s
    finally:
        s.close()


@pytest.mark.parametrize("now", [NOW, None])
def test_copy_stores_the_rows_insert_jobs_stores(
    storage: SQLStorage, postgres_url: str, monkeypatch: pytest.MonkeyPatch, now: int | None
) -> None:
    n = pgcopy.COPY_MIN + 36
    calls: list[int] = []
    real = pgcopy.copy_jobs
    monkeypatch.setattr(pgcopy, "copy_jobs", lambda *a: (calls.append(1), real(*a))[1])
    assert storage.enqueue(_jobs("c", n), now=now) == [JobState.QUEUED] * n
    assert calls == [1]  # COPY wrote the batch
    monkeypatch.setattr(pgcopy, "COPY_MIN", 10**9)
    storage.enqueue(_jobs("u", n), now=now)
    assert calls == [1]  # insert_jobs wrote this one
    copied, inserted = _rows(postgres_url, "c"), _rows(postgres_url, "u")
    if now is None:  # the server's clock: one reading per batch, different batches
        for rows in (copied, inserted):
            t = rows[0]["enqueued_at"]
            assert t > NOW and all(r["enqueued_at"] == t for r in rows)
            for r in rows:
                r["enqueued_at"] -= t
                if int(r["id"]) % 5:  # no run_at: ready (and expiry) count from the clock
                    r["run_at"] -= t
                    if r["expires_at"] is not None:
                        r["expires_at"] -= t
    assert copied == inserted
    claimed = storage.claim("w", ["q0"], 2, LEASE, now=NOW + 10_000)
    assert {bytes(c.payload) for c in claimed} <= {bytes([i % 256, 0, 39]) for i in range(n)}


def test_a_failing_copy_stores_nothing(storage: SQLStorage, postgres_url: str) -> None:
    jobs = _jobs("d", pgcopy.COPY_MIN)
    storage.enqueue(jobs[:1], now=NOW)
    with pytest.raises(Exception, match="already exists|duplicate|unique"):
        storage.enqueue(jobs[1:] + jobs[:1], now=NOW)  # the last row is a duplicate id
    assert len(_rows(postgres_url, "d")) == 1
    storage.enqueue(_jobs("e", pgcopy.COPY_MIN), now=NOW)  # the connection is usable
    assert len(_rows(postgres_url, "e")) == pgcopy.COPY_MIN


def test_a_copied_batch_wakes_listeners(storage: SQLStorage, postgres_url: str) -> None:
    dsn = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN qc_jobs")
        storage.enqueue(_jobs("w", pgcopy.COPY_MIN), now=NOW)
        got = list(listener.notifies(timeout=10, stop_after=1))
    assert [n.channel for n in got] == ["qc_jobs"]


def test_the_binary_copy_types_are_the_columns_types(
    storage: SQLStorage, postgres_url: str
) -> None:
    """Binary COPY sends each value in the wire format of a declared type: a type that is
    not the column's (``int4`` for a ``BIGINT``) would be refused or misread."""
    storage.enqueue(_jobs("t", 1), now=NOW)  # the schema exists
    dsn = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT attname, atttypid::regtype::text FROM pg_attribute"
            " WHERE attrelid = 'qc_jobs'::regclass AND attnum > 0 AND NOT attisdropped"
        ).fetchall()
    wire = {"character varying": "text", "text": "text", "bigint": "int8", "integer": "int4",
            "bytea": "bytea", "boolean": "bool", "double precision": "float8"}  # fmt: skip
    declared = {name: wire[kind] for name, kind in rows}
    assert len(pgcopy.COPY_TYPES) == len(JOB_COLUMNS)
    assert dict(zip(JOB_COLUMNS, pgcopy.COPY_TYPES, strict=True)) == {
        c: declared[c] for c in JOB_COLUMNS
    }


def test_copy_inside_the_callers_transaction_leaves_it_open(
    storage: SQLStorage, postgres_url: str
) -> None:
    """Inside the caller's transaction ``copy_jobs`` neither begins nor commits, so the
    caller's rollback stores nothing; on an idle connection it commits its own."""
    storage.enqueue(_jobs("x", 1), now=NOW)  # the schema exists
    dsn = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    clock: list[int] = []

    def server_now(cur: Any) -> int:
        clock.append(1)
        return int(cur.execute("SELECT 5 AS now_ms").fetchone()["now_ms"])

    def notify(cur: Any) -> None:
        cur.execute("SELECT pg_notify('qc_jobs', '')")

    with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        cur = conn.cursor()
        cur.execute("BEGIN")
        pgcopy.copy_jobs(cur, _jobs("r", pgcopy.COPY_MIN), None, server_now, notify)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        cur.execute("ROLLBACK")
        pgcopy.copy_jobs(cur, _jobs("o", pgcopy.COPY_MIN), None, server_now, notify)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # committed
    assert clock == [1, 1]
    assert _rows(postgres_url, "r") == []
    rows = _rows(postgres_url, "o")
    assert len(rows) == pgcopy.COPY_MIN and all(r["enqueued_at"] == 5 for r in rows)
