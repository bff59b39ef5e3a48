"""Schema step 6 (``qc_workers``) on a database made by an earlier version."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from backends.sql import SQLStorage
from backends.sql.schema import SCHEMA_VERSION
from queue_core.records.workers import WorkerInfo
from queue_core.testing import SEC, T0


def test_a_version_2_database_gets_the_worker_registry(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    first = SQLStorage(f"sqlite:///{path}")
    first.migrate()
    first.close()
    raw = sqlite3.connect(path)
    raw.execute("DROP TABLE qc_workers")
    raw.execute("UPDATE qc_meta SET value = '2' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()
    storage = SQLStorage(f"sqlite:///{path}")
    try:
        info = WorkerInfo(
            id="w1",
            host="h",
            pid=1,
            queues=("default",),
            slots=2,
            busy=1,
            stuck=0,
            started_at=T0,
            last_seen=T0,
        )
        storage.register_worker(info)
        assert storage.schema_version() == SCHEMA_VERSION
        assert storage.list_workers(now=T0 + SEC) == [info]
    finally:
        storage.close()
