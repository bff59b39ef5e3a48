"""Schema version 16 (a held attempt's reap spends no attempt, SPEC §8): a version-15
SQLite database (``data/sqlite_schema_v15.sql``, the script the previous release created
new databases from) migrates and keeps its jobs; an attempt claimed for a free slot is
reaped as before (its attempt spent), one held ahead of a slot is given back to its
budget."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from backends.sql import SQLStorage
from backends.sql.records import JOB_COLUMNS, job_row
from backends.sql.schema import SCHEMA_VERSION
from queue_core.records.jobs import JobState
from queue_core.testing import LEASE, SEC, T0, new_job
from tests.backends.sql.old_schemas import sqlite_at_version


def test_a_version_15_sqlite_database_migrates_and_reaps_held_attempts_unspent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    sqlite_at_version(path, 15)
    before, after = new_job(max_attempts=1), new_job(max_attempts=1)
    db = sqlite3.connect(path)
    insert = f"INSERT INTO qc_jobs ({', '.join(JOB_COLUMNS)}) VALUES ({', '.join('?' * 23)})"
    db.execute(insert, job_row(before, T0))
    db.commit()
    assert "ahead" not in {r[1] for r in db.execute("PRAGMA table_info(qc_jobs)")}
    db.close()
    storage = SQLStorage(f"sqlite:///{path}")
    try:
        (running,) = storage.claim("w", ["default"], 1, LEASE, now=T0 + SEC)  # migrates
        assert storage.schema_version() == SCHEMA_VERSION >= 16
        storage.enqueue([after], now=T0 + SEC)
        (held,) = storage.claim_ahead("w", ["default"], 1, LEASE, now=T0 + SEC)
        assert (running.id, held.id) == (before.id, after.id)
        got = {r.job_id: r.state for r in storage.reap(now=T0 + SEC + LEASE)}
        assert got == {before.id: JobState.DEAD, after.id: JobState.QUEUED}
        info = storage.get_job(after.id)
        assert info is not None and (info.attempts, info.max_attempts) == (1, 2)
    finally:
        storage.close()
