"""Task bodies for tests/contrib/test_otel_body_spans.py (importable by a process child)."""

from __future__ import annotations

import asyncio

from opentelemetry import trace


def current_ids() -> tuple[int, int]:
    """(trace id, span id) of the span current where it is called."""
    ctx = trace.get_current_span().get_span_context()
    return ctx.trace_id, ctx.span_id


def in_thread() -> list[int]:
    with trace.get_tracer("body").start_as_current_span("inner thread"):
        pass
    return list(current_ids())


async def in_task() -> list[int]:
    await asyncio.sleep(0)
    with trace.get_tracer("body").start_as_current_span("inner async"):
        await asyncio.sleep(0)
    return list(current_ids())


def in_child() -> list[int]:
    return list(current_ids())
