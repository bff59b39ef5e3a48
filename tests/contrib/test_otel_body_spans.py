"""contrib.otel: the attempt span is the current span inside the task body, so spans a
body starts are its children -- async bodies, thread bodies (also those started straight
from the claim thread) and process-isolated bodies (context carried to the child)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contrib.otel import instrument
from queue_core import JobState, Queue
from tests.contrib import otel_bodies


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """An in-memory exporter on a provider that the body's ``trace.get_tracer`` uses."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # the body calls the global API, as user code does: route it to this provider
    original = trace.get_tracer_provider
    trace.get_tracer_provider = lambda: provider  # type: ignore[assignment]
    try:
        yield exporter
    finally:
        trace.get_tracer_provider = original  # type: ignore[assignment]


def test_spans_started_in_a_body_are_children_of_the_attempt_span(
    exporter: InMemorySpanExporter,
) -> None:
    queue = Queue("memory://")
    instrument(queue)
    thread = queue.task(name="in_thread")(otel_bodies.in_thread)
    async_ = queue.task(name="in_task")(otel_bodies.in_task)
    child = queue.task(name="in_child", isolation="process")(otel_bodies.in_child)
    handles = {"thread": thread.delay(), "async": async_.delay(), "process": child.delay()}
    queue.run_worker(burst=True, install_signal_handlers=False)
    for h in handles.values():
        assert h.status() is JobState.SUCCEEDED
    spans = exporter.get_finished_spans()
    attempt = {s.attributes["queue_core.app.task"]: s for s in spans if s.name.endswith(" attempt")}
    inner = {s.name: s for s in spans if s.name.startswith("inner")}
    assert set(attempt) == {"in_thread", "in_task", "in_child"}
    for task, name in (("in_thread", "inner thread"), ("in_task", "inner async")):
        parent = attempt[task].get_span_context()
        assert inner[name].parent is not None
        assert (inner[name].parent.trace_id, inner[name].parent.span_id) == (
            parent.trace_id,
            parent.span_id,
        )
    # each body saw its attempt span as the current span (the child through the carrier)
    for task, h in (("in_thread", "thread"), ("in_task", "async"), ("in_child", "process")):
        ctx = attempt[task].get_span_context()
        assert handles[h].result(timeout=5) == [ctx.trace_id, ctx.span_id], task
    queue.close()


def test_without_tracing_the_body_is_called_unwrapped() -> None:
    from queue_core.app.events import WorkerListener
    from queue_core.worker.scopes import scoped, scoped_async

    def body() -> None:
        return None

    async def abody() -> None:
        return None

    job = object()
    assert scoped([WorkerListener()], job, body) is body  # type: ignore[arg-type]
    assert scoped_async([], job, abody) is abody  # type: ignore[arg-type]
