"""The dashboard's flow pages: executions (``/flows``) and one execution with its
timeline (``/flows/{execution_id}``), on a storage with the ``SupportsFlows`` ability.

The timeline has one bar per attempt of each step (``extract #1``, ``extract #2``),
placed by its start and end on the execution's time axis; a running attempt reaches
"now". Steps that never ran are listed under it with their state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from queue_core import NotFound, Queue, SupportsFlows
from queue_core.flows import ExecutionState, StepRun, StepState

if TYPE_CHECKING:
    from contrib.dashboard.app import _Dashboard

__all__ = ["TimelineBar", "flow_routes", "timeline"]

_NOT_STARTED = (StepState.PENDING, StepState.QUEUED, StepState.NOT_RUN)


@dataclass(frozen=True)
class TimelineBar:
    """One attempt on the timeline: its label, outcome and place in percent."""

    label: str
    step_id: str
    number: int
    outcome: str
    reason: str | None
    job_id: str | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: float | None
    left: float
    """Percent of the axis before the bar starts."""
    width: float
    """Percent of the axis the bar covers (at least 0.5, so a short attempt shows)."""


def _ms(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp() * 1000.0


def timeline(steps: list[StepRun], now_ms: float) -> tuple[list[TimelineBar], list[StepRun]]:
    """The bars of every attempt, oldest start first, and the steps with no attempt
    running or done yet (``pending``, ``queued`` for a first attempt, ``not_run``)."""
    spans: list[tuple[StepRun, Any, float, float]] = []
    for step in steps:
        for attempt in step.attempts:
            start = _ms(attempt.started_at)
            if start is None:
                continue
            end = _ms(attempt.finished_at)
            spans.append((step, attempt, start, now_ms if end is None else end))
    waiting = [s for s in steps if s.state in _NOT_STARTED and not s.attempts]
    if not spans:
        return [], waiting
    t0 = min(s[2] for s in spans)
    total = max(max(s[3] for s in spans) - t0, 1.0)
    bars = []
    for step, attempt, start, end in sorted(spans, key=lambda s: (s[2], s[1].number)):
        left = (start - t0) / total * 100.0
        bars.append(
            TimelineBar(
                label=f"{step.step_id} #{attempt.number}",
                step_id=step.step_id,
                number=attempt.number,
                outcome="running" if attempt.outcome is None else attempt.outcome.value,
                reason=attempt.reason,
                job_id=step.job_id,
                started_at=attempt.started_at,
                finished_at=attempt.finished_at,
                duration_ms=None if attempt.finished_at is None else end - start,
                left=round(left, 3),
                width=round(max((end - start) / total * 100.0, 0.5), 3),
            )
        )
    return bars, waiting


class _FlowPages:
    def __init__(self, dash: _Dashboard) -> None:
        self.dash = dash
        self._queue: Queue | None = dash.queue

    def _flows_queue(self) -> Queue | None:
        if not isinstance(self.dash.storage, SupportsFlows):
            return None
        if self._queue is None:  # a dashboard on a bare storage: a Queue to read through
            self._queue = Queue(storage=self.dash.storage)
        return self._queue

    def executions(self, request: Request) -> Response:
        from contrib.dashboard.app import PAGE_SIZE, _positive_int

        queue = self._flows_queue()
        q = request.query_params
        flow = q.get("flow") or None
        state_text = q.get("state") or None
        states = [s.value for s in ExecutionState]
        if state_text is not None and state_text not in states:
            raise HTTPException(
                400, f"invalid state {state_text!r}: expected one of {', '.join(states)}"
            )
        page_no = _positive_int(q.get("page"), "page", 1)
        rows = []
        if queue is not None:
            rows = queue.executions(flow, state_text, PAGE_SIZE + 1, (page_no - 1) * PAGE_SIZE)
        return self.dash.render(
            request,
            "flows.html",
            {
                "page": "flows",
                "supported": queue is not None,
                "storage_name": type(self.dash.storage).__name__,
                "executions": rows[:PAGE_SIZE],
                "has_next": len(rows) > PAGE_SIZE,
                "page_no": page_no,
                "filters": {"flow": flow, "state": state_text},
                "states": states,
                "refresh": self.dash.refresh if queue is not None else None,
            },
        )

    def execution(self, request: Request) -> Response:
        queue = self._flows_queue()
        execution_id = request.path_params["execution_id"]
        if queue is None:
            raise HTTPException(
                404,
                f"storage {type(self.dash.storage).__name__} has no flow executions "
                "(it lacks the SupportsFlows ability)",
            )
        try:
            handle = queue.execution(execution_id)
            info = handle.info()
            steps = handle.steps()
        except NotFound as exc:
            raise HTTPException(404, f"no flow execution with id {execution_id!r}") from exc
        bars, waiting = timeline(steps, time.time() * 1000.0)
        finished = info.state not in (
            ExecutionState.QUEUED,
            ExecutionState.RUNNING,
            ExecutionState.CANCELLING,
        )
        return self.dash.render(
            request,
            "execution.html",
            {
                "page": "flows",
                "info": info,
                "steps": steps,
                "bars": bars,
                "waiting": waiting,
                "refresh": None if finished else self.dash.refresh,
            },
        )


def flow_routes(dash: _Dashboard) -> list[Route]:
    """The routes of the flow pages, for :func:`contrib.dashboard.create_app`."""
    pages = _FlowPages(dash)
    return [
        Route("/flows", pages.executions, name="flows"),
        Route("/flows/{execution_id}", pages.execution, name="execution"),
    ]
