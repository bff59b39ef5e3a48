"""Redis's :class:`~queue_core.storage.SupportsTemplateEnqueue` (``Task.map`` and, with no
per-call options, ``Task.delay``).

The jobs of a template differ only in id, payload and lost delay, so the arguments
``enqueue_plain.lua`` (``enqueue_one.lua`` for one job) takes per job are the template's
seven shared values around those three, with no :class:`~queue_core.model.NewJob` built
per job and no per-job check that it is plain (the template is checked once). A template
that is not plain goes through :meth:`RedisStorage.enqueue` with the jobs built by
:func:`~queue_core.jobbuild.expand_template`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from backends.redis.limits import _is_plain
from queue_core.jobbuild import expand_template
from queue_core.model import JobState, NewJob

__all__ = ["RedisTemplateEnqueue"]


class RedisTemplateEnqueue:
    """``enqueue_template`` for :class:`~backends.redis.storage.RedisStorage`."""

    if TYPE_CHECKING:

        def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]: ...

        def _args(self, now: int | None) -> list[Any]: ...

        def _run_plain(self, args: list[Any], n: int) -> None: ...

    def enqueue_template(
        self, template: NewJob, jobs: Sequence[tuple[str, bytes, int]], *, now: int | None = None
    ) -> None:
        """See :meth:`queue_core.storage.SupportsTemplateEnqueue.enqueue_template`."""
        if not jobs:
            return
        if not _is_plain(template):
            self.enqueue(expand_template(template, jobs), now=now)
            return
        t = template
        head = (t.task_name, t.queue)
        mid = (t.priority, "" if t.run_at is None else t.run_at, t.delay_ms, t.max_attempts)
        tail = ("" if t.timeout_ms is None else t.timeout_ms,)
        args = self._args(now)
        for job_id, payload, lost in jobs:  # enqueue_plain.lua's 10 arguments per job
            args += (job_id, *head, payload, *mid, lost, *tail)
        self._run_plain(args, len(jobs))
