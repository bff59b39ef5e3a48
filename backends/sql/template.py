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

__all__ = ["INSERT_TEMPLATE", "SQLiteTemplateEnqueue", "TEMPLATE_COLUMNS", "shared_values"]

_PER_JOB: Final = ("id", "payload", "lost_delay_ms")
TEMPLATE_COLUMNS: Final = _PER_JOB + tuple(c for c in JOB_COLUMNS if c not in _PER_JOB)
"""The columns of :data:`INSERT_TEMPLATE`: the per-job three, then those a batch shares."""

INSERT_TEMPLATE: Final = (
    f"INSERT INTO qc_jobs ({', '.join(TEMPLATE_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(TEMPLATE_COLUMNS))})"
)


def shared_values(template: NewJob, t: int) -> tuple[Any, ...]:
    """The values of :data:`TEMPLATE_COLUMNS` after the first three, for jobs of
    ``template`` enqueued at ``t`` (taken from :func:`job_row`)."""
    row = dict(zip(JOB_COLUMNS, job_row(template, t), strict=True))
    return tuple(row[c] for c in TEMPLATE_COLUMNS[len(_PER_JOB) :])


def _plain(template: NewJob) -> bool:
    """True when :meth:`SQLStorage.enqueue` would insert ``template``'s jobs as they are."""
    return (
        template.unique_key is None
        and template.rate_key is None
        and not (template.concurrency_skip and template.concurrency_key is not None)
    )


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
        if not _plain(template):
            self.enqueue(expand_template(template, jobs), now=now)
            return
        if len(jobs) == 1:  # one statement: atomic on its own, no BEGIN ... COMMIT
            with self._stmt() as cur:
                cur.execute(INSERT_TEMPLATE, jobs[0] + shared_values(template, self._clock(now)))
            return
        with self._tx() as cur:
            shared = shared_values(template, self._clock(now))
            cur.executemany(INSERT_TEMPLATE, [job + shared for job in jobs])
