"""The PostgreSQL hot path (backends/sql/pg_hot.py): cached cursors, rows by position."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace

import psycopg
import pytest

from backends.sql import SQLStorage, pg_hot, postgresql
from backends.sql.records import EndRow
from queue_core.records.errors import StorageUnavailable
from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    Decision,
    Outcome,
)
from queue_core.testing import T0, new_job


@pytest.fixture
def pg(postgres_url: str) -> Iterator[SQLStorage]:
    s = SQLStorage(postgres_url)
    yield s
    s.close()


def _done(jobs: list) -> list[AttemptEnd]:  # type: ignore[type-arg]
    return [
        AttemptEnd(
            ref=c.ref,
            outcome=Outcome.SUCCEEDED,
            decision=Decision(action=Action.COMPLETE),
            result=b"1",
        )
        for c in jobs
    ]


def test_claim_rows_decoded_by_position_match_the_stored_job(pg: SQLStorage) -> None:
    low = new_job(payload=b"low", priority=1, timeout_ms=5_000, options='{"a": 1}')
    high = new_job(payload=b"high", priority=9, max_attempts=7)
    pg.enqueue([low, high], now=T0)
    got = pg.claim("w", ["default"], 10, 30_000, now=T0 + 1)
    assert [c.id for c in got] == [high.id, low.id]  # priority order
    first, second = got
    assert (first.payload, first.priority, first.max_attempts, first.attempt) == (b"high", 9, 7, 1)
    assert first.deadline is None and first.lease_expires_at == T0 + 1 + 30_000
    assert (second.payload, second.options, second.timeout_ms) == (b"low", '{"a": 1}', 5_000)
    assert second.deadline == T0 + 1 + 5_000 and second.started_at == T0 + 1
    stored = pg.get_job(second.id)
    assert stored is not None and stored.enqueued_at == second.enqueued_at == T0
    assert pg.finish(_done(got), now=T0 + 2) == [True, True]
    assert pg.finish(_done(got), now=T0 + 3) == [False, False]  # fenced: leases cleared


def test_cursors_are_reused_per_connection_and_renewed_after_a_discard(
    pg: SQLStorage,
) -> None:
    pg.enqueue([new_job() for _ in range(3)], now=T0)
    pg.claim("w", ["default"], 1, 30_000, now=T0)
    cached = pg.store.dialect.hot.cursors  # type: ignore[attr-defined]
    pg.claim("w", ["default"], 1, 30_000, now=T0)
    assert pg.store.dialect.hot.cursors is cached  # type: ignore[attr-defined]
    pg.store.conns.discard(cached.conn)
    got = pg.claim("w", ["default"], 1, 30_000, now=T0)
    assert len(got) == 1
    assert pg.store.dialect.hot.cursors is not cached  # type: ignore[attr-defined]
    assert pg.finish(_done(got), now=T0) == [True]


def test_a_killed_connection_fails_unavailable_then_the_next_claim_works(
    pg: SQLStorage, postgres_url: str
) -> None:
    pg.enqueue([new_job() for _ in range(2)], now=T0)
    assert len(pg.claim("w", ["default"], 1, 30_000, now=T0)) == 1
    pid = pg.store.dialect.hot.cursors.conn.info.backend_pid  # type: ignore[attr-defined]
    with psycopg.connect(postgres_url.replace("+psycopg", ""), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    with pytest.raises(StorageUnavailable):
        pg.claim("w", ["default"], 1, 30_000, now=T0)
    assert len(pg.claim("w", ["default"], 1, 30_000, now=T0)) == 1


def test_claim_columns_are_checked_against_the_positions_read() -> None:
    good = SimpleNamespace(description=[SimpleNamespace(name=n) for n in pg_hot.CLAIM_COLUMNS])
    pg_hot.check_claim_columns(good)
    names = list(pg_hot.CLAIM_COLUMNS)
    names[1], names[2] = names[2], names[1]
    bad = SimpleNamespace(description=[SimpleNamespace(name=n) for n in names])
    with pytest.raises(RuntimeError, match="do not match"):
        pg_hot.check_claim_columns(bad)


def test_a_flow_steps_deadline_is_the_earlier_of_attempt_and_execution() -> None:
    def row(seq: int, deadline: int | None, flow_end: int | None) -> tuple[object, ...]:
        values = dict.fromkeys(pg_hot.CLAIM_COLUMNS)
        values.update(
            seq=seq,
            id=f"j{seq}",
            task_name="t",
            queue="q",
            payload=b"p",
            priority=0,
            attempt=1,
            max_attempts=3,
            lease_token="tok",
            lease_expires_at=10,
            deadline=deadline,
            run_at=5,
            flow_deadline_at=flow_end,
            keyed=False,
        )
        return tuple(values[c] for c in pg_hot.CLAIM_COLUMNS)

    pairs = pg_hot.claimed_pairs([row(1, 100, 50), row(2, None, 70), row(3, 40, None)])
    assert [p[1].deadline for p in pairs] == [50, 70, 40]
    assert [p[0] for p in pairs] == [(0, 5, 1), (0, 5, 2), (0, 5, 3)]
    assert pairs[0][1].flow_deadline_at == 50 and pairs[2][1].flow_deadline_at is None


def _finish_texts(pg: SQLStorage) -> list[int]:
    """The row counts of the finish statements prepared on this thread's connection."""
    conn = pg.store.dialect.hot.cursors.conn  # type: ignore[attr-defined]
    rows = conn.execute(
        "SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'WITH e(%%'"
    ).fetchall()
    width = len(postgresql.FINISH_ROW)
    return sorted(row["statement"].count("CAST($") // width for row in rows)


def test_finish_batches_of_any_size_and_mix_run_on_a_few_prepared_statements(
    pg: SQLStorage,
) -> None:
    jobs = [new_job() for _ in range(29)]
    pg.enqueue(jobs, now=T0)
    got = pg.claim("w", ["default"], 29, 30_000, now=T0)
    ends = _done(got)
    for k in range(29):  # results of mixed kinds: None, bytes of any value (sent as text)
        ends[k] = AttemptEnd(
            ref=ends[k].ref,
            outcome=Outcome.SUCCEEDED,
            decision=Decision(action=Action.COMPLETE),
            result=None if k % 2 else b"\x00\\'x" + bytes([k, 255]),
        )
    stale = AttemptEnd(
        ref=replace(ends[1].ref, lease_token="0" * 32),
        outcome=Outcome.SUCCEEDED,
        decision=Decision(action=Action.COMPLETE),
    )
    assert pg.finish([ends[0]], now=T0 + 1) == [True]
    assert pg.finish([stale, *ends[2:4]], now=T0 + 1) == [False, True, True]  # padded to 4
    assert pg.finish([ends[1], *ends[4:8]], now=T0 + 1) == [True] * 5  # padded to 8
    assert pg.finish(ends[8:29], now=T0 + 1) == [True] * 21  # padded to 32
    assert pg.finish(ends[8:29], now=T0 + 2) == [False] * 21  # fenced: leases cleared
    assert _finish_texts(pg) == [1, 4, 8, 32]  # each prepared at once, one per size
    for job, end in zip(jobs, ends, strict=True):
        stored = pg.get_job(job.id)
        assert stored is not None and stored.state.value == "succeeded"
        assert stored.result == end.result and stored.finished_at == T0 + 1


def test_a_finish_batch_over_the_largest_size_is_cut_into_statements(pg: SQLStorage) -> None:
    top = postgresql.FINISH_SIZES[-1]
    pg.enqueue([new_job() for _ in range(top + 3)], now=T0)
    got = pg.claim("w", ["default"], top + 3, 30_000, now=T0)
    assert len(got) == top + 3
    assert pg.finish(_done(got), now=T0 + 1) == [True] * (top + 3)
    assert _finish_texts(pg) == [4, top]
    assert pg.count_pending(["default"], 0) == 0


def test_finish_finds_its_rows_by_id_on_a_table_never_analyzed(
    pg: SQLStorage, postgres_url: str
) -> None:
    """Issue 30: on a new store (no statistics) the planner read the whole of qc_jobs once
    per finish statement, a cost that grew with the table; the rows are found by id."""
    dsn = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE qc_jobs SET (autovacuum_enabled = false)")
    pg.enqueue([new_job() for _ in range(5000)], now=T0)
    got = pg.claim("w", ["default"], 64, 30_000, now=T0)
    rows = [
        EndRow(c.id, c.attempt, c.lease_token, "succeeded", None, False, None, None, b"1",
               False, None, None, None, None, "succeeded", None, None, None, False)
        for c in got
    ]  # fmt: skip
    sql = pg.store.dialect._finish_statement(64, False)  # type: ignore[attr-defined]
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute(
            "SELECT reltuples FROM pg_class WHERE relname = 'qc_jobs'"
        ).fetchone() == (-1.0,)  # never analyzed
        plan = psycopg.RawCursor(conn).execute("EXPLAIN " + sql, pg_hot.finish_params(rows, T0))
        text = "\n".join(r[0] for r in plan.fetchall())
    assert "Seq Scan on qc_jobs" not in text, text
    assert pg.finish(_done(got), now=T0 + 1) == [True] * 64
