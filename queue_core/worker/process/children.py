"""The parent's side of ``isolation="process"`` children: one child's pipes and life
(:class:`Child`), the pool's bookkeeping of its children (:class:`ChildSet`), the run
request a child is sent (:func:`request_of`), and the process-group signals that stop one.

Both ways of running an attempt use these: the event loop's
(:meth:`ProcessPool.run <queue_core.worker.process.pool.ProcessPool.run>`, waiting with
:mod:`~queue_core.worker.process.exchange`) and a body thread's
(:mod:`~queue_core.worker.process.direct`). They share one :class:`ChildSet` under its lock.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from queue_core.app.clock import Clock, SystemClock
from queue_core.worker.process.child import encode_frame
from queue_core.worker.process.deadline import START_FRAMES
from queue_core.worker.process.results import (
    CHILD_KEPT,
    ChildStartError,
    ProcessResult,
)
from queue_core.worker.scopes import Carried

__all__ = [
    "POLL",
    "REAP_BOUND",
    "SIDE_FRAMES",
    "START_TIMEOUT",
    "Child",
    "ChildSet",
    "group_exists",
    "pass_on",
    "request_of",
    "signal_group",
]

_HEADER_SIZE = 4
_READ_SIZE = 1 << 16
START_TIMEOUT = 60.0
"""Seconds a new child may take to import and say it is ready."""
REAP_BOUND = 5.0
"""Seconds to wait for a SIGKILLed group to disappear before reporting it as lingering."""
POLL = 0.01
_GROUP_POLL = 0.05
_BOOTSTRAP = (
    "import sys, json\n"
    "sys.path[:] = json.loads(sys.argv[3])\n"
    "from queue_core.worker.process.child import main\n"
    "main(sys.argv[1:3])\n"
)

SIDE_FRAMES = frozenset({"hb", "pg"})
"""The child's frames about a running body, passed on to the attempt's callbacks: a
heartbeat and a progress report (neither an answer nor a start frame)."""


def pass_on(
    frame: Any,
    heartbeat: Callable[[], object] | None,
    progress: Callable[[float, str | None], object] | None,
) -> None:
    """Hand the side frame ``frame`` (one of :data:`SIDE_FRAMES`) to its callback, if
    any: ``("hb",)`` to ``heartbeat()``, ``("pg", fraction, message)`` to
    ``progress(fraction, message)``. What the callback raises is raised."""
    if frame[0] == "hb":
        if heartbeat is not None:
            heartbeat()
    elif progress is not None:
        progress(frame[1], frame[2])


class Child:
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
    def start(cls) -> Child:
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
        with anyio.move_on_after(START_TIMEOUT):
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
            await anyio.sleep(0 if self.pidfd is not None else POLL)

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
        """The first buffered frame that is not a heartbeat, a progress report or a start
        frame, or ``None``."""
        while self._frames:
            frame = self._frames.pop(0)
            if frame[0] not in SIDE_FRAMES and frame[0] not in START_FRAMES:
                return frame
        return None

    async def _wait_group_gone(self) -> None:
        # Polls rather than waiting on the pidfd: a running attempt may be waiting on it.
        while not self.exited():  # noqa: ASYNC110
            await anyio.sleep(POLL)
        while group_exists(self.pid):  # noqa: ASYNC110 - only with surviving grandchildren
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
                with anyio.move_on_after(REAP_BOUND):
                    while not self.exited():  # noqa: ASYNC110
                        await anyio.sleep(POLL)
            else:
                self.notify_cancel()
                signal_group(self.pid, signal.SIGTERM)
            with anyio.move_on_after(grace):
                await self._wait_group_gone()
                self._termination = (False, True)
                return self._termination
            signal_group(self.pid, signal.SIGKILL)
            with anyio.move_on_after(REAP_BOUND):
                await self._wait_group_gone()
                self._termination = (True, True)
                return self._termination
            self._termination = (True, not group_exists(self.pid))
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


class ChildSet:
    """A pool's children: the idle ones, every live one, and those a direct attempt holds.

    Shared by the pool's event-loop path and the body threads of direct attempts, under
    :attr:`lock`. ``clock`` is real time: the pool's waits are the kernel's (``select``)
    and the event loop's timers, whatever clock the worker runs on (its own deadlines
    reach a child through ``cancelled()``).
    """

    def __init__(self, max_tasks_per_child: int | None, clock: Clock | None = None) -> None:
        self.max_tasks_per_child = max_tasks_per_child
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.lock = threading.Lock()
        """Guards :attr:`idle` and :attr:`direct` against the threads of direct attempts."""
        self.idle: list[Child] = []
        self.live: set[Child] = set()
        self.direct: set[Child] = set()
        """Children busy with a direct attempt (:mod:`~queue_core.worker.process.direct`):
        that attempt's thread alone stops and closes them."""
        self.closed = False

    def pop_idle(self, *, direct: bool = False) -> Child | None:
        """An idle child (marked busy with a direct attempt when ``direct``), or ``None``."""
        with self.lock:
            if not self.idle:
                return None
            child = self.idle.pop()
            if direct:
                self.direct.add(child)
            return child

    def keep(self, child: Child, result: ProcessResult | None) -> bool:
        """Whether ``child`` goes back to the idle list after an attempt that gave ``result``."""
        if result is None or result.outcome not in CHILD_KEPT or self.closed:
            return False
        child.runs += 1
        most = self.max_tasks_per_child
        return most is None or child.runs < most


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
    clock: Clock | None = None,
) -> tuple[Any, ...]:
    """A run request, in the order of :data:`queue_core.worker.process.child.REQUEST_FIELDS`;
    its deadline (for ``ctx.deadline``) is ``timeout`` from now on ``clock``'s wall time
    (default the system's)."""
    deadline = None
    if timeout is not None:
        deadline = (clock if clock is not None else _SYSTEM).now_ms() / 1000.0 + timeout
    return (
        func_module,
        func_qualname,
        _main_path() if func_module == "__main__" else None,
        tuple(args),
        dict(kwargs),
        job_id,
        attempt,
        deadline,
        heartbeat_every,
        wants_ctx,
        execution_id,
        step_id,
        list(carried),
    )


_SYSTEM = SystemClock()


def _main_path() -> str | None:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if isinstance(path, str) else None


def group_exists(pgid: int) -> bool:
    """Whether a live (not zombie) process is still in process group ``pgid``.

    Grandchildren orphaned by the leader's death are reparented to init, which may take a
    while to reap them; their zombies are dead and hold nothing, so they do not count.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal still counts as present
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no procfs: only the kernel's answer above is known
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue
        # after "pid (comm)": state ppid pgrp ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
