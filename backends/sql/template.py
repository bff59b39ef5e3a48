"""SQLite's :class:`~queue_core.storage.SupportsTemplateEnqueue`: ``Task.map``'s batch as rows.

A plain batch (``Task.map``: jobs that differ only in id, payload and lost delay) used to
become one :class:`~queue_core.model.NewJob` per job in the core and then one
:func:`~backends.sql.records.job_row` tuple per job here; together about a third of the
producer's CPU per job (``bench/enqueue.py sqlite --modes bulk --profile``). Here the 20
values the jobs share are computed once per batch (by :func:`job_row` of the template,
so they are the values :meth:`SQLStorage.enqueue` writes) and each row is the job's own
``(id, payload, lost_delay_ms)`` followed by them: one tuple concatenation per job, bound
to an ``INSERT`` that lists the columns in that order.

A template that is not plain (a unique or rate key, a concurrency ``skip`` key) goes
through :meth:`SQLStorage.enqueue` with the jobs built by
:func:`~queue_core.jobbuild.expand_template`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from backends.sql.records import JOB_COLUMNS, job_row
from queue_core.jobbuild import expand_template
from queue_core.model import JobState, NewJob

__all__ = [
    "INSERT_TEMPLATE",
    "SQLiteTemplateEnqueue",
    "TEMPLATE_COLUMNS",
    "plain_template",
    "shared_of",
    "shared_values",
]

_PER_JOB: Final = ("id", "payload", "lost_delay_ms")
TEMPLATE_COLUMNS: Final = _PER_JOB + tuple(c for c in JOB_COLUMNS if c not in _PER_JOB)
"""The columns of :data:`INSERT_TEMPLATE`: the per-job three, then those a batch shares."""

INSERT_TEMPLATE: Final = (
    f"INSERT INTO qc_jobs ({', '.join(TEMPLATE_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(TEMPLATE_COLUMNS))})"
)


_CACHED: Final = 256
"""Templates whose :class:`_Shared` a storage keeps (one per task in practice)."""


def shared_values(template: NewJob, t: int) -> tuple[Any, ...]:
    """The values of :data:`TEMPLATE_COLUMNS` after the first three, for jobs of
    ``template`` enqueued at ``t`` (taken from :func:`job_row`)."""
    row = dict(zip(JOB_COLUMNS, job_row(template, t), strict=True))
    return tuple(row[c] for c in TEMPLATE_COLUMNS[len(_PER_JOB) :])


class _Shared:
    """:func:`shared_values` of one template as a function of ``t``, cheap per call.

    Of the shared values only ``enqueued_at`` (``t``), and ``run_at`` and ``expires_at``
    when they follow the storage's clock (``t`` + delay [+ schedule-to-start]), depend on
    ``t``, each as ``t`` plus a constant, and they are adjacent columns: found by
    comparing the values at ``t = 0`` and ``t = 1`` (so :func:`job_row` stays the one
    rule), kept as the values before them, their offsets and the values after them.
    """

    __slots__ = ("_head", "_offsets", "_tail", "insert")

    def __init__(self, template: NewJob) -> None:
        at0, at1 = shared_values(template, 0), shared_values(template, 1)
        moving = [i for i, (a, b) in enumerate(zip(at0, at1, strict=True)) if a != b]
        lo, hi = moving[0], moving[-1] + 1
        if moving != list(range(lo, hi)) or any(at1[i] != at0[i] + 1 for i in moving):
            raise AssertionError(f"unexpected clock-dependent columns {moving}")
        self._head, self._offsets, self._tail = at0[:lo], at0[lo:hi], at0[hi:]
        self.insert = _literal_insert(self._head, len(self._offsets), self._tail)
        """SQLite's ``INSERT`` of this template's rows with the constant values written in
        the statement (``None`` when one cannot be): its rows are ``job + times(t)``."""

    def at(self, t: int) -> tuple[Any, ...]:
        """``shared_values(template, t)``."""
        return self._head + tuple([t + o for o in self._offsets]) + self._tail

    def times(self, t: int) -> tuple[int, ...]:
        """The values of ``at(t)`` that follow ``t`` (those ``insert`` binds per row)."""
        return tuple([t + o for o in self._offsets])


def _literal(value: Any) -> str | None:
    """``value`` as an SQLite literal (what binding it stores), or ``None``."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"  # as sqlite3 binds a bool
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and "\x00" not in value:
        return "'" + value.replace("'", "''") + "'"
    return None


def _literal_insert(head: tuple[Any, ...], moving: int, tail: tuple[Any, ...]) -> str | None:
    """The ``INSERT`` of :data:`TEMPLATE_COLUMNS` binding the per-job values and the
    ``moving`` clock-dependent ones, the others written as literals. SQLite then knows
    the state, the concurrency key and the other constants when it prepares the
    statement, so it skips the partial indexes whose condition they make false instead
    of testing each per row: ``executemany`` of 1,000-row batches took about half the
    CPU per row of the all-bound statement (7 against 14 µs on this machine)."""
    maybe = [_literal(v) for v in head + tail]
    fixed = [f for f in maybe if f is not None]
    if len(fixed) != len(maybe):
        return None
    values = ["?"] * len(_PER_JOB) + fixed[: len(head)] + ["?"] * moving + fixed[len(head) :]
    return f"INSERT INTO qc_jobs ({', '.join(TEMPLATE_COLUMNS)}) VALUES ({', '.join(values)})"


def plain_template(template: NewJob) -> bool:
    """True when :meth:`SQLStorage.enqueue` would insert ``template``'s jobs as they are."""
    return (
        template.unique_key is None
        and template.rate_key is None
        and not (template.concurrency_skip and template.concurrency_key is not None)
    )


def shared_of(storage: Any, template: NewJob) -> _Shared:
    """``template``'s :class:`_Shared`, built once per template and kept by ``storage``."""
    cache = storage.__dict__.setdefault("_template_shared", {})
    hit = cache.get(id(template))
    if hit is None or hit[0] is not template:
        if len(cache) >= _CACHED:
            cache.clear()
        hit = cache[id(template)] = (template, _Shared(template))
    shared: _Shared = hit[1]
    return shared


class SQLiteTemplateEnqueue:
    """``enqueue_template`` for :class:`~backends.sql.sqlite.SQLiteStorage`."""

    if TYPE_CHECKING:

        def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]: ...

        def _tx(self) -> Any: ...

        def _stmt(self) -> Any: ...

        def _clock(self, now: int | None) -> int: ...

    def enqueue_template(
        self, template: NewJob, jobs: Sequence[tuple[str, bytes, int]], *, now: int | None = None
    ) -> None:
        """See :meth:`queue_core.storage.SupportsTemplateEnqueue.enqueue_template`."""
        if not jobs:
            return
        if not plain_template(template):
            self.enqueue(expand_template(template, jobs), now=now)
            return
        shared = shared_of(self, template)
        sql = shared.insert
        per_row = shared.times if sql is not None else shared.at
        if sql is None:
            sql = INSERT_TEMPLATE
        if len(jobs) == 1:  # one statement: atomic on its own, no BEGIN ... COMMIT
            with self._stmt() as cur:
                cur.execute(sql, jobs[0] + per_row(self._clock(now)))
            return
        with self._tx() as cur:
            values = per_row(self._clock(now))
            cur.executemany(sql, [job + values for job in jobs])
