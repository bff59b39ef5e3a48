"""PostgreSQL's :class:`~queue_core.storage.SupportsTemplateEnqueue`: ``Task.map``'s batch
streamed by ``COPY`` as template rows.

A batch of at least :data:`~backends.sql.pgcopy.COPY_MIN` plain jobs goes by ``COPY`` in
:data:`~backends.sql.template.TEMPLATE_COLUMNS` order: each row is the job's ``(id,
payload, lost_delay_ms)`` followed by the values the batch shares (computed once, as
SQLite's template rows: ``backends/sql/template.py``), with no
:class:`~queue_core.model.NewJob` or :func:`~backends.sql.records.job_row` per job. A
single job (``delay()``) is ``insert_job`` with the template's parameters (kept per
template) and its own three; another small batch, or a template that is not plain, goes
through :meth:`SQLStorage.enqueue` with the jobs
:func:`~queue_core.jobbuild.expand_template` builds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from backends.sql import pgcopy
from backends.sql.records import JOB_COLUMNS
from backends.sql.template import TEMPLATE_COLUMNS, plain_template, shared_of
from queue_core.jobbuild import expand_template
from queue_core.model import JobState, NewJob

__all__ = ["COPY_TEMPLATE", "PostgresTemplateEnqueue", "TEMPLATE_TYPES"]

_TYPE_OF: Final = dict(zip(JOB_COLUMNS, pgcopy.COPY_TYPES, strict=True))
TEMPLATE_TYPES: Final = tuple(_TYPE_OF[c] for c in TEMPLATE_COLUMNS)
"""The binary ``COPY`` type of each of :data:`TEMPLATE_COLUMNS`."""
COPY_TEMPLATE: Final = f"COPY qc_jobs ({', '.join(TEMPLATE_COLUMNS)}) FROM STDIN (FORMAT BINARY)"


def _one_params(storage: Any, template: NewJob) -> dict[str, Any]:
    """``insert_job``'s parameters of ``template``, built once per template per storage."""
    cache = storage.__dict__.setdefault("_template_params", {})
    hit = cache.get(id(template))
    if hit is None or hit[0] is not template:
        from backends.sql.postgresql import _job_params  # postgresql.py imports this module

        if len(cache) >= 256:
            cache.clear()
        hit = cache[id(template)] = (template, _job_params(template))
    params: dict[str, Any] = hit[1]
    return params


class PostgresTemplateEnqueue:
    """``enqueue_template`` for :class:`~backends.sql.postgresql.PostgresStorage`."""

    if TYPE_CHECKING:

        def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]: ...

        def _stmt(self) -> Any: ...

        def _server_now(self, cur: Any) -> int: ...

        def _notify(self, cur: Any) -> None: ...

        _q: Mapping[str, str]

    def enqueue_template(
        self, template: NewJob, jobs: Sequence[tuple[str, bytes, int]], *, now: int | None = None
    ) -> None:
        """See :meth:`queue_core.storage.SupportsTemplateEnqueue.enqueue_template`."""
        if not jobs:
            return
        if len(jobs) == 1 and plain_template(template):  # a delay(): insert_job, as enqueue
            params = {**_one_params(self, template), "now": now}
            params["id"], params["payload"], params["lost_delay_ms"] = jobs[0]
            with self._stmt() as cur:
                cur.execute(self._q["insert_job"], params)
            return
        if len(jobs) < pgcopy.COPY_MIN or not plain_template(template):
            self.enqueue(expand_template(template, jobs), now=now)
            return
        shared = shared_of(self, template)

        def rows(t: int) -> list[tuple[Any, ...]]:
            values = shared.at(t)
            return [job + values for job in jobs]

        with self._stmt() as cur:
            pgcopy.copy_rows(
                cur, COPY_TEMPLATE, TEMPLATE_TYPES, rows, now, self._server_now, self._notify
            )
