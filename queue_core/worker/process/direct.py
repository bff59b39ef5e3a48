"""Direct ``isolation="process"`` attempts: one attempt, start to end, on the calling thread.

:meth:`ProcessPool.run <queue_core.worker.process.pool.ProcessPool.run>` waits for the
child on the event loop, which costs the worker an anyio task per job (and the loop's
wake-ups while the child runs). :func:`run_direct` (called as
:meth:`ProcessPool.run_direct <queue_core.worker.process.pool.ProcessPool.run_direct>`)
does the same attempt synchronously on a body thread, the way a sync body runs: it takes
a warm child from the same pool's :class:`~queue_core.worker.process.children.ChildSet`
(or starts one), sends the request, waits for the answer with ``poll`` on the pipe and
the child's pidfd (passing heartbeats and progress reports on meanwhile), and returns
the :class:`ProcessResult`; the worker records it when the
body thread reports back, without a task per job (see
:mod:`queue_core.worker.process_runs`).

Every guarantee of :meth:`ProcessPool.run` holds: at the deadline, or once
``cancelled()`` turns true (polled every 50 ms) or the pool is closed, the child's
group gets SIGTERM, then SIGKILL after ``kill_grace``, and the call returns once the
group is gone (``TIMED_OUT`` / ``CANCELLED``); a child that dies fails only its own
attempt (``DIED``) and is replaced on next need. While a direct attempt holds a child,
its thread alone stops and closes it (``ProcessPool.aclose`` waits for it).

Its waits are the kernel's (``poll``, a short sleep), timed on the set's clock (real
time, see :class:`~queue_core.worker.process.children.ChildSet`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from queue_core.worker.process.child import encode_frame, ready_fds
from queue_core.worker.process.children import (
    POLL,
    REAP_BOUND,
    SIDE_FRAMES,
    START_TIMEOUT,
    Child,
    ChildSet,
    group_exists,
    pass_on,
    signal_group,
)
from queue_core.worker.process.deadline import BodyStart, Deadline
from queue_core.worker.process.results import (
    ANSWERS,
    ChildStartError,
    ProcessOutcome,
    ProcessResult,
    answered,
    unanswered,
)

__all__ = ["run_direct"]

_CANCEL_POLL = 0.05
"""Seconds between two reads of the attempt's ``cancelled()`` (as the async wait)."""


def run_direct(
    children: ChildSet,
    request: tuple[Any, ...],
    *,
    timeout: float | None,
    kill_grace: float,
    heartbeat: Callable[[], object] | None,
    progress: Callable[[float, str | None], object] | None = None,
    cancelled: Callable[[], bool],
    body_start: BodyStart | None = None,
) -> ProcessResult:
    """Run one attempt (``request`` from
    :func:`~queue_core.worker.process.children.request_of`) in one of ``children``, on
    this thread; ``timeout``, ``kill_grace``, ``heartbeat``, ``progress``, ``cancelled``
    and ``body_start`` as for :meth:`ProcessPool.run
    <queue_core.worker.process.pool.ProcessPool.run>` (``heartbeat`` and ``progress``
    are called on this thread).

    An attempt cancelled before it starts ends ``CANCELLED`` without a child (``pid`` 0).

    Raises:
        RuntimeError: the pool is closed.
        ChildStartError: a new child could not be started.
    """
    if cancelled():
        return ProcessResult(outcome=ProcessOutcome.CANCELLED)
    child = _take(children)
    result: ProcessResult | None = None
    try:
        result = _attempt(
            children,
            child,
            request,
            timeout,
            kill_grace,
            heartbeat,
            progress,
            cancelled,
            body_start,
        )
        return result
    finally:
        with children.lock:  # aclose may be taking the idle list: closed means not kept
            keep = children.keep(child, result)
            if keep:
                children.idle.append(child)
                children.direct.discard(child)
        if not keep and not child.closed:
            _discard(children, child, kill_grace)


def _take(children: ChildSet) -> Child:
    """A warm child marked as held by this thread (a new one when none is idle)."""
    if children.closed:
        raise RuntimeError("the process pool is closed")
    while (child := children.pop_idle(direct=True)) is not None:
        if not child.exited() and not child.eof:
            return child
        _discard(children, child, 0.0)
    child = Child.start()
    with children.lock:
        closed = children.closed
        children.live.add(child)
        children.direct.add(child)
    if closed:
        _discard(children, child, 0.0)
        raise RuntimeError("the process pool is closed")
    if not _wait_ready(children, child, START_TIMEOUT):
        _discard(children, child, 0.0)
        raise ChildStartError(
            f"the isolation child process {child.pid} did not start "
            f"(exit status {child.popen.poll()}); see its stderr"
        )
    return child


def _wait_ready(children: ChildSet, child: Child, within: float) -> bool:
    monotonic = children.clock.monotonic
    end = monotonic() + within
    while True:
        got, frame = child.take()
        if got:
            return frame is not None and frame[0] == "ready"
        left = end - monotonic()
        if left <= 0 or not ready_fds([child.rfd], left):
            return False
        child.read_once()


