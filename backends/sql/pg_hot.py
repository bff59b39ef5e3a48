"""The PostgreSQL worker's hot path: claim and finish on cached cursors, rows by position.

A worker claims and finishes every job, so what each call costs in Python counts per
job. Both statements run on cursors made once per connection (psycopg builds a cursor,
its adapters map and its row maker on every ``conn.cursor()``) with plain tuple rows,
and :func:`claimed_pairs` builds the :class:`~queue_core.records.jobs.ClaimedJob` straight
from the claim row (no dictionary per row). Each call still runs in a
:class:`~backends.sql.store.Scope`, so errors are translated and a broken connection is
discarded as for every other statement (its cursors go with it: the cache is keyed by
the connection object).
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from backends.sql.records import EndRow, Order
from queue_core.records.jobs import ClaimedJob
from queue_core.rules.leases import step_deadline

__all__ = [
    "CLAIM_COLUMNS",
    "HotCursors",
    "check_claim_columns",
    "claimed_pairs",
    "cursors",
    "finish_params",
    "raw_cursor",
]

CLAIM_COLUMNS = (
    "seq", "id", "task_name", "queue", "payload", "priority", "attempt", "max_attempts",
    "timeout_ms", "heartbeat_ms", "options", "enqueued_at", "replay_of", "lease_token",
    "lease_expires_at", "deadline", "started_at", "run_at", "execution_id", "step_id",
    "flow_deadline_at", "place_at", "keyed",
)  # fmt: skip
"""The columns of the ``claim`` statement, in the order :func:`claimed_pairs` reads them."""


_TF = {True: "t", False: "f"}


def finish_params(ends: list[EndRow], now: int | None) -> list[str | None]:
    """The parameters of a ``finish`` statement for ``ends``: every value as text (or
    ``None``), ``now`` first on each row.

    psycopg types an ``int`` by its size (``int2`` to ``int8``), ``bytes`` and ``bool``
    by their type and ``None`` as unknown, and prepares a statement per query text *and*
    parameter types. So a batch statement whose values differ in size or ``NULL``-ness
    from call to call (attempt numbers, results, padding rows) was seldom prepared: the
    server parsed and planned its hundreds of parameters again. As text (sent untyped,
    as ``str`` is) the statement's own ``CAST($n AS type)`` types each one, and the types
    never change. Cheaper than untyped psycopg dumpers written in Python.
    """
    t = None if now is None else str(now)
    tf = _TF
    flat: list[str | None] = []
    add = flat.extend
    for (id_, attempt, token, state, reason, requeue, delay, lost, result, has_error,
         e_class, e_type, message, tb, outcome, a_reason, mode, dead_id,
         refund, ago) in ends:  # fmt: skip
        add((
            t, id_, str(attempt), token, state, reason, tf[requeue],
            None if delay is None else str(delay), None if lost is None else str(lost),
            None if result is None else "\\x" + result.hex(), tf[has_error], e_class, e_type,
            message, tb, outcome, a_reason, mode, dead_id, tf[refund],
            None if ago is None else str(ago),
        ))  # fmt: skip
    return flat


class HotCursors:
    """This thread's cached cursors on its connection: ``cur`` (``%(name)s`` queries)
    and ``raw`` (``$n`` queries), both yielding tuples."""

    __slots__ = ("conn", "cur", "raw")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.cur: Any = psycopg.Cursor(conn, row_factory=tuple_row)
        self.raw: Any = psycopg.RawCursor(conn, row_factory=tuple_row)


def cursors(local: threading.local, conn: Any) -> HotCursors:
    """This thread's cached cursors on ``conn`` (made anew for a new connection)."""
    found: HotCursors | None = getattr(local, "cursors", None)
    if found is None or found.conn is not conn:
        found = local.cursors = HotCursors(conn)
    return found


def raw_cursor(local: threading.local, conn: Any) -> Any:
    """The cached tuple-row :class:`psycopg.RawCursor` of ``conn`` when it is this
    thread's hot connection, else a new one."""
    cursors = getattr(local, "cursors", None)
    if cursors is not None and cursors.conn is conn:
        return cursors.raw
    return psycopg.RawCursor(conn, row_factory=tuple_row)


def check_claim_columns(cur: Any) -> None:
    """Fail loudly if the ``claim`` statement's columns no longer match
    :data:`CLAIM_COLUMNS` (checked on a storage's first claim that returns rows)."""
    names = tuple(c.name for c in cur.description or ())
    if names != CLAIM_COLUMNS:
        raise RuntimeError(f"claim columns {names} do not match pg_hot.CLAIM_COLUMNS")


def claimed_pairs(rows: list[tuple[Any, ...]]) -> list[tuple[Order, ClaimedJob]]:
    """``(order, job)`` of each started claim row (a ``claim`` row by position; a flow
    step's ``deadline`` is :func:`~queue_core.rules.leases.step_deadline`)."""
    pairs: list[tuple[Order, ClaimedJob]] = []
    for (seq, id_, task, queue, payload, priority, attempt, max_attempts, timeout_ms, hb_ms,
         options, enqueued_at, replay_of, token, lease_at, deadline, started_at, run_at,
         execution_id, step_id, flow_end, place_at, _keyed) in rows:  # fmt: skip
        job = ClaimedJob(
            id=id_, task_name=task, queue=queue, payload=bytes(payload), attempt=attempt,
            lease_token=token, lease_expires_at=lease_at,
            deadline=step_deadline(deadline, flow_end),
            max_attempts=max_attempts, priority=priority, timeout_ms=timeout_ms,
            heartbeat_ms=hb_ms, options=options, enqueued_at=enqueued_at,
            replay_of=replay_of, started_at=started_at, run_at=run_at,
            execution_id=execution_id, step_id=step_id, flow_deadline_at=flow_end,
        )  # fmt: skip
        pairs.append(((-priority, run_at if place_at is None else place_at, seq), job))
    return pairs
