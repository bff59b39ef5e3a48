"""The PostgreSQL hot path (backends/sql/pg_hot.py): cached cursors, rows by position."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import psycopg
import pytest

from backends.sql import SQLStorage, pg_hot
from queue_core.errors import StorageUnavailable
from queue_core.model import Action, AttemptEnd, Decision, Outcome
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
    cached = pg._hot_local.cursors  # type: ignore[attr-defined]
    pg.claim("w", ["default"], 1, 30_000, now=T0)
    assert pg._hot_local.cursors is cached  # type: ignore[attr-defined]
    pg._conns.discard(cached.conn)
    got = pg.claim("w", ["default"], 1, 30_000, now=T0)
    assert len(got) == 1
    assert pg._hot_local.cursors is not cached  # type: ignore[attr-defined]
    assert pg.finish(_done(got), now=T0) == [True]


def test_a_killed_connection_fails_unavailable_then_the_next_claim_works(
    pg: SQLStorage, postgres_url: str
) -> None:
    pg.enqueue([new_job() for _ in range(2)], now=T0)
    assert len(pg.claim("w", ["default"], 1, 30_000, now=T0)) == 1
    pid = pg._hot_local.cursors.conn.info.backend_pid  # type: ignore[attr-defined]
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
