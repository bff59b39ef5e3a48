"""``isolation="process"``: sync task bodies in warm child processes that can really be stopped.

A :class:`ProcessPool` keeps up to ``size`` child interpreters. Each child is started once
(a fresh ``sys.executable``, in its own session, so it leads its own process group) and
then runs attempt after attempt; the request and the result travel over a pipe pair as
pickles. At the deadline, or when the worker cancels the attempt, the parent announces the
stop, sends SIGTERM to the child's whole process group, waits ``kill_grace`` seconds for
the group to go, then sends SIGKILL. :meth:`ProcessPool.run` returns once the group is
gone and the child is reaped, so the slot is really free. A child that was stopped or
died is not reused; the next attempt starts a new one.

Children are exec'd interpreters rather than ``fork``ed copies of the worker: the worker
runs an event loop and threads, which a fork would copy in an unsafe state. This is the
``spawn`` start method of :mod:`multiprocessing`, done with :mod:`subprocess` so that the
new session is created before the child runs any code (no window in which the child is
not yet a group leader) and the worker's ``__main__`` is never re-run in the child.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from queue_core.worker._child import encode_frame
from queue_core.worker.process_direct import request_of
from queue_core.worker.process_exchange import Exchange
from queue_core.worker.process_places import Places
from queue_core.worker.process_results import (
    _CHILD_KEPT,
    ChildError,
    ChildStartError,
    ProcessOutcome,
    ProcessResult,
    RemoteError,
    RemoteTaskError,
    _answered,
    _group_exists,
    _signal_group,
    _unanswered,
)
from queue_core.worker.scopes import Carried

__all__ = [
    "ChildError",
    "ChildStartError",
    "ProcessOutcome",
    "ProcessPool",
    "ProcessResult",
    "RemoteError",
    "RemoteTaskError",
]

_HEADER_SIZE = 4
_READ_SIZE = 1 << 16
_START_TIMEOUT = 60.0
"""Seconds a new child may take to import and say it is ready."""
_REAP_BOUND = 5.0
"""Seconds to wait for a SIGKILLed group to disappear before reporting it as lingering."""
_POLL = 0.01
_ANSWERS = frozenset({"ok", "val", "err"})
"""The frames that answer a run request (see :mod:`queue_core.worker._child`)."""
_GROUP_POLL = 0.05
_BOOTSTRAP = (
    "import sys, json\n"
    "sys.path[:] = json.loads(sys.argv[3])\n"
    "from queue_core.worker._child import main\n"
    "main(sys.argv[1:3])\n"
)


class _Child:
    """One warm child interpreter and the parent's ends of its pipes."""

    def __init__(self, popen: subprocess.Popen[bytes], rfd: int, wfd: int) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.rfd = rfd
        self.wfd = wfd
        self.pidfd: int | None = None
        if hasattr(os, "pidfd_open"):
            try:
                self.pidfd = os.pidfd_open(popen.pid)
            except OSError:
                self.pidfd = None
        self._buffer = bytearray()
        self._frames: list[Any] = []
        self.eof = False
        self.stopping = False
        self.closed = False
        self._terminated: anyio.Event | None = None
        self._termination = (False, False)
        self.runs = 0
        """Attempts this child answered (returned or raised)."""

    @classmethod
    def start(cls) -> _Child:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            popen = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _BOOTSTRAP,
                    str(to_child_r),
                    str(from_child_w),
                    json.dumps(sys.path),
                ],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
                os.close(fd)
            raise
        os.close(to_child_r)
        os.close(from_child_w)
        os.set_blocking(from_child_r, False)
        os.set_blocking(to_child_w, False)
        return cls(popen, from_child_r, to_child_w)

    # -- messages ---------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buffer
        if len(buf) > _HEADER_SIZE and len(buf) == _HEADER_SIZE + int.from_bytes(
            buf[:_HEADER_SIZE], "big"
        ):  # exactly one frame, the usual case: no slicing of the buffer
            self._frames.append(pickle.loads(buf[_HEADER_SIZE:]))
            buf.clear()
            return
        while len(buf) >= _HEADER_SIZE:
            size = int.from_bytes(buf[:_HEADER_SIZE], "big")
            if len(buf) < _HEADER_SIZE + size:
                break
            self._frames.append(pickle.loads(bytes(buf[_HEADER_SIZE : _HEADER_SIZE + size])))
            del buf[: _HEADER_SIZE + size]

    async def recv(self) -> Any:
        """The next frame from the child, or ``None`` once its end of the pipe is closed."""
        while not self._frames:
            if self.eof:
                return None
            await anyio.wait_readable(self.rfd)
            while True:
                try:
                    chunk = os.read(self.rfd, _READ_SIZE)
                except BlockingIOError:
                    break
                if not chunk:
                    self.eof = True
                    break
                self._buffer += chunk
            self._parse()
        return self._frames.pop(0)

    async def send(self, message: object) -> None:
        data = memoryview(encode_frame(message))
        while data:
            try:
                data = data[os.write(self.wfd, data) :]
            except BlockingIOError:
                await anyio.wait_writable(self.wfd)

    def notify_cancel(self) -> None:
        """Best effort: tell the body (``ctx.cancelled``) it is being stopped."""
        try:
            os.write(self.wfd, encode_frame(("cancel",)))
        except OSError:
            pass

    # -- life and death ---------------------------------------------------------------

    async def wait_ready(self) -> None:
        with anyio.move_on_after(_START_TIMEOUT):
            message = await self.recv()
            if message is not None and message[0] == "ready":
                return
        raise ChildStartError(
            f"the isolation child process {self.pid} did not start "
            f"(exit status {self.popen.poll()}); see its stderr"
        )

    def exited(self) -> bool:
        return self.popen.poll() is not None

    async def wait_exit(self) -> None:
        """Return once the child has exited, and reap it (pidfd when the OS has one)."""
        if self.pidfd is not None and not self.exited():
            await anyio.wait_readable(self.pidfd)
        # The pidfd turns readable as the exit is posted; polling the OS, not an event.
        while not self.exited():  # noqa: ASYNC110
            await anyio.sleep(0 if self.pidfd is not None else _POLL)

    def drain(self) -> None:
        """Read whatever the child wrote before it ended, without waiting."""
        while not self.eof:
            try:
                chunk = os.read(self.rfd, _READ_SIZE)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                self.eof = True
            self._buffer += chunk
        self._parse()

    def read_once(self) -> None:
        """One read of what the child wrote (more only when that read filled the buffer),
        then parse; the caller knows the pipe is readable, so no read ends in EAGAIN."""
        try:
            chunk = os.read(self.rfd, _READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.eof = True
        self._buffer += chunk
        if len(chunk) == _READ_SIZE:
            self.drain()
        else:
            self._parse()

    def take(self) -> tuple[bool, Any]:
        """Without reading: ``(True, frame)`` for the next frame already read, ``(True,
        None)`` once the pipe is closed and every frame taken, ``(False, None)`` if neither."""
        if self._frames:
            return True, self._frames.pop(0)
        return self.eof, None

    def poll(self) -> tuple[bool, Any]:
        """Without waiting: ``(True, frame)`` for the next frame the child sent,
        ``(True, None)`` once its end of the pipe is closed, ``(False, None)`` if neither."""
        if not self._frames:
            self.drain()
        if self._frames:
            return True, self._frames.pop(0)
        return self.eof, None

    def take_answer(self) -> Any:
        """The first buffered frame that is not a heartbeat, or ``None``."""
        while self._frames:
            frame = self._frames.pop(0)
            if frame[0] != "hb":
                return frame
        return None

    async def _wait_group_gone(self) -> None:
        # Polls rather than waiting on the pidfd: a running attempt may be waiting on it.
        while not self.exited():  # noqa: ASYNC110
            await anyio.sleep(_POLL)
        while _group_exists(self.pid):  # noqa: ASYNC110 - only with surviving grandchildren
            await anyio.sleep(_GROUP_POLL)

    async def terminate(self, grace: float) -> tuple[bool, bool]:
        """SIGTERM the group, SIGKILL after ``grace``; returns ``(sigkill_sent, group_gone)``.

        Idempotent: a second call waits for the first one's result.
        """
        if self._terminated is not None:
            await self._terminated.wait()
            return self._termination
        self._terminated = anyio.Event()
        self.stopping = True
        try:
            if self.eof or self.exited():
                # The child died on its own (its pipe closed when it exited): reap it
                # before judging what is left of its group.
                with anyio.move_on_after(_REAP_BOUND):
                    while not self.exited():  # noqa: ASYNC110
                        await anyio.sleep(_POLL)
            else:
                self.notify_cancel()
                _signal_group(self.pid, signal.SIGTERM)
            with anyio.move_on_after(grace):
                await self._wait_group_gone()
                self._termination = (False, True)
                return self._termination
            _signal_group(self.pid, signal.SIGKILL)
            with anyio.move_on_after(_REAP_BOUND):
                await self._wait_group_gone()
                self._termination = (True, True)
                return self._termination
            self._termination = (True, not _group_exists(self.pid))
            return self._termination
        finally:
            self._terminated.set()

    def status(self) -> tuple[int | None, int | None]:
        """``(exit_code, signal)`` of an exited child."""
        code = self.popen.returncode
        if code is None:
            return None, None
        return (None, -code) if code < 0 else (code, None)

    def close_fds(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fd in (self.rfd, self.wfd, self.pidfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


class ProcessPool:
    """Warm child processes for ``isolation="process"`` attempts.

    At most ``size`` attempts run at once (further :meth:`run` calls wait for a child).
    Children start lazily, on first need, and are reused until one is stopped or dies,
    or has answered ``max_tasks_per_child`` attempts. A child runs one attempt at a time;
    what a body leaves in its module globals is still there for the next attempt that
    child runs.

    Args:
        size: the most children alive at once (the worker's slot count is a good value).
        max_tasks_per_child: retire a child (SIGTERM to its group, as after a stop) once
            it has answered this many attempts; ``None`` (default) keeps it for good.

    Example::

        pool = ProcessPool(4)
        try:
            result = await pool.run("myapp.tasks", "resize", (path,), {}, job_id=job_id,
                                    attempt=1, timeout=30, kill_grace=10)
        finally:
            await pool.aclose()
    """

    def __init__(self, size: int, *, max_tasks_per_child: int | None = None) -> None:
        if size < 1:
            raise ValueError(f"ProcessPool size must be at least 1, got {size!r}")
        if max_tasks_per_child is not None and max_tasks_per_child < 1:
            raise ValueError(
                f"max_tasks_per_child must be at least 1 or None, got {max_tasks_per_child!r}"
            )
        self.size = size
        self.max_tasks_per_child = max_tasks_per_child
        self._places = Places(size)
        self._idle: list[_Child] = []
        self._live: set[_Child] = set()
        self._closed = False
        self._lock = threading.Lock()
        """Guards the idle list and ``_direct`` against the threads of direct attempts."""
        self._direct: set[_Child] = set()
        """Children busy with a direct attempt (:mod:`~queue_core.worker.process_direct`):
        that attempt's thread alone stops and closes them."""

    @property
    def pids(self) -> list[int]:
        """Pids (= process group ids) of the live children, idle or busy."""
        return sorted(child.pid for child in self._live)

    def _pop_idle(self, *, direct: bool = False) -> _Child | None:
        """An idle child (marked busy with a direct attempt when ``direct``), or ``None``."""
        with self._lock:
            if not self._idle:
                return None
            child = self._idle.pop()
            if direct:
                self._direct.add(child)
            return child

    async def _take(self) -> _Child:
        while (child := self._pop_idle()) is not None:
            if not child.exited() and not child.eof:
                return child
            await self._discard(child, grace=0.0)
        child = _Child.start()
        self._live.add(child)
        try:
            await child.wait_ready()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._discard(child, grace=0.0)
            raise
        return child

    async def _discard(self, child: _Child, *, grace: float) -> tuple[bool, bool]:
        """Terminate ``child``'s group (if still there), reap it, close its pipes."""
        try:
            return await child.terminate(grace)
        finally:
            child.close_fds()
            self._live.discard(child)

    async def run(
        self,
        func_module: str,
        func_qualname: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        job_id: str,
        attempt: int,
        # Not a bound on this call: the child's deadline, after which its group is stopped
        # and the outcome is TIMED_OUT (a caller's own cancel scope also stops the group).
        timeout: float | None,  # noqa: ASYNC109
        kill_grace: float,
        heartbeat: Callable[[], object] | None = None,
        heartbeat_every: float = 0.1,
        cancelled: Callable[[], bool] | None = None,
        wants_ctx: bool = False,
        execution_id: str | None = None,
        step_id: str | None = None,
        carried: Sequence[Carried] = (),
    ) -> ProcessResult:
        """Run one attempt of a sync body in a child process.

        The child imports ``func_module``, walks ``func_qualname`` (unwrapping a task
        object through its ``.fn``), sets env ``QUEUE_CORE_ATTEMPT`` to ``attempt`` and
        calls the body with ``args``/``kwargs`` (plus ``ctx=`` when ``wants_ctx``). Both
        must pickle, and so must the return value.

        Args:
            func_module: module that defines the body (``"__main__"`` loads the worker's
                main script under the name ``__mp_main__``).
            func_qualname: the body's qualified name in that module.
            args: positional arguments.
            kwargs: keyword arguments.
            job_id: the job id, for ``ctx.job_id``.
            attempt: the 1-based attempt number.
            timeout: seconds the attempt may run; ``None`` for no limit.
            kill_grace: seconds between SIGTERM and SIGKILL when the attempt is stopped.
            heartbeat: called in the worker (on the event loop; it must not block) each
                time a heartbeat message arrives from the body.
            heartbeat_every: the child sends at most one heartbeat message per this many
                seconds (the first ``ctx.heartbeat()`` always goes through).
            cancelled: polled every 50 ms; once it returns True the attempt is stopped like
                a timeout and the outcome is ``CANCELLED``.
            wants_ctx: pass a ``ctx`` keyword (:class:`~queue_core.worker._child.ChildContext`).
            execution_id: a flow step's execution, for ``ctx.execution_id``.
            step_id: a flow step's id, for ``ctx.step_id``.
            carried: attempt scopes the child enters around the body
                (:func:`queue_core.worker.scopes.enter_carried`).

        Returns:
            How the attempt ended. Every outcome but ``RETURNED`` and ``RAISED`` means the
            child is gone (and its process group, unless ``group_gone`` is False).

        Raises:
            RuntimeError: the pool is closed.
            ChildStartError: a new child could not be started.

        If the caller is cancelled while waiting, the child's group is terminated (shielded,
        SIGTERM then SIGKILL after ``kill_grace``) before the cancellation propagates.
        """
        if self._closed:
            raise RuntimeError("the process pool is closed")
        await self._places.acquire()
        try:
            if self._closed:
                raise RuntimeError("the process pool is closed")
            child = await self._take()
            request = request_of(
                func_module,
                func_qualname,
                args,
                kwargs,
                job_id=job_id,
                attempt=attempt,
                timeout=timeout,
                heartbeat_every=heartbeat_every,
                wants_ctx=wants_ctx,
                execution_id=execution_id,
                step_id=step_id,
                carried=carried,
            )
            started = time.monotonic()
            result: ProcessResult | None = None
            try:
                result = await self._attempt(
                    child, request, timeout, kill_grace, heartbeat, cancelled, started
                )
                return result
            finally:
                if self._keep(child, result):
                    self._idle.append(child)
                elif not child.closed:
                    with anyio.CancelScope(shield=True):
                        await self._discard(child, grace=kill_grace)
        finally:
            self._places.release()

    def _keep(self, child: _Child, result: ProcessResult | None) -> bool:
        """Whether ``child`` goes back to the idle list after an attempt that gave ``result``."""
        if result is None or result.outcome not in _CHILD_KEPT or self._closed:
            return False
        child.runs += 1
        most = self.max_tasks_per_child
        return most is None or child.runs < most

    async def _attempt(
        self,
        child: _Child,
        request: tuple[Any, ...],
        timeout: float | None,  # noqa: ASYNC109
        kill_grace: float,
        heartbeat: Callable[[], object] | None,
        cancelled: Callable[[], bool] | None,
        started: float,
    ) -> ProcessResult:
        ex = Exchange(child, heartbeat, cancelled)
        await child.send(("run", request))
        # Most answers come within the first wait, which the deadline bounds itself; the
        # deadline's cancel scope (a timer and a scope per attempt) only for the rest.
        if not await ex.first_wait(timeout):
            left = None if timeout is None else max(0.0, started + timeout - time.monotonic())
            with anyio.move_on_after(left) as deadline_scope:
                await ex.run()
            timed_out = deadline_scope.cancelled_caught
        else:
            timed_out = ex.at_deadline
        elapsed = time.monotonic() - started
        if ex.failure is not None:
            raise ex.failure  # run() terminates the child on the way out
        answer = ex.answer
        if answer is None:
            child.drain()
            answer = child.take_answer()
        if answer is not None and answer[0] in _ANSWERS:
            return _answered(answer, child.pid, elapsed)
        why_stopped = ex.why_stopped
        if why_stopped is None and timed_out:
            why_stopped = ProcessOutcome.TIMED_OUT
        if why_stopped is None and child.stopping:
            why_stopped = ProcessOutcome.CANCELLED  # the pool was closed under us
        with anyio.CancelScope(shield=True):
            sigkill, gone = await self._discard(
                child, grace=kill_grace if why_stopped is not None else 0.0
            )
        return _unanswered(why_stopped, child.status(), sigkill, gone, child.pid, elapsed)

    async def aclose(self, *, grace: float = 5.0) -> None:
        """Stop every child: SIGTERM to each group, SIGKILL after ``grace``; reap them all.

        Attempts still running end ``CANCELLED`` (their :meth:`run` returns once their
        group is gone). Calling it twice is harmless.
        """
        with self._lock:
            self._closed = True
            idle = set(self._idle)
            self._idle.clear()
            direct = set(self._direct)
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for child in list(self._live):
                    if child in idle:
                        tg.start_soon(self._stop_idle, child, grace)
                    elif child not in direct:  # its run() closes it; we stop the group
                        tg.start_soon(self._stop_busy, child, grace)
            # A direct attempt sees the pool closed within a cancel poll and stops its
            # child itself (SIGTERM, its own kill_grace, SIGKILL).
            while self._direct:  # noqa: ASYNC110 - emptied by other threads
                await anyio.sleep(_POLL)

    async def _stop_idle(self, child: _Child, grace: float) -> None:
        await self._discard(child, grace=grace)

    async def _stop_busy(self, child: _Child, grace: float) -> None:
        await child.terminate(grace)

    async def __aenter__(self) -> ProcessPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
