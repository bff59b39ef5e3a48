"""What a worker tells its listeners: a typed hook for metrics, tracing and the like.

Producers attach headers to jobs (:data:`HeaderProvider`, ``queue.add_header_provider``)
that the worker's listeners read back (:func:`job_headers`): that is how a trace context
travels from the enqueueing code to the attempt (``contrib.otel``).

Subclass :class:`WorkerListener`, override the methods you need, and hand instances to
``Worker(queue, listeners=[...])`` (or ``queue.run_worker(listeners=[...])``), or
register them once on the Queue with ``queue.add_worker_listener(listener)`` so every
worker of that Queue (the ``queue-core worker`` command included) calls them.

The methods run on the worker's event loop thread, inline: keep them short (update a
counter, start or end a span). An exception from a listener is logged (logger
``queue_core.worker``) and otherwise ignored: a listener never breaks a worker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from queue_core.records.base import Record
from queue_core.records.jobs import (
    Action,
    ClaimedJob,
    NewJob,
    Outcome,
)

__all__ = [
    "HEADERS_KEY",
    "AttemptEnded",
    "AttemptStarted",
    "HeaderProvider",
    "WorkerListener",
    "WorkerView",
    "job_headers",
    "with_headers",
]


class WorkerView(Protocol):
    """What a listener may read of the worker it listens to (thread-safe reads)."""

    @property
    def id(self) -> str: ...

    @property
    def slots(self) -> int: ...

    def stats(self) -> dict[str, Any]:
        """``slots``, ``running``, ``stuck``, ``free``, ``processed``, ... (see
        :meth:`queue_core.worker.Worker.stats`)."""
        ...


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AttemptStarted(Record):
    """An attempt this worker claimed and starts now."""

    job: ClaimedJob
    worker_id: str

    @property
    def pickup_ms(self) -> int | None:
        """Storage clock ms from when the job was due (``run_at``) to this attempt's
        start, or ``None`` when the storage does not report ``run_at``."""
        if self.job.run_at is None:
            return None
        return max(0, self.job.started_at - self.job.run_at)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AttemptEnded(Record):
    """An attempt's end as the worker records it (once per attempt)."""

    job: ClaimedJob
    worker_id: str
    outcome: Outcome
    reason: str | None
    """Attempt reason (``error``, ``timeout``, ...), ``None`` for a success."""
    action: Action
    """The core's decision: ``complete``, ``retry``, ``dead``, ..."""
    duration_s: float
    """Seconds from the claim to the end, by the worker's monotonic clock."""
    error_class: str | None = None


class WorkerListener:
    """Base class of worker listeners: every method does nothing until overridden."""

    def worker_started(self, worker: WorkerView) -> None:
        """The worker starts (before its first claim)."""

    def attempt_started(self, event: AttemptStarted) -> None:
        """An attempt was claimed and its body starts."""

    def attempt_ended(self, event: AttemptEnded) -> None:
        """An attempt ended; its end is buffered for the storage."""

    def worker_stopped(self, worker: WorkerView) -> None:
        """The worker stopped (after its last recorded end)."""

    def attempt_scope(self, job: ClaimedJob) -> AbstractContextManager[object] | None:
        """A context the attempt's async or thread body runs in, entered in the body's
        own task or thread (e.g. a tracing span made current); ``None``: none. It may be
        called before :meth:`attempt_started` (a body started from the claim thread).
        See :mod:`queue_core.worker.scopes`."""
        return None

    def attempt_carrier(self, job: ClaimedJob) -> tuple[str, Mapping[str, str]] | None:
        """For a process-isolated body: ``("module:factory", data)``; the child imports
        the factory and runs the body inside ``factory(data)`` (a context manager);
        ``None``: nothing to carry."""
        return None


HEADERS_KEY = "headers"
"""Key of the job's string headers in its per-call options JSON."""


HeaderProvider = Callable[[], Mapping[str, str]]
"""Called at every enqueue (``Queue.add_header_provider``): string headers to carry
with the job to its worker, e.g. a trace context (``{"traceparent": ...}``)."""


def with_headers(jobs: Sequence[NewJob], providers: Sequence[HeaderProvider]) -> list[NewJob]:
    """``jobs`` with the providers' headers merged into their options JSON (under
    :data:`HEADERS_KEY`; a job without options gets ``{"headers": {...}}``). Headers
    travel in the options every storage keeps verbatim, so no schema change is needed."""
    headers: dict[str, str] = {}
    for provider in providers:
        headers.update(provider())
    if not headers:
        return list(jobs)
    out = []
    for job in jobs:
        opts = json.loads(job.options) if job.options else {}
        opts[HEADERS_KEY] = {**opts.get(HEADERS_KEY, {}), **headers}
        text = json.dumps(opts, separators=(",", ":"), sort_keys=True)
        out.append(replace(job, options=text))
    return out


def job_headers(job: ClaimedJob) -> dict[str, str]:
    """The headers a producer attached to ``job`` (``Queue.add_header_provider``)."""
    if not job.options or HEADERS_KEY not in job.options:
        return {}
    found = json.loads(job.options).get(HEADERS_KEY)
    return dict(found) if isinstance(found, Mapping) else {}
