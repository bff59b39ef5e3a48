"""OpenTelemetry tracing: a producer's trace continues in the worker
(``pip install 'queue-core[otel]'``).

::

    from contrib.otel import instrument

    queue = Queue("sqlite:///jobs.db")
    instrument(queue)            # before enqueueing and in the worker's APP module

Then every enqueue made inside a span carries that span's context with the job, and
the worker runs each attempt inside a span that is its child:

* at enqueue: a ``PRODUCER`` span ``queue_core enqueue`` (child of the current span,
  if any) whose context is injected (W3C ``traceparent``/``tracestate``, or whatever
  propagator is configured) into the job's headers, which travel in the job's options
  on every backend;
* in the worker: a ``CONSUMER`` span ``<task> attempt`` from the attempt's start to
  its end, with attributes ``queue_core.job_id``, ``queue_core.app.task``,
  ``queue_core.queue``, ``queue_core.attempt``, ``queue_core.outcome``,
  ``queue_core.reason`` and ``queue_core.action``; status ``ERROR`` unless the attempt
  succeeded.

Spans go to the tracer provider given to :func:`instrument` (default: the global one
that your OpenTelemetry setup installs). Inside the task body the attempt span is the
current span, so spans the body starts are its children: async bodies (in their task),
thread bodies (in their body thread) and process-isolated bodies (the child gets the
span's context as W3C headers and attaches it: :func:`carried_context`, through
:meth:`~queue_core.app.events.WorkerListener.attempt_carrier`). The child needs an
OpenTelemetry SDK set up itself (e.g. at import of the task's module) to export its
spans; without one they are non-recording, as anywhere.

``opentelemetry`` is imported only when :func:`instrument` or :class:`TracingListener`
is used: importing this module without the extra installed is fine.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from queue_core import ConfigError, Queue
from queue_core.app.events import (
    AttemptEnded,
    AttemptStarted,
    WorkerListener,
    job_headers,
)
from queue_core.records.jobs import ClaimedJob, Outcome

__all__ = ["TracingListener", "carried_context", "instrument", "trace_headers"]

_SCOPE = "queue_core"


def _otel() -> Any:
    try:
        import opentelemetry.propagate
        import opentelemetry.trace
    except ImportError as exc:
        raise ConfigError(
            f"tracing needs opentelemetry-api ({exc}): pip install 'queue-core[otel]'",
            code="missing_driver",
            field="otel",
        ) from exc
    return opentelemetry


def trace_headers(tracer_provider: Any = None) -> dict[str, str]:
    """Start and end a ``queue_core enqueue`` producer span under the current span and
    return its context as headers (what :func:`instrument` adds to every job)."""
    otel = _otel()
    tracer = otel.trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
    carrier: dict[str, str] = {}
    with tracer.start_as_current_span("queue_core enqueue", kind=otel.trace.SpanKind.PRODUCER):
        otel.propagate.inject(carrier)
    return carrier


class TracingListener(WorkerListener):
    """A worker listener that runs each attempt in a span (see the module docstring)."""

    def __init__(self, tracer_provider: Any = None) -> None:
        self._otel = _otel()
        self._tracer = self._otel.trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        self._spans: dict[tuple[str, int], Any] = {}
        self._lock = threading.Lock()

    def _span(self, job: ClaimedJob, worker_id: str | None) -> Any:
        """The attempt's span, started by whichever comes first: the attempt's start
        event (on the loop) or its body's scope (a body started from the claim thread
        may run before the loop hears of it)."""
        key = (job.id, job.attempt)
        with self._lock:
            span = self._spans.get(key)
            if span is None:
                parent = self._otel.propagate.extract(job_headers(job))
                span = self._spans[key] = self._tracer.start_span(
                    f"{job.task_name} attempt",
                    context=parent,
                    kind=self._otel.trace.SpanKind.CONSUMER,
                    attributes={
                        "queue_core.job_id": job.id,
                        "queue_core.app.task": job.task_name,
                        "queue_core.queue": job.queue,
                        "queue_core.attempt": job.attempt,
                    },
                )
        if worker_id is not None:
            span.set_attribute("queue_core.worker_id", worker_id)
        return span

    def attempt_started(self, event: AttemptStarted) -> None:
        self._span(event.job, event.worker_id)

    def attempt_scope(self, job: ClaimedJob) -> AbstractContextManager[object] | None:
        """The attempt span as the current span while the body runs (not ended there)."""
        return self._otel.trace.use_span(  # type: ignore[no-any-return]
            self._span(job, None),
            end_on_exit=False,
            record_exception=False,
            set_status_on_exception=False,
        )

    def attempt_carrier(self, job: ClaimedJob) -> tuple[str, Mapping[str, str]] | None:
        """The attempt span's context as headers, for a process-isolated body."""
        carrier: dict[str, str] = {}
        span = self._span(job, None)
        self._otel.propagate.inject(carrier, context=self._otel.trace.set_span_in_context(span))
        return "contrib.otel:carried_context", carrier

    def attempt_ended(self, event: AttemptEnded) -> None:
        job = event.job
        with self._lock:
            span = self._spans.pop((job.id, job.attempt), None)
        if span is None:  # started before this listener was attached
            return
        span.set_attribute("queue_core.outcome", event.outcome.value)
        span.set_attribute("queue_core.action", event.action.value)
        if event.reason is not None:
            span.set_attribute("queue_core.reason", event.reason)
        status = self._otel.trace.Status
        if event.outcome is Outcome.SUCCEEDED:
            span.set_status(status(self._otel.trace.StatusCode.OK))
        else:
            detail = event.error_class or event.reason or event.outcome.value
            span.set_status(status(self._otel.trace.StatusCode.ERROR, detail))
        span.end()


@contextmanager
def carried_context(carrier: Mapping[str, str]) -> Iterator[None]:
    """In a process-isolated body's child: the carried attempt span context is the current
    context while the body runs (see :meth:`TracingListener.attempt_carrier`)."""
    otel = _otel()
    import opentelemetry.context

    token = opentelemetry.context.attach(otel.propagate.extract(dict(carrier)))
    try:
        yield
    finally:
        opentelemetry.context.detach(token)


def instrument(queue: Queue, tracer_provider: Any = None) -> TracingListener:
    """Trace ``queue``: inject the producer's trace context at every enqueue and run
    every attempt of every worker of this queue in a child span.

    Returns:
        The :class:`TracingListener` registered on the queue's workers.

    Raises:
        ConfigError: ``opentelemetry-api`` is not installed (code ``missing_driver``).
    """
    listener = TracingListener(tracer_provider)
    queue.add_header_provider(lambda: trace_headers(tracer_provider))
    queue.add_worker_listener(listener)
    return listener
