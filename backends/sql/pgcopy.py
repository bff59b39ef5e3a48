"""Bulk enqueue on PostgreSQL with ``COPY``: the rows of a large batch of queued jobs.

``COPY qc_jobs (...) FROM STDIN`` streams the rows that :func:`backends.sql.records.job_row`
builds (the tuple SQLite's ``executemany`` inserts), so the server parses no 19 arrays
and runs no ``unnest``: for 1,000-job batches about twice the rate of the ``insert_jobs``
statement (bench/pg_copy.py). ``COPY`` takes values, not expressions, so the
enqueue time is the caller's ``now`` or the server's clock read first; the wake-up
(``NOTIFY``) follows in the same transaction, as ``insert_jobs`` sends it in the same
statement. The rows go in PostgreSQL's binary ``COPY`` format (:data:`COPY_TYPES`, the
columns' types): integers are packed, not printed and parsed back, and no text escaping
is applied to payloads, ids and options: the client's ``job_row`` + ``write_row`` went
from 3.2 to 2.4 µs per row (the server's CPU per row is the same in both formats,
bench/pg_copy_server.py). A batch with a job that is not simply queued (concurrency
``skip``), or a small batch (three round trips instead of one), goes through
``insert_jobs``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from psycopg.pq import TransactionStatus

from backends.sql.records import JOB_COLUMNS, TEMPLATE_COLUMNS, job_row
from queue_core.records.jobs import NewJob

__all__ = ["COPY_MIN", "COPY_TYPES", "TEMPLATE_COLUMNS", "TEMPLATE_TYPES", "copy_jobs", "copy_rows"]

COPY_MIN = 64
"""Batches of at least this many queued jobs are written with ``COPY``."""

COPY_TYPES = (
    "text", "text", "text", "bytea", "int4", "text", "text", "int8",
    "int8", "int8", "int4", "int8", "int8", "int8",
    "int8", "text", "int4", "bool",
    "text", "text", "int4", "int8", "bool",
)  # fmt: skip
"""The PostgreSQL type of each of :data:`~backends.sql.records.JOB_COLUMNS` (in order) as
the binary ``COPY`` sends it; ``text`` is accepted by the ``VARCHAR`` columns too. A test
checks them against :data:`backends.sql.tables.jobs`."""

TEMPLATE_TYPES = tuple(dict(zip(JOB_COLUMNS, COPY_TYPES, strict=True))[c] for c in TEMPLATE_COLUMNS)
"""The binary ``COPY`` type of each of :data:`~backends.sql.records.TEMPLATE_COLUMNS`."""

_COPY = f"COPY qc_jobs ({', '.join(JOB_COLUMNS)}) FROM STDIN (FORMAT BINARY)"


def copy_rows(
    cur: Any,
    copy_sql: str,
    types: Sequence[str],
    rows: Callable[[int], Iterable[tuple[Any, ...]]],
    now: int | None,
    server_now: Callable[[Any], int],
    notify: Callable[[Any], None],
) -> None:
    """:func:`copy_jobs` for rows given by ``rows(t)`` (``t`` the enqueue time) in the
    columns of ``copy_sql``, of PostgreSQL types ``types`` (a template's rows,
    :class:`~backends.sql.records.TemplateRows`)."""
    own = cur.connection.info.transaction_status == TransactionStatus.IDLE
    if own:
        cur.execute("BEGIN")
    t = now if now is not None else server_now(cur)
    with cur.copy(copy_sql) as copy:
        copy.set_types(types)
        for row in rows(t):
            copy.write_row(row)
    notify(cur)
    if own:
        cur.execute("COMMIT")


def copy_jobs(
    cur: Any,
    jobs: Sequence[NewJob],
    now: int | None,
    server_now: Callable[[Any], int],
    notify: Callable[[Any], None],
) -> None:
    """Store ``jobs`` (all queued) with one ``COPY`` and wake the waiters, atomically.

    ``cur`` is a cursor of the storage's connection (autocommit: a transaction is opened
    here unless one is open already); ``server_now(cur)`` reads the server's clock when
    ``now`` is ``None``; ``notify(cur)`` sends the wake-up.
    """
    copy_rows(
        cur, _COPY, COPY_TYPES, lambda t: (job_row(j, t) for j in jobs), now, server_now, notify
    )