def _send(child: Child, request: tuple[Any, ...], sent_at: float) -> None:
    data = memoryview(encode_frame(("run", request, sent_at)))
    while data:
        try:
            data = data[os.write(child.wfd, data) :]
        except BlockingIOError:
            ready_fds([child.wfd], _CANCEL_POLL, write=True)
        except BrokenPipeError:
            return  # the child is gone: the wait sees its pipe closed


def _attempt(
    children: ChildSet,
    child: Child,
    request: tuple[Any, ...],
    timeout: float | None,
    kill_grace: float,
    heartbeat: Callable[[], object] | None,
    progress: Callable[[float, str | None], object] | None,
    cancelled: Callable[[], bool],
    body_start: BodyStart | None,
) -> ProcessResult:
    monotonic = children.clock.monotonic
    started = monotonic()
    deadline = Deadline(timeout, started, body_start)
    _send(child, request, started)
    try:
        answer, why_stopped = _wait(
            children, child, started, deadline, heartbeat, progress, cancelled
        )
    except BaseException:
        _discard(children, child, kill_grace)  # a failing callback ends the attempt
        raise
    elapsed = monotonic() - started
    if answer is not None and answer[0] in ANSWERS:
        return answered(answer, child.pid, elapsed)
    sigkill, gone = _discard(children, child, kill_grace if why_stopped is not None else 0.0)
    return unanswered(why_stopped, child.status(), sigkill, gone, child.pid, elapsed)


def _wait(
    children: ChildSet,
    child: Child,
    started: float,
    deadline: Deadline,
    heartbeat: Callable[[], object] | None,
    progress: Callable[[float, str | None], object] | None,
    cancelled: Callable[[], bool],
) -> tuple[Any, ProcessOutcome | None]:
    """Until the child answers (``(frame, None)``), is gone (``(None, None)``), or must
    be stopped (``(None, TIMED_OUT or CANCELLED)``). Heartbeats and progress reports are
    passed on meanwhile."""
    monotonic = children.clock.monotonic
    fds = [child.rfd] if child.pidfd is None else [child.rfd, child.pidfd]
    poll_at = started + _CANCEL_POLL
    while True:
        got, frame = child.take()
        if got:
            if frame is not None and deadline.note(frame):
                continue
            if frame is None or frame[0] not in SIDE_FRAMES:
                return frame, None  # an answer, or the pipe closed: the child is gone
            pass_on(frame, heartbeat, progress)
            continue
        now, end = monotonic(), deadline.end
        if end is not None and now >= end:
            return None, ProcessOutcome.TIMED_OUT
        if now >= poll_at:
            if cancelled() or children.closed:
                return None, ProcessOutcome.CANCELLED
            if child.pidfd is None and child.exited():
                child.drain()  # a grandchild may hold the pipe open: the leader decides
                return child.take_answer(), None
            poll_at = now + _CANCEL_POLL
        wait = poll_at - now if end is None else min(poll_at, end) - now
        readable = ready_fds(fds, wait)
        if child.rfd in readable:
            child.read_once()
        elif readable:  # the pidfd: the child exited (a grandchild holds the pipe)
            child.drain()
            return child.take_answer(), None


def _discard(children: ChildSet, child: Child, grace: float) -> tuple[bool, bool]:
    """Terminate ``child``'s group (if still there), reap it, close its pipes, forget it."""
    try:
        return _terminate(children, child, grace)
    finally:
        child.close_fds()
        with children.lock:
            children.live.discard(child)
            children.direct.discard(child)


def _terminate(children: ChildSet, child: Child, grace: float) -> tuple[bool, bool]:
    """SIGTERM the group, SIGKILL after ``grace``: ``(sigkill_sent, group_gone)``
    (:meth:`Child.terminate <queue_core.worker.process.children.Child.terminate>`,
    blocking)."""
    child.stopping = True
    monotonic = children.clock.monotonic
    if child.eof or child.exited():
        # it died on its own (its pipe closed as it exited): reap it first
        _until(monotonic, child.exited, REAP_BOUND)
    else:
        child.notify_cancel()
        signal_group(child.pid, signal.SIGTERM)
    if _until(monotonic, lambda: _gone(child), grace):
        return False, True
    signal_group(child.pid, signal.SIGKILL)
    if _until(monotonic, lambda: _gone(child), REAP_BOUND):
        return True, True
    return True, not group_exists(child.pid)


def _gone(child: Child) -> bool:
    return child.exited() and not group_exists(child.pid)


def _until(monotonic: Callable[[], float], done: Callable[[], bool], within: float) -> bool:
    """Poll ``done`` every 10 ms for at most ``within`` seconds (at least once)."""
    end = monotonic() + within
    while not done():
        if monotonic() >= end:
            return False
        time.sleep(POLL)
    return True
