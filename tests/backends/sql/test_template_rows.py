"""SQLite's template rows (backends/sql/template.py): the statement's columns, and the
shared values per clock reading equal to those :func:`job_row` gives."""

from __future__ import annotations

import pytest

from backends.sql.records import JOB_COLUMNS, job_row
from backends.sql.template import INSERT_TEMPLATE, TEMPLATE_COLUMNS, _Shared, shared_values
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
    shared = _Shared(template)
    for t in (0, 1, T0, T0 + 12_345):
        assert shared.at(t) == shared_values(template, t)
        row = dict(zip(JOB_COLUMNS, job_row(template, t), strict=True))
        assert ("tpl", b"p", 9) + shared.at(t) == tuple(row[c] for c in TEMPLATE_COLUMNS)
