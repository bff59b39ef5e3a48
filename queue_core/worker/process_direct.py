"""Direct ``isolation="process"`` attempts: one attempt, start to end, on the calling thread.

:meth:`ProcessPool.run <queue_core.worker.process.ProcessPool.run>` waits for the child on
the event loop, which costs the worker an anyio task per job (and the loop's wake-ups
while the child runs). :func:`run_direct` does the same attempt synchronously on a body
thread, the way a sync body runs: it takes a warm child from the same pool (or starts
one), sends the request, waits for the answer with ``select`` on the pipe and the
child's pidfd, and returns the :class:`ProcessResult`; the worker records it when the
body thread reports back, without a task per job (see
:mod:`queue_core.worker.process_start`).

Every guarantee of :meth:`ProcessPool.run` holds: at the deadline, or once
``cancelled()`` turns true (polled every 50 ms) or the pool is closed, the child's
group gets SIGTERM, then SIGKILL after ``kill_grace``, and the call returns once the
group is gone (``TIMED_OUT`` / ``CANCELLED``); a child that dies fails only its own
attempt (``DIED``) and is replaced on next need. While a direct attempt holds a child,
its thread alone stops and closes it (``ProcessPool.aclose`` waits for it).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from queue_core.worker.process_results import (
    ProcessOutcome,
    ProcessResult,
    _answered,
    _group_exists,
    _signal_group,
    _unanswered,
)
from queue_core.worker.scopes import Carried

if TYPE_CHECKING:
    from queue_core.worker.process import ProcessPool, _Child

__all__ = ["request_of", "run_direct"]

_CANCEL_POLL = 0.05
"""Seconds between two reads of the attempt's ``cancelled()`` (as the async wait)."""
_POLL = 0.01
_ANSWERS = frozenset({"ok", "val", "err"})


def request_of(
    func_module: str,
    func_qualname: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    job_id: str,
    attempt: int,
    timeout: float | None,
    heartbeat_every: float,
    wants_ctx: bool,
    execution_id: str | None,
    step_id: str | None,
    carried: Sequence[Carried],
) -> tuple[Any, ...]:
    """A run request, in the order of :data:`queue_core.worker._child.REQUEST_FIELDS`."""
    return (
        func_module,
        func_qualname,
        _main_path() if func_module == "__main__" else None,
        tuple(args),
        dict(kwargs),
        job_id,
        attempt,
        None if timeout is None else time.time() + timeout,
        heartbeat_every,
        wants_ctx,
        execution_id,
        step_id,
        list(carried),
    )


def _main_path() -> str | None:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if isinstance(path, str) else None


def run_direct(
    pool: ProcessPool,
    request: tuple[Any, ...],
    *,
    timeout: float | None,
    kill_grace: float,
    heartbeat: Callable[[], object] | None,
    cancelled: Callable[[], bool],
) -> ProcessResult:
    """Run one attempt (``request`` from :func:`request_of`) in a child of ``pool``, on
    this thread; ``timeout``, ``kill_grace``, ``heartbeat`` and ``cancelled`` as for
    :meth:`ProcessPool.run` (``heartbeat`` is called on this thread).

    An attempt cancelled before it starts ends ``CANCELLED`` without a child (``pid`` 0).

    Raises:
        RuntimeError: the pool is closed.
        ChildStartError: a new child could not be started.
    """
    if cancelled():
        return ProcessResult(outcome=ProcessOutcome.CANCELLED)
    child = _take(pool)
    result: ProcessResult | None = None
    try:
        result = _attempt(pool, child, request, timeout, kill_grace, heartbeat, cancelled)
        return result
    finally:
        with pool._lock:  # aclose may be taking the idle list: closed means not kept
            keep = pool._keep(child, result)
            if keep:
                pool._idle.append(child)
                pool._direct.discard(child)
        if not keep and not child.closed:
            _discard(pool, child, kill_grace)


def _take(pool: ProcessPool) -> _Child:
    """A warm child marked as held by this thread (a new one when none is idle)."""
    from queue_core.worker.process import _START_TIMEOUT, ChildStartError, _Child

    if pool._closed:
        raise RuntimeError("the process pool is closed")
    while (child := pool._pop_idle(direct=True)) is not None:
        if not child.exited() and not child.eof:
            return child
        _discard(pool, child, 0.0)
    child = _Child.start()
    with pool._lock:
        closed = pool._closed
        pool._live.add(child)
        pool._direct.add(child)
    if closed:
        _discard(pool, child, 0.0)
        raise RuntimeError("the process pool is closed")
    if not _wait_ready(child, _START_TIMEOUT):
        _discard(pool, child, 0.0)
        raise ChildStartError(
            f"the isolation child process {child.pid} did not start "
            f"(exit status {child.popen.poll()}); see its stderr"
        )
    return child


