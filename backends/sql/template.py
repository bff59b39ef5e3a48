"""``Task.map``'s batch and a plain ``delay()`` as template rows on the SQL backend
(:class:`~queue_core.storage.abilities.SupportsTemplateEnqueue`).

A plain batch (jobs that differ only in id, payload and lost delay) used to become one
:class:`~queue_core.records.jobs.NewJob` per job in the core and then one
:func:`~backends.sql.records.job_row` tuple per job here; together about a third of the
producer's CPU per job (``bench/enqueue.py sqlite --modes bulk --profile``). Here the 20
values the jobs share are computed once per template (:class:`~backends.sql.records.TemplateRows`,
from :func:`job_row`, so they are the values ``enqueue`` writes) and each row is the job's
own ``(id, payload, lost_delay_ms)`` followed by them: one tuple concatenation per job.
SQLite inserts them with ``executemany``, PostgreSQL with ``COPY`` (a single job:
``insert_job``; see the dialects). A template that is not plain (a unique or rate key, a
concurrency ``skip`` key), or a batch the dialect does not take as rows, goes through
``enqueue`` with the jobs :func:`~queue_core.records.job_factory.expand_template` builds.
"""

from __future__ import annotations

from collections.abc import Sequence

from backends.sql.jobs import Jobs
from backends.sql.records import TemplateRows
from backends.sql.store import Store
from queue_core.records.job_factory import expand_template
from queue_core.records.jobs import NewJob

__all__ = ["Templates", "plain_template"]

_CACHED = 256
"""Templates whose rows a storage keeps (one per task in practice)."""


def plain_template(template: NewJob) -> bool:
    """True when ``enqueue`` would insert ``template``'s jobs as they are."""
    return (
        template.unique_key is None
        and template.rate_key is None
        and template.concurrency_behavior is None
        and template.debounce_key is None
        and not (template.concurrency_skip and template.concurrency_key is not None)
    )


class Templates:
    """``enqueue_template`` on ``store``; other batches through ``jobs``."""

    def __init__(self, store: Store, jobs: Jobs) -> None:
        self.store = store
        self.jobs = jobs
        self._rows: dict[int, TemplateRows] = {}

    def enqueue_template(
        self, template: NewJob, jobs: Sequence[tuple[str, bytes, int]], *, now: int | None = None
    ) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsTemplateEnqueue.enqueue_template`."""
        if not jobs:
            return
        d = self.store.dialect
        if not plain_template(template) or not d.template_rows(len(jobs)):
            self.jobs.enqueue(expand_template(template, jobs), now=now)
            return
        rows = self._rows.get(id(template))
        if rows is None or rows.template is not template:
            if len(self._rows) >= _CACHED:
                self._rows.clear()
            rows = self._rows[id(template)] = TemplateRows(template)
        one = len(jobs) == 1 or d.single_statement_batches  # one statement: atomic on its own
        with self.store.stmt() if one else self.store.tx() as cur:
            d.insert_template(cur, rows, jobs, d.clock(now))
