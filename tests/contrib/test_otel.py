"""contrib.otel: a producer's span continues in the worker (in-memory exporter)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from contrib.otel import instrument
from queue_core import JobState, Queue
from queue_core.app.events import job_headers


@pytest.fixture
def traced() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
def test_the_attempt_span_is_a_child_of_the_producers_span(
    traced: tuple[TracerProvider, InMemorySpanExporter], url: str, tmp_path: Path
) -> None:
    provider, exporter = traced
    queue = Queue(url if url == "memory://" else f"sqlite:///{tmp_path / 'q.db'}")
    queue.migrate()
    instrument(queue, provider)

    @queue.task(name="flaky", max_retries=1, retry_backoff="1ms", retry_jitter=0)
    def flaky(n: int) -> int:
        if n == 0:
            raise ValueError("no")
        return n

    tracer = provider.get_tracer("producer")
    with tracer.start_as_current_span("handle request") as request:
        ok = flaky.delay(1)
        bad = flaky.delay(0)
    other = flaky.delay(2)  # outside any span: a trace of its own
    queue.run_worker(burst=True, install_signal_handlers=False)
    assert ok.status() is JobState.SUCCEEDED and bad.status() is JobState.DEAD
    assert other.status() is JobState.SUCCEEDED
    spans = exporter.get_finished_spans()
    attempts = [s for s in spans if s.name == "flaky attempt"]
    enqueues = {s.context.span_id: s for s in spans if s.name == "queue_core enqueue"}
    trace_id = request.get_span_context().trace_id
    by_job = {
        (s.attributes["queue_core.job_id"], s.attributes["queue_core.attempt"]): s for s in attempts
    }
    assert set(by_job) == {(ok.id, 1), (bad.id, 1), (bad.id, 2), (other.id, 1)}
    for key in [(ok.id, 1), (bad.id, 1), (bad.id, 2)]:
        span = by_job[key]
        assert span.context.trace_id == trace_id and span.kind is SpanKind.CONSUMER
        parent = enqueues[span.parent.span_id]  # the enqueue span, under the request
        assert parent.parent.span_id == request.get_span_context().span_id
    assert by_job[(other.id, 1)].context.trace_id != trace_id
    assert by_job[(ok.id, 1)].attributes["queue_core.outcome"] == "succeeded"
    assert by_job[(ok.id, 1)].status.status_code is StatusCode.OK
    last = by_job[(bad.id, 2)]
    assert last.attributes["queue_core.outcome"] == "failed"
    assert last.attributes["queue_core.action"] == "dead"
    assert last.status.status_code is StatusCode.ERROR
    # the trace context travelled in the job itself
    assert "traceparent" in job_headers_of(queue, ok.id)
    queue.close()


def job_headers_of(queue: Queue, job_id: str) -> dict[str, str]:
    record = queue.storage().get_job(job_id)
    assert record is not None

    class _J:  # job_headers reads only .options
        options = record.options

    return job_headers(_J())  # type: ignore[arg-type]


def test_importing_the_core_never_imports_opentelemetry() -> None:
    code = (
        "import sys, queue_core, queue_core.worker, queue_core.app.events, contrib.otel, "
        "contrib.cli\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
