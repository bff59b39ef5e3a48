"""The dashboard's flow pages: executions (``/flows``) and one execution with its
timeline (``/flows/{execution_id}``), on a storage with the ``SupportsFlows`` ability;
its ``Retry`` and ``Replay`` buttons (``POST /flows/{execution_id}/retry`` and
``/replay``, with the CSRF token; not on a read-only dashboard) where the storage has
``SupportsWorkflows`` (SPEC §12).

The timeline has one bar per attempt of each step (``extract #1``, ``extract #2``),
placed by its start and end on the execution's time axis; a running attempt reaches
"now". A workflow's ``ctx.step`` results, sleeps and event waits (its history) are bars
too (``step fetch``, ``sleep #1``, ``wait approval [42]``); its children are steps. Steps
that never ran are listed under it with their state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from contrib.dashboard.pages import PAGE_SIZE, DashboardHost, page_offset
from queue_core import ConfigError, ExecutionFailed, NotFound, Queue, SupportsFlows
from queue_core.flows import ExecutionState, HistoryEntry, StepRun, StepState
from queue_core.storage.abilities import SupportsWorkflows

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


_Span = tuple[str, str, int, str, str | None, str | None, Any, Any, float, float, bool]
"""label, step id, number, outcome, reason, job id, started, finished, start ms, end ms,
whether the end is known."""


def timeline(
    steps: list[StepRun], now_ms: float, history: list[HistoryEntry] | None = None
) -> tuple[list[TimelineBar], list[StepRun]]:
    """The bars of every attempt and of a workflow's history (its steps, sleeps and
    waits), oldest start first, and the steps with no attempt running or done yet
    (``pending``, ``queued`` for a first attempt, ``not_run``)."""
    spans: list[_Span] = []
    for step in steps:
        for attempt in step.attempts:
            start = _ms(attempt.started_at)
            if start is None:
                continue
            end = _ms(attempt.finished_at)
            outcome = "running" if attempt.outcome is None else attempt.outcome.value
            spans.append((f"{step.step_id} #{attempt.number}", step.step_id, attempt.number,
                          outcome, attempt.reason, step.job_id, attempt.started_at,
                          attempt.finished_at, start, now_ms if end is None else end,
                          end is not None))  # fmt: skip
    with_attempts = {s.step_id for s in steps if s.attempts}
    spans += _history_spans([h for h in history or [] if h.name not in with_attempts], now_ms)
    waiting = [s for s in steps if s.state in _NOT_STARTED and not s.attempts]
    if not spans:
        return [], waiting
    t0 = min(s[8] for s in spans)
    total = max(max(s[9] for s in spans) - t0, 1.0)
    bars = []
    # starts in one millisecond (a step whose dependency ended and started it at once):
    # the one that ended first, then the earlier step, then the earlier attempt
    order = {step.step_id: i for i, step in enumerate(steps)}
    for span in sorted(spans, key=lambda s: (s[8], s[9], order.get(s[1], len(order)), s[2])):
        label, step_id, number, outcome, reason, job_id, started, finished, start, end, done = span
        bars.append(
            TimelineBar(
                label=label,
                step_id=step_id,
                number=number,
                outcome=outcome,
                reason=reason,
                job_id=job_id,
                started_at=started,
                finished_at=finished,
                duration_ms=end - start if done else None,
                left=round((start - t0) / total * 100.0, 3),
                width=round(max((end - start) / total * 100.0, 0.5), 3),
            )
        )
    return bars, waiting


def _history_spans(history: list[HistoryEntry], now_ms: float) -> list[_Span]:
    """A workflow's steps, sleeps, waits and sub-executions as spans (its child jobs are
    steps with attempts already)."""
    spans: list[_Span] = []
    for entry in history:
        start = _ms(entry.started_at or entry.ended_at)
        if start is None:
            continue
        end = _ms(entry.ended_at)
        label = {"step": "step ", "sleep": "", "wait": "wait ", "child": ""}[entry.kind]
        label += entry.name
        if entry.key is not None:
            label += f" [{entry.key}]"
        until = None if entry.until is None else f"until {entry.until.isoformat()}"
        spans.append((label, entry.name, 0, entry.state, until, None, entry.started_at,
                      entry.ended_at, start, now_ms if end is None else end,
                      end is not None))  # fmt: skip
    return spans


class _FlowPages:
    def __init__(self, dash: DashboardHost) -> None:
        self.dash = dash
        self._queue: Queue | None = dash.queue

    def _flows_queue(self) -> Queue | None:
        if not isinstance(self.dash.storage, SupportsFlows):
            return None
        if self._queue is None:  # a dashboard on a bare storage: a Queue to read through
            self._queue = Queue(storage=self.dash.storage)
        return self._queue

    def executions(self, request: Request) -> Response:

        queue = self._flows_queue()
        q = request.query_params
        flow = q.get("flow") or None
        state_text = q.get("state") or None
        states = [s.value for s in ExecutionState]
        if state_text is not None and state_text not in states:
            raise HTTPException(
                400, f"invalid state {state_text!r}: expected one of {', '.join(states)}"
            )
        page_no, offset = page_offset(q.get("page"), PAGE_SIZE)
        rows = []
        if queue is not None:
            rows = queue.executions(flow, state_text, PAGE_SIZE + 1, offset)
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
            history = handle.history()
        except NotFound as exc:
            raise HTTPException(404, f"no flow execution with id {execution_id!r}") from exc
        bars, waiting = timeline(steps, time.time() * 1000.0, history)
        finished = info.state.finished
        resumable = isinstance(self.dash.storage, SupportsWorkflows)
        failing = None
        if finished and info.state is not ExecutionState.SUCCEEDED:
            try:
                handle.result(timeout=0)
            except ExecutionFailed as exc:
                failing = _failing_attempt(steps, exc.step_id)
        return self.dash.render(
            request,
            "execution.html",
            {
                "page": "flows",
                "info": info,
                "steps": steps,
                "bars": bars,
                "waiting": waiting,
                "failing": failing,
                "refresh": None if finished else self.dash.refresh,
                "can_retry": resumable and info.state in _RESUMABLE,
                "replayable": _replayable(steps, history) if resumable and finished else [],
                "flash": _flash(request),
            },
        )

    async def resume(self, request: Request) -> Response:
        """``POST /flows/{id}/retry`` and ``/replay`` (form field ``step_id``)."""
        form = await self.dash.mutation_form(request)
        queue = self._flows_queue()
        execution_id = request.path_params["execution_id"]
        if queue is None or not isinstance(self.dash.storage, SupportsWorkflows):
            raise HTTPException(
                404,
                f"storage {type(self.dash.storage).__name__} cannot resume executions "
                "(it lacks the SupportsWorkflows ability)",
            )
        step_id = form.get("step_id") if request.url.path.endswith("/replay") else None
        if request.url.path.endswith("/replay") and not isinstance(step_id, str):
            raise HTTPException(400, "replay needs a step_id")
        try:
            handle = queue.execution(execution_id)
            state = handle.retry() if step_id is None else handle.replay(step_id)
        except NotFound as exc:
            raise HTTPException(404, f"no flow execution with id {execution_id!r}") from exc
        except ConfigError as exc:
            raise HTTPException(409, str(exc)) from exc
        path = f"/flows/{quote(execution_id, safe='')}"
        return self.dash.redirect(request, path, resumed=state.value)


_RESUMABLE = (ExecutionState.FAILED, ExecutionState.TIMED_OUT, ExecutionState.CANCELLED)


def _replayable(steps: list[StepRun], history: list[HistoryEntry]) -> list[str]:
    """The ids ``replay`` takes: every step, and a workflow's ``ctx.step`` ids."""
    return [s.step_id for s in steps] + [e.name for e in history if e.kind == "step"]


