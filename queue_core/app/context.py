"""The context a running task body receives through its ``ctx`` keyword parameter.

``ctx.heartbeat()`` is a plain, cheap call in sync and async bodies alike: it writes to
storage at most once every ``heartbeat / 3`` (the pure rule
:func:`queue_core.rules.heartbeat_write_due`), and does nothing else. Outside a running
attempt it raises :class:`RuntimeError`. ``ctx.progress(fraction, message)`` is as cheap:
it checks its arguments and hands the report over (the worker writes at most one per
second per attempt, and the latest with the attempt's end).

Tests build a context directly and observe heartbeats with a callback::

    calls = []
    ctx = JobContext(job_id="j1", attempt=2, on_heartbeat=lambda: calls.append(1))
    my_task.func(42, ctx=ctx)

and progress reports with ``on_progress`` (called with each
:class:`~queue_core.records.control.ProgressUpdate`).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from queue_core.records.control import ProgressUpdate
from queue_core.rules import heartbeat_write_due
from queue_core.rules.control import check_progress

__all__ = ["JobContext"]


def _accepts_one_argument(func: Callable[..., Any]) -> bool:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return False
    try:
        sig.bind(None)
    except TypeError:
        return False
    return True


class JobContext:
    """What a task body learns about the attempt it runs in.

    ``JobContext.INJECTED`` is a default for a body's ``ctx`` parameter
    (``ctx: JobContext = JobContext.INJECTED``): a type checker sees the body's whole
    signature, so a ``ctx`` without a default would be a required argument of
    ``.delay()``. The worker (and an inline call) passes the real context either way.

    Attributes:
        job_id: the job's id.
        attempt: the 1-based number of this attempt.
        deadline: when this attempt times out (aware UTC datetime), or ``None``.
        execution_id: for a flow step, its execution's id (``None`` otherwise).
        step_id: for a flow step, its step id (``None`` otherwise).
    """

    __slots__ = (
        "job_id",
        "attempt",
        "deadline",
        "execution_id",
        "step_id",
        "_heartbeat_ms",
        "_last_write_ms",
        "_sink",
        "_sink_takes_ctx",
        "_cancelled",
        "_active",
        "_monotonic",
        "lease_token",
        "started_at",
        "started_mono",
        "started_slack_ms",
        "_on_progress",
        "progress_reported",
    )

    INJECTED: ClassVar[JobContext]

    def __init__(
        self,
        *,
        job_id: str = "test-job",
        attempt: int = 1,
        deadline: datetime | None = None,
        execution_id: str | None = None,
        step_id: str | None = None,
        heartbeat_interval: float | None = None,
        on_heartbeat: Callable[..., Any] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        lease_token: str | None = None,
        started_at: int | None = None,
        on_progress: Callable[[ProgressUpdate], Any] | None = None,
        started_mono: float | None = None,
        started_slack_ms: int = 0,
    ) -> None:
        """Build a context (the worker builds one per attempt; tests build their own).

        Args:
            job_id: the job id reported by ``ctx.job_id``.
            attempt: the attempt number reported by ``ctx.attempt``.
            deadline: the attempt deadline reported by ``ctx.deadline``.
            execution_id: the flow execution reported by ``ctx.execution_id``.
            step_id: the flow step reported by ``ctx.step_id``.
            heartbeat_interval: the task's ``heartbeat`` bound in seconds; heartbeats
                reach ``on_heartbeat`` at most every third of it. ``None``: every call
                reaches it.
            on_heartbeat: called (with no argument, or with this context if it takes
                one) for every heartbeat that would be written to storage. It may
                return ``True`` to report a cancel request.
            monotonic: the monotonic clock (seconds) that throttles writes.
            lease_token: the attempt's lease token (the worker sets it: a workflow's
                ``ctx.step`` stores its result fenced by it).
            started_at: the body's start by storage's clock, epoch ms (the worker
                sets it: a workflow's sleeps and waits are timed on that clock).
            on_progress: called with each :meth:`progress` report (the worker's writer
                throttles them; a test sees every one).
            started_mono: the reading of ``time.monotonic()`` at which storage's clock
                read no more than ``started_at`` (the worker sets it as the body starts, with
                ``started_at`` then: a workflow's clock runs on from both, never behind
                storage's). ``None``: when the context was built.
            started_slack_ms: how far ``started_at`` may be ahead of storage's clock
                (an attempt held ahead of a free slot: its claim call's duration, since
                storage stamped it somewhere within the call): a workflow's event wait
                begins that much earlier, so an event sent after it began is never missed.
        """
        self.job_id = job_id
        self.attempt = attempt
        self.deadline = deadline
        self.execution_id = execution_id
        self.step_id = step_id
        self._heartbeat_ms = int(heartbeat_interval * 1000) if heartbeat_interval is not None else 0
        self._monotonic = monotonic
        self._last_write_ms: int | None = int(monotonic() * 1000) if self._heartbeat_ms else None
        self._sink = on_heartbeat
        self._sink_takes_ctx = on_heartbeat is not None and _accepts_one_argument(on_heartbeat)
        self._cancelled = False
        self._active = True
        self.lease_token = lease_token
        self.started_at = started_at
        self.started_mono = time.monotonic() if started_mono is None else started_mono
        self.started_slack_ms = started_slack_ms
        self._on_progress = on_progress
        self.progress_reported: ProgressUpdate | None = None
        """The latest :meth:`progress` report (the worker stores it with the attempt's end)."""

    @property
    def cancelled(self) -> bool:
        """``True`` once the job was asked to cancel or this attempt lost its lease.

        A body that checks it can stop early; its outcome is then not recorded as a
        success of the current attempt.
        """
        return self._cancelled

    def heartbeat(self) -> None:
        """Tell storage this attempt is alive (only counts for tasks with ``heartbeat``).

        Cheap: writes are throttled to at most one per ``heartbeat / 3``; calls in
        between return at once.

        Raises:
            RuntimeError: when called outside a running attempt.
        """
        if not self._active:
            raise RuntimeError(
                f"ctx.heartbeat() called outside a running attempt (job {self.job_id!r}, "
                f"attempt {self.attempt} already ended)"
            )
        sink = self._sink
        if sink is None:
            return
        if self._heartbeat_ms:
            now = int(self._monotonic() * 1000)
            if not heartbeat_write_due(self._last_write_ms, now, self._heartbeat_ms):
                return
            self._last_write_ms = now
        if (sink(self) if self._sink_takes_ctx else sink()) is True:
            self._cancelled = True

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the body is: ``fraction`` from 0.0 to 1.0, and an optional
        ``message`` (``JobHandle.progress()`` reads it back, SPEC §13).

        Cheap: the worker stores at most one report per second per attempt, always the
        latest, and the last one with the attempt's end.

        Raises:
            ConfigError: ``invalid_option``: ``fraction`` is not a number from 0.0 to 1.0,
                or ``message`` is not a string.
            RuntimeError: when called outside a running attempt.
        """
        value, text = check_progress(fraction, message)
        if not self._active:
            raise RuntimeError(
                f"ctx.progress() called outside a running attempt (job {self.job_id!r}, "
                f"attempt {self.attempt} already ended)"
            )
        update = self.progress_reported = ProgressUpdate(value, text)
        if self._on_progress is not None:
            self._on_progress(update)

    # ------------------------------------------------------------------ worker side

    def _cancel(self) -> None:
        self._cancelled = True

    def _close(self) -> None:
        self._active = False

    def __repr__(self) -> str:
        return (
            f"JobContext(job_id={self.job_id!r}, attempt={self.attempt}, "
            f"cancelled={self._cancelled})"
        )


JobContext.INJECTED = JobContext(job_id="injected")
