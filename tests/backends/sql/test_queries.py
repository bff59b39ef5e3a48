"""The named-statement files (shared ones written once) and the one class behind
``SQLStorage``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from backends.sql import SQLStorage, queries
from backends.sql.postgresql import FLOW_INSERT_ARRAYS, statements

SQLITE, POSTGRESQL = queries.load("sqlite"), queries.load("postgresql")
_DIR = Path(queries.__file__).parent / "sql"


def test_shared_statements_are_written_once_and_each_dialect_adds_only_its_own() -> None:
    shared = set(queries.parse((_DIR / "shared.sql").read_text()))
    shared |= set(queries.parse((_DIR / "flows.sql").read_text()))
    sqlite_only = {"insert_job", "claim", "keyed_ready", "renew", "finish_attempts", "finish_jobs",
                   "next_due", "start_claimed"}  # fmt: skip
    pg_only = {"insert_jobs", "insert_job", "lock_key", "try_lock_key", "flow_lock_key",
               "claim", "renew", "finish", "server_now", "notify", "jobs_dead_rows",
               "vacuum_jobs", "next_due", "flow_update_step_arrays", "start_claimed"}  # fmt: skip
    assert set(SQLITE) == shared | sqlite_only and not shared & sqlite_only
    assert set(POSTGRESQL) == shared | pg_only and not shared & pg_only
    assert len(shared) >= 70


def test_shared_statements_get_each_dialects_parameter_style() -> None:
    for name in queries.parse((_DIR / "shared.sql").read_text()):
        lite, pg = (
            d[name].replace("{queues}", "").replace("{paused}", "") for d in (SQLITE, POSTGRESQL)
        )
        assert "%(" not in lite and "{" not in lite, name
        assert not re.search(r"(?<![:\w]):[a-z_]", pg) and "{" not in pg, name
        assert re.sub(r":([a-z_]+)", r"%(\1)s", lite).count("%(") <= pg.count("%("), name
    assert POSTGRESQL["flow_insert_job"].count("%s") == SQLITE["flow_insert_job"].count("?") == 26
    # PostgreSQL.many's one-statement forms take an array for each parameter of the row form
    # (the insert's, built from records.JOB_COLUMNS and the COPY types, names the same columns)
    assert FLOW_INSERT_ARRAYS.count("%(c") == 26
    columns = re.compile(r"INSERT INTO qc_jobs \(([^)]*)\)")
    assert [c.strip() for c in columns.findall(FLOW_INSERT_ARRAYS)[0].split(",")] == [
        c.strip() for c in columns.findall(POSTGRESQL["flow_insert_job"])[0].split(",")
    ]
    row = set(re.findall(r"%\((\w+)\)s", POSTGRESQL["flow_update_step"]))
    assert set(re.findall(r"%\((\w+)\)b", POSTGRESQL["flow_update_step_arrays"])) == row
    assert "IN (SELECT value FROM json_each(:ids))" in SQLITE["select_for_dead"]
    assert "= ANY(CAST(%(ids)s AS text[]))" in POSTGRESQL["select_for_dead"]
    assert "<> ALL(CAST(%(excluded)s AS bigint[]))" in POSTGRESQL["select_ready"]
    assert POSTGRESQL["select_stale"].endswith("FOR UPDATE SKIP LOCKED")
    assert "FOR UPDATE" not in SQLITE["select_stale"] + SQLITE["take_dead"]


def test_a_shared_statement_with_a_percent_sign_is_refused() -> None:
    with pytest.raises(ValueError, match="literal '%'"):
        queries.rewrite("SELECT a % 2 FROM t WHERE b = :b", "postgresql", shared=True)
    assert queries.rewrite("SELECT :a, ?", "postgresql", shared=True) == "SELECT %(a)s, %s"
    assert queries.rewrite("SELECT :a, ?", "sqlite", shared=True) == "SELECT :a, ?"


def test_comment_lines_are_not_sent_and_placeholders_are_expanded() -> None:
    assert all("--" not in sql for sql in SQLITE.values())
    assert all("{now}" not in sql for sql in POSTGRESQL.values())
    assert "statement_timestamp()" in POSTGRESQL["heartbeat"]
    assert ":now" in SQLITE["heartbeat"]


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


def test_sqlstorage_is_one_class_holding_the_dialect(tmp_path: Path) -> None:
    from backends.sql.postgresql import PostgreSQL
    from backends.sql.sqlite import SQLite

    lite = SQLStorage(f"sqlite:///{tmp_path / 'q.db'}")
    pg = SQLStorage("postgresql://u:pw@127.0.0.1:1/db")
    try:
        assert type(lite) is type(pg) is SQLStorage
        assert isinstance(lite.store.dialect, SQLite) and lite.dialect == "sqlite"
        assert isinstance(pg.store.dialect, PostgreSQL) and pg.dialect == "postgresql"
        assert lite.store.q is SQLITE and pg.store.q is statements()
        assert POSTGRESQL.items() <= statements().items()
        owned = [k for k in SQLStorage.__mro__ if k.__module__.startswith("backends")]
        assert owned == [SQLStorage]
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

    sql = SQLITE["insert_job"]
    columns = tuple(c.strip() for c in sql[sql.index("(") + 1 : sql.index(")")].split(","))
    assert columns == JOB_COLUMNS
    assert sql.count("?") == len(JOB_COLUMNS) == len(job_row(new_job(), 5))


def test_finish_rows_follow_the_end_row_fields_on_both_dialects() -> None:
    from backends.sql import postgresql, sqlite
    from backends.sql.records import EndRow

    assert sqlite.FINISH_ROW == ("now", *EndRow._fields)
    assert tuple(name for name, _ in postgresql.FINISH_ROW) == ("now", *EndRow._fields)
    for name in ("finish_attempts", "finish_jobs"):
        assert "e_now, " + ", ".join(f"e_{f}" for f in EndRow._fields) in SQLITE[name]
    assert "e_now, " + ", ".join(f"e_{f}" for f in EndRow._fields) in POSTGRESQL["finish"]


def test_the_sqlite_ready_scans_use_the_ready_index(tmp_path: Path) -> None:
    import sqlite3

    s = SQLStorage(f"sqlite:///{tmp_path / 'q.db'}")
    s.migrate()
    s.close()
    conn = sqlite3.connect(tmp_path / "q.db")
    params = {"q0": "default", "now": 1, "excluded": "[]", "limit": 5, "worker": "w", "lease_ms": 1,
              "pv": None, "ahead": False}  # fmt: skip
    try:
        for name in ("claim", "select_ready"):
            sql = SQLITE[name].replace("{queues}", queries.queues_filter("sqlite", 1))
            sql = sql.replace("{paused}", "NULL")
            plan = " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
            assert "ix_qc_jobs_ready" in plan and "TEMP B-TREE" not in plan, (name, plan)
    finally:
        conn.close()
