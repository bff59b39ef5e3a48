"""The named-query files and the per-dialect classes behind ``SQLStorage``."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.sql import SQLStorage, queries
from backends.sql.postgresql import PostgresStorage
from backends.sql.sqlite import SQLiteStorage


def test_both_dialects_define_the_same_queries_but_for_their_own_extras() -> None:
    pg_only = {
        "server_now",
        "notify",
        "lock_key",
        "try_lock_key",
        "insert_jobs",
        "finish",
        "any_ready",
    }
    sqlite_only = {"finish_attempts", "finish_jobs", "keyed_ready", "ready_probe", "renew"}
    assert set(queries.SQLITE) - set(queries.POSTGRESQL) <= sqlite_only
    assert set(queries.POSTGRESQL) - set(queries.SQLITE) == pg_only - {"renew"}
    shared = set(queries.SQLITE) & set(queries.POSTGRESQL)
    assert {"claim", "heartbeat", "select_stale", "reap_job", "insert_dead"} <= shared


def test_comment_lines_are_not_sent_and_placeholders_are_expanded() -> None:
    assert all("--" not in sql for sql in queries.SQLITE.values())
    assert all("{now}" not in sql for sql in queries.POSTGRESQL.values())
    assert "statement_timestamp()" in queries.POSTGRESQL["heartbeat"]
    assert ":now" in queries.SQLITE["heartbeat"]


def test_parse_refuses_a_name_defined_twice_and_text_before_a_header() -> None:
    with pytest.raises(ValueError, match="twice"):
        queries.parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
    with pytest.raises(ValueError, match="before the first"):
        queries.parse("SELECT 0\n-- name: a\nSELECT 1\n")
    assert queries.parse("-- a file comment\n-- name: a\n-- doc\nSELECT\n  1\n") == {
        "a": "SELECT 1"
    }


def test_the_claim_queue_filter_is_an_equality_for_one_queue() -> None:
    assert queries.queues_filter("postgresql", 1) == "queue = %(q0)s"
    assert "ANY" in queries.queues_filter("postgresql", 2)
    assert queries.queues_filter("sqlite", 2) == "queue IN (:q0, :q1)"


def test_sqlstorage_builds_the_dialect_class(tmp_path: Path) -> None:
    lite = SQLStorage(f"sqlite:///{tmp_path / 'q.db'}")
    pg = SQLStorage("postgresql://u:pw@127.0.0.1:1/db")
    try:
        assert type(lite) is SQLiteStorage and lite.dialect == "sqlite"
        assert type(pg) is PostgresStorage and pg.dialect == "postgresql"
        assert isinstance(lite, SQLStorage) and isinstance(pg, SQLStorage)
        assert type(SQLiteStorage.from_url(f"sqlite:///{tmp_path / 'r.db'}")) is SQLiteStorage
    finally:
        lite.close()
        pg.close()


def test_an_in_memory_database_is_shared_by_threads() -> None:
    import threading

    from queue_core.testing import T0, new_job

    s = SQLStorage("sqlite://")
    try:
        job = new_job()
        th = threading.Thread(target=lambda: s.enqueue([job], now=T0))
        th.start()
        th.join()
        (c,) = s.claim("w", ["default"], 5, 1000, now=T0)
        assert c.id == job.id
    finally:
        s.close()


def test_the_sqlite_insert_lists_the_columns_job_row_fills() -> None:
    from backends.sql.records import JOB_COLUMNS, job_row
    from queue_core.testing import new_job

    sql = queries.SQLITE["insert_job"]
    columns = tuple(c.strip() for c in sql[sql.index("(") + 1 : sql.index(")")].split(","))
    assert columns == JOB_COLUMNS
    assert sql.count("?") == len(JOB_COLUMNS) == len(job_row(new_job(), 5))


def test_finish_rows_follow_the_end_row_fields_on_both_dialects() -> None:
    from backends.sql import postgresql, sqlite
    from backends.sql.records import EndRow

    assert sqlite.FINISH_ROW == ("now", *EndRow._fields)
    assert tuple(name for name, _ in postgresql.FINISH_ROW) == ("now", *EndRow._fields)
    for name in ("finish_attempts", "finish_jobs"):
        assert "e_now, " + ", ".join(f"e_{f}" for f in EndRow._fields) in queries.SQLITE[name]
    assert "e_now, " + ", ".join(f"e_{f}" for f in EndRow._fields) in queries.POSTGRESQL["finish"]


def test_the_sqlite_ready_scans_use_the_ready_index(tmp_path: Path) -> None:
    import sqlite3

    s = SQLStorage(f"sqlite:///{tmp_path / 'q.db'}")
    s.migrate()
    s.close()
    conn = sqlite3.connect(tmp_path / "q.db")
    params = {"q0": "default", "now": 1, "excluded": "[]", "limit": 5, "worker": "w",
              "lease_ms": 1}
    try:
        for name in ("claim", "select_ready"):
            sql = queries.SQLITE[name].replace("{queues}", queries.queues_filter("sqlite", 1))
            plan = " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
            assert "ix_qc_jobs_ready" in plan and "TEMP B-TREE" not in plan, (name, plan)
    finally:
        conn.close()