def _wait_ready(child: _Child, within: float) -> bool:
    end = time.monotonic() + within
    while True:
        got, frame = child.take()
        if got:
            return frame is not None and frame[0] == "ready"
        left = end - time.monotonic()
        if left <= 0 or not select.select([child.rfd], [], [], left)[0]:
            return False
        child.read_once()


def _send(child: _Child, request: tuple[Any, ...]) -> None:
    from queue_core.worker._child import encode_frame

    data = memoryview(encode_frame(("run", request)))
    while data:
        try:
            data = data[os.write(child.wfd, data) :]
        except BlockingIOError:
            select.select([], [child.wfd], [], _CANCEL_POLL)
        except BrokenPipeError:
            return  # the child is gone: the wait sees its pipe closed


def _attempt(
    pool: ProcessPool,
    child: _Child,
    request: tuple[Any, ...],
    timeout: float | None,
    kill_grace: float,
    heartbeat: Callable[[], object] | None,
    cancelled: Callable[[], bool],
) -> ProcessResult:
    started = time.monotonic()
    _send(child, request)
    try:
        answer, why_stopped = _wait(pool, child, started, timeout, heartbeat, cancelled)
    except BaseException:
        _discard(pool, child, kill_grace)  # a failing heartbeat callback ends the attempt
        raise
    elapsed = time.monotonic() - started
    if answer is not None and answer[0] in _ANSWERS:
        return _answered(answer, child.pid, elapsed)
    sigkill, gone = _discard(pool, child, kill_grace if why_stopped is not None else 0.0)
    return _unanswered(why_stopped, child.status(), sigkill, gone, child.pid, elapsed)


def _wait(
    pool: ProcessPool,
    child: _Child,
    started: float,
    timeout: float | None,
    heartbeat: Callable[[], object] | None,
    cancelled: Callable[[], bool],
) -> tuple[Any, ProcessOutcome | None]:
    """Until the child answers (``(frame, None)``), is gone (``(None, None)``), or must
    be stopped (``(None, TIMED_OUT or CANCELLED)``). Heartbeats are passed on meanwhile."""
    end = None if timeout is None else started + timeout
    fds = [child.rfd] if child.pidfd is None else [child.rfd, child.pidfd]
    poll_at = started + _CANCEL_POLL
    while True:
        got, frame = child.take()
        if got:
            if frame is None or frame[0] != "hb":
                return frame, None  # an answer, or the pipe closed: the child is gone
            if heartbeat is not None:
                heartbeat()
            continue
        now = time.monotonic()
        if end is not None and now >= end:
            return None, ProcessOutcome.TIMED_OUT
        if now >= poll_at:
            if cancelled() or pool._closed:
                return None, ProcessOutcome.CANCELLED
            if child.pidfd is None and child.exited():
                child.drain()  # a grandchild may hold the pipe open: the leader decides
                return child.take_answer(), None
            poll_at = now + _CANCEL_POLL
        wait = poll_at - now if end is None else min(poll_at, end) - now
        readable = select.select(fds, [], [], max(wait, 0.0))[0]
        if child.rfd in readable:
            child.read_once()
        elif readable:  # the pidfd: the child exited (a grandchild holds the pipe)
            child.drain()
            return child.take_answer(), None


def _discard(pool: ProcessPool, child: _Child, grace: float) -> tuple[bool, bool]:
    """Terminate ``child``'s group (if still there), reap it, close its pipes, forget it."""
    try:
        return _terminate(child, grace)
    finally:
        child.close_fds()
        with pool._lock:
            pool._live.discard(child)
            pool._direct.discard(child)


def _terminate(child: _Child, grace: float) -> tuple[bool, bool]:
    """SIGTERM the group, SIGKILL after ``grace``: ``(sigkill_sent, group_gone)``
    (:meth:`_Child.terminate <queue_core.worker.process._Child.terminate>`, blocking)."""
    from queue_core.worker.process import _REAP_BOUND

    child.stopping = True
    if child.eof or child.exited():
        # it died on its own (its pipe closed as it exited): reap it first
        _until(child.exited, _REAP_BOUND)
    else:
        child.notify_cancel()
        _signal_group(child.pid, signal.SIGTERM)
    if _until(lambda: _gone(child), grace):
        return False, True
    _signal_group(child.pid, signal.SIGKILL)
    if _until(lambda: _gone(child), _REAP_BOUND):
        return True, True
    return True, not _group_exists(child.pid)


def _gone(child: _Child) -> bool:
    return child.exited() and not _group_exists(child.pid)


def _until(done: Callable[[], bool], within: float) -> bool:
    """Poll ``done`` every 10 ms for at most ``within`` seconds (at least once)."""
    end = time.monotonic() + within
    while not done():
        if time.monotonic() >= end:
            return False
        time.sleep(_POLL)
    return True