@dataclass(frozen=True)
class _Notice:
    kind: str
    text: str


def _flash(request: Request) -> _Notice | None:
    """The notice after a retry or a replay, built from a state only (never echoed text)."""
    state = request.query_params.get("resumed")
    if state == ExecutionState.RUNNING.value:
        return _Notice("ok", "The execution runs again.")
    if state == ExecutionState.QUEUED.value:
        return _Notice("ok", "The execution is queued again (waiting for a concurrency place).")
    return None


@dataclass(frozen=True)
class FailingAttempt:
    """The attempt that failed an execution: its step, number and error."""

    step_id: str
    number: int
    error_class: str | None
    message: str | None


def _failing_attempt(steps: list[StepRun], step_id: str | None) -> FailingAttempt | None:
    """The last attempt of the step an execution blames, when it recorded an error."""
    step = next((s for s in steps if s.step_id == step_id), None)
    if step is None or not step.attempts:
        return None
    last = step.attempts[-1]
    if not (last.error_class or last.message):
        return None
    return FailingAttempt(step.step_id, last.number, last.error_class, last.message)


def flow_routes(dash: DashboardHost) -> list[Route]:
    """The routes of the flow pages, for :func:`contrib.dashboard.create_app`."""
    pages = _FlowPages(dash)
    return [
        Route("/flows", pages.executions, name="flows"),
        Route("/flows/{execution_id}", pages.execution, name="execution"),
        Route("/flows/{execution_id}/retry", pages.resume, methods=["POST"], name="retry"),
        Route("/flows/{execution_id}/replay", pages.resume, methods=["POST"], name="replay"),
    ]
