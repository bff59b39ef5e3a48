"""Template rows (:class:`backends.sql.records.TemplateRows`): SQLite's statements'
columns, and the shared values per clock reading equal to those :func:`job_row` gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.sql import SQLStorage
from backends.sql.records import (
    JOB_COLUMNS,
    TEMPLATE_COLUMNS,
    TemplateRows,
    job_row,
    shared_values,
)
from backends.sql.sqlite import INSERT_TEMPLATE, literal_insert
from queue_core.testing import T0, new_job


def test_the_template_insert_lists_every_job_column_per_job_ones_first() -> None:
    cols = INSERT_TEMPLATE[INSERT_TEMPLATE.index("(") + 1 : INSERT_TEMPLATE.index(")")]
    assert tuple(c.strip() for c in cols.split(",")) == TEMPLATE_COLUMNS
    assert TEMPLATE_COLUMNS[:3] == ("id", "payload", "lost_delay_ms")
    assert sorted(TEMPLATE_COLUMNS) == sorted(JOB_COLUMNS)
    assert INSERT_TEMPLATE.count("?") == len(JOB_COLUMNS)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"delay_ms": 250, "priority": -2, "timeout_ms": 5_000},
        {"run_at": T0 + 9_000, "delay_ms": 3},
        {"schedule_to_start_ms": 30_000, "delay_ms": 7},
        {"run_at": T0 - 1, "schedule_to_start_ms": 10, "heartbeat_ms": 2_000},
        {"concurrency_key": "k", "concurrency_limit": 2, "options": '{"x":1}'},
    ],
)
def test_shared_values_at_any_time_are_the_job_rows(fields: dict[str, object]) -> None:
    template = new_job(id="tpl", payload=b"p", lost_delay_ms=9, **fields)  # type: ignore[arg-type]
    shared = TemplateRows(template)
    for t in (0, 1, T0, T0 + 12_345):
        assert shared.at(t) == shared_values(template, t)
        row = dict(zip(JOB_COLUMNS, job_row(template, t), strict=True))
        assert ("tpl", b"p", 9) + shared.at(t) == tuple(row[c] for c in TEMPLATE_COLUMNS)


@pytest.mark.parametrize(
    "fields",
    [
        {"task_name": 'it\'s.a "task"', "queue": "q'1; DROP TABLE qc_jobs; --"},
        {"queue": "ünïcode ✓", "priority": -3, "timeout_ms": 1, "schedule_to_start_ms": 5},
        {"concurrency_key": "k'", "concurrency_limit": 1, "run_at": T0 + 1, "delay_ms": 9},
    ],
)
def test_the_literal_insert_stores_the_rows_the_bound_insert_stores(
    tmp_path: Path, fields: dict[str, object]
) -> None:
    """Every column's value and SQLite storage class (``typeof``) alike, for names that
    need quoting; the whole table intact."""
    storage = SQLStorage.from_url(f"sqlite:///{tmp_path / 'q.db'}")
    try:
        template = new_job(**fields)  # type: ignore[arg-type]
        shared = TemplateRows(template)
        insert = literal_insert(shared)
        assert insert is not None
        with storage.store.tx() as cur:
            cur.execute(insert, ("lit", b"[1]", 7) + shared.times(T0))
            cur.execute(INSERT_TEMPLATE, ("bnd", b"[1]", 7) + shared.at(T0))
            cols = [r[1] for r in cur.execute("PRAGMA table_info(qc_jobs)").fetchall()]
            probe = ", ".join(f"{c}, typeof({c})" for c in cols if c not in ("seq", "id"))
            rows = [tuple(cur.execute(f"SELECT {probe} FROM qc_jobs WHERE id = ?", (i,)).fetchone())
                    for i in ("lit", "bnd")]  # fmt: skip
        assert rows[0] == rows[1]
        assert storage.get_job("lit") is not None
    finally:
        storage.close()


def test_a_value_sqlite_cannot_take_as_a_literal_keeps_the_bound_insert() -> None:
    assert literal_insert(TemplateRows(new_job(queue="nul\x00queue"))) is None
    assert literal_insert(TemplateRows(new_job(queue="plain"))) is not None
