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
  its end, with attributes ``queue_core.job_id``, ``queue_core.task``,
  ``queue_core.queue``, ``queue_core.attempt``, ``queue_core.outcome``,
  ``queue_core.reason`` and ``queue_core.action``; status ``ERROR`` unless the attempt
  succeeded.

Spans go to the tracer provider given to :func:`instrument` (default: the global one
that your OpenTelemetry setup installs). The attempt span is not made the current span
inside the task body: spans a body starts itself are not its children (yet).

``opentelemetry`` is imported only when :func:`instrument` or :class:`TracingListener`
is used: importing this module without the extra installed is fine.
"""

from __future__ import annotations

from typing import Any

from queue_core import ConfigError, Queue
from queue_core.events import AttemptEnded, AttemptStarted, WorkerListener, job_headers
from queue_core.model import Outcome

__all__ = ["TracingListener", "instrument", "trace_headers"]

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

    def attempt_started(self, event: AttemptStarted) -> None:
        job = event.job
        parent = self._otel.propagate.extract(job_headers(job))
        self._spans[(job.id, job.attempt)] = self._tracer.start_span(
            f"{job.task_name} attempt",
            context=parent,
            kind=self._otel.trace.SpanKind.CONSUMER,
            attributes={
                "queue_core.job_id": job.id,
                "queue_core.task": job.task_name,
                "queue_core.queue": job.queue,
                "queue_core.attempt": job.attempt,
                "queue_core.worker_id": event.worker_id,
            },
        )

    def attempt_ended(self, event: AttemptEnded) -> None:
        job = event.job
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
