"""The SQL backend applies the shared rules of ``queue_core.rules.outcomes``: retention
(0 included), the reap delay a RETRY decision sets, the spec a dead-letter entry replays,
and the version-2 migration that keeps the enqueued ``lost_delay_ms`` apart."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.sql import SQLStorage
from backends.sql.schema import SCHEMA_VERSION
from queue_core.records.errors import ConfigError
from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    Decision,
    JobState,
    Outcome,
)
from queue_core.testing import SEC, T0, new_job


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLStorage]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'q.db'}"
    else:
        url = request.getfixturevalue("postgres_clean_url")
    s = SQLStorage(url, retention_ms=0)
    yield s
    s.close()


def _complete(storage: SQLStorage, now: int) -> str:
    job = new_job()
    storage.enqueue([job], now=now)
    (c,) = storage.claim("w", ["default"], 1, 30 * SEC, now=now)
    done = Decision(action=Action.COMPLETE)
    storage.finish([AttemptEnd(ref=c.ref, outcome=Outcome.SUCCEEDED, decision=done)], now=now)
    return job.id


def test_retention_zero_prunes_every_job_finished_at_or_before_now(storage: SQLStorage) -> None:
    assert storage.retention_ms == 0
    early, on_time = _complete(storage, T0), _complete(storage, T0 + 5)
    later = _complete(storage, T0 + 6)
    assert storage.prune(now=T0 + 5) == 2
    assert storage.get_job(early) is None and storage.get_job(on_time) is None
    assert storage.get_job(later) is not None


@pytest.mark.parametrize(("query", "ms"), [("0", 0), ("0s", 0), ("2d", 2 * 86_400_000)])
def test_retention_query_follows_the_shared_parser(tmp_path: Path, query: str, ms: int) -> None:
    s = SQLStorage(f"sqlite:///{tmp_path / 'q.db'}?retention={query}")
    try:
        assert s.retention_ms == ms
    finally:
        s.close()


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_retention_ms_must_be_a_non_negative_int(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        SQLStorage(f"sqlite:///{tmp_path / 'q.db'}", retention_ms=bad)  # type: ignore[arg-type]
    assert info.value.code == "invalid_option"
    assert repr(bad) in str(info.value)


def test_reap_after_a_retry_uses_the_decisions_delay_and_replay_the_enqueued_one(
    storage: SQLStorage,
) -> None:
    job = new_job(max_attempts=2, lost_delay_ms=100)
    storage.enqueue([job], now=T0)
    (c,) = storage.claim("w", ["default"], 1, SEC, now=T0)
    retry = Decision(action=Action.RETRY, delay_ms=0, lost_delay_ms=7_000)
    storage.finish([AttemptEnd(ref=c.ref, outcome=Outcome.FAILED, decision=retry)], now=T0)
    (c2,) = storage.claim("w", ["default"], 1, SEC, now=T0 + 1)
    assert c2.attempt == 2
    (reaped,) = storage.reap(now=T0 + 2 * SEC)
    assert reaped.state is JobState.DEAD and reaped.reason == "lease_expired"
    record = storage.get_job(job.id)
    assert record is not None and record.dead_id is not None
    new_id = storage.retry_dead(record.dead_id, now=T0 + 3 * SEC)
    (c3,) = storage.claim("w", ["default"], 1, SEC, now=T0 + 3 * SEC)
    assert (c3.id, c3.attempt, c3.replay_of) == (new_id, 1, record.dead_id)
    (again,) = storage.reap(now=T0 + 5 * SEC)
    assert again.state is JobState.QUEUED
    replayed = storage.get_job(new_id)
    # queued again after the enqueued 100 ms, not the 7 s the old attempt's RETRY set
    assert replayed is not None and replayed.run_at == T0 + 5 * SEC + 100


def test_retry_lost_delay_reaches_the_reap(storage: SQLStorage) -> None:
    job = new_job(max_attempts=3, lost_delay_ms=100)
    storage.enqueue([job], now=T0)
    (c,) = storage.claim("w", ["default"], 1, SEC, now=T0)
    retry = Decision(action=Action.RETRY, delay_ms=0, lost_delay_ms=7_000)
    storage.finish([AttemptEnd(ref=c.ref, outcome=Outcome.FAILED, decision=retry)], now=T0)
    storage.claim("w", ["default"], 1, SEC, now=T0 + 1)
    (reaped,) = storage.reap(now=T0 + 2 * SEC)
    assert reaped.state is JobState.QUEUED
    record = storage.get_job(job.id)
    assert record is not None and record.run_at == T0 + 2 * SEC + 7_000


def test_a_version_1_sqlite_database_is_upgraded_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    first = SQLStorage(f"sqlite:///{path}")
    first.enqueue([job := new_job(lost_delay_ms=250)], now=T0)
    first.close()
    raw = sqlite3.connect(path)
    raw.execute("ALTER TABLE qc_jobs DROP COLUMN retry_lost_delay_ms")
    raw.execute("DROP INDEX ix_qc_jobs_rated")  # version 5's parts
    raw.execute("ALTER TABLE qc_jobs DROP COLUMN rate_key")
    raw.execute("DROP TABLE qc_unique")
    raw.execute("DROP TABLE qc_rates")
    raw.execute("UPDATE qc_meta SET value = '1' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()
    second = SQLStorage(f"sqlite:///{path}")
    try:
        assert second.schema_version() == 1
        (c,) = second.claim("w", ["default"], 1, SEC, now=T0)
        assert c.id == job.id
        assert second.schema_version() == SCHEMA_VERSION
        (reaped,) = second.reap(now=T0 + 2 * SEC)
        assert reaped.state is JobState.DEAD
        rated = [
            new_job(rate_key="r", rate_limit=1, rate_window_ms=SEC, unique_key=f"u{i}")
            for i in range(2)
        ]
        second.enqueue(rated, now=T0)  # the version 5 tables and column exist now
        assert len(second.claim("w", ["default"], 5, SEC, now=T0)) == 1
    finally:
        second.close()


def test_a_version_2_sqlite_database_gets_the_schedule_ticks_table(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    first = SQLStorage(f"sqlite:///{path}")
    first.enqueue([new_job()], now=T0)
    first.close()
    raw = sqlite3.connect(path)
    raw.execute("DROP TABLE qc_schedule_ticks")
    raw.execute("UPDATE qc_meta SET value = '2' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()
    second = SQLStorage(f"sqlite:///{path}")
    try:
        assert second.schema_version() == 2
        assert second.enqueue_tick("s", T0, new_job(), now=T0) is True
        assert second.schedule_ticks() == {"s": T0}
        assert second.schema_version() == SCHEMA_VERSION
    finally:
        second.close()
