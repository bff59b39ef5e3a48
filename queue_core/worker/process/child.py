"""The child side of ``isolation="process"``: a warm interpreter that runs sync task bodies.

The parent (:class:`~queue_core.worker.process.children.Child`) starts this module in a
fresh interpreter in its own session (so the child is a process group leader) and talks to
it over two pipes with length-prefixed pickle frames. This module itself imports only the
standard library, :mod:`queue_core.worker.caps`, (for a ``TaskError``)
:mod:`queue_core.records.errors` and, at a body's first ``ctx.progress``, the rule
:func:`queue_core.rules.control.check_progress` (the body's module imported queue-core
already). It runs
in another process than the worker, so it keeps its own clock: the heartbeat and progress
throttles read :func:`time.monotonic` here (the worker's
:class:`~queue_core.app.clock.Clock` does not reach this process).

Frames, parent -> child::

    ("run", request, sent_at)                           request: a tuple, see ``_run``;
                                                        sent_at: the parent's
                                                        ``time.monotonic()`` as it sent it
    ("cancel",)                                         sent before the group gets SIGTERM

Frames, child -> parent::

    ("ready", pid)                                      once, at start
    ("prep",)                                           the body's module is imported
                                                        first (its first use here): the
                                                        parent holds the deadline until
    ("go", at)                                          the body starts at ``at`` (this
                                                        process's ``time.monotonic()``,
                                                        the same clock as the parent's);
                                                        sent after a "prep", or when ``at``
                                                        is more than :data:`LATE_START`
                                                        after ``sent_at``
    ("hb",)                                             a (throttled) ``ctx.heartbeat()``
    ("pg", fraction, message)                           a ``ctx.progress()`` report,
                                                        checked (a float from 0.0 to 1.0,
                                                        ``None`` or a str): the first goes
                                                        at once, then at most one per
                                                        ``PROGRESS_EVERY_MS`` (the latest
                                                        waits, sent when due or before the
                                                        answer, never after it)
    ("ok", value_blob)                                  the body returned (pickled apart, so
                                                        a value the parent cannot load fails
                                                        that attempt, not the pipe)
    ("val", value)                                      the body returned None, or an exact
                                                        bool, int, float, str or bytes: sent
                                                        as itself, no second pickle
    ("err", info)                                       the body raised (see ``_error_info``)

A request is one frame and an answer is one frame: one ``write`` each way per attempt,
and the child reads a request with one ``read`` (its frames are buffered).

The child never answers a run with anything else: if it dies instead, the parent sees the
pipe close and the process exit, and reports the exit code or signal.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timezone
from types import ModuleType
from typing import Any

from queue_core.worker.caps import cap_message, format_traceback

_HEADER = struct.Struct("!I")
_READ_SIZE = 1 << 16
_PLAIN = frozenset({type(None), bool, int, float, str, bytes})
"""Types of return values sent as themselves: exact types that pickle to themselves."""


LATE_START = 0.005
"""Seconds a body may start after its request was sent without telling the parent: the
parent stops an attempt at ``sent_at + timeout + LATE_START``, or at ``at + timeout`` once
a ``("go", at)`` frame came (after a module's first import, a slow unpickle, a busy
machine), and holds the deadline while a ``("prep",)`` awaits its ``go`` (up to
:data:`PREP_BOUND`), so a body runs its whole timeout: never stopped early (SPEC §4)."""

PREP_BOUND = 60.0
"""Seconds past the timeout the parent waits for the ``go`` of a ``prep`` (an import that
hangs is stopped then, as a child that does not start is)."""

_ORPHANED = 70
"""Exit status of a child whose worker went away while it ran a body."""


def ready_fds(fds: list[int], timeout: float, *, write: bool = False) -> list[int]:
    """The descriptors of ``fds`` ready to read (or, with ``write``, to write) within
    ``timeout`` seconds. ``poll`` rather than ``select``: a long-lived process can hold
    descriptors numbered past ``select``'s limit of 1024."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLOUT if write else select.POLLIN)
    return [fd for fd, _ in poller.poll(max(timeout, 0.0) * 1000.0)]


def encode_frame(message: object) -> bytes:
    """Pickle ``message`` and prefix it with its length."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def heartbeat_due(last: float | None, now: float, every: float) -> bool:
    """Whether a heartbeat at ``now`` is sent, the previous one having gone at ``last``.

    The throttle rule, pure: the first beat always goes, later ones once ``every`` seconds
    have passed since the last one that went.
    """
    return last is None or now - last >= every


class _Pipe:
    """Blocking frame I/O on the child's two pipe ends."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd = rfd
        self.wfd = wfd
        self._buffer = bytearray()
        """Bytes read past the last whole frame taken."""
        self._lock = threading.Lock()  # a body may heartbeat from its own threads

    def recv(self) -> Any:
        """The next frame, or ``None`` when the parent closed its end.

        One ``read`` per frame in the usual case (the parent writes a frame at once).
        """
        buf = self._buffer
        while True:
            if len(buf) >= _HEADER.size:
                end = _HEADER.size + _HEADER.unpack_from(buf)[0]
                if len(buf) >= end:
                    body = bytes(buf[_HEADER.size : end])
                    del buf[:end]
                    return pickle.loads(body)
            chunk = os.read(self.rfd, _READ_SIZE)
            if not chunk:
                return None
            if not buf and len(chunk) == _HEADER.size + _HEADER.unpack_from(chunk)[0]:
                return pickle.loads(memoryview(chunk)[_HEADER.size :])  # exactly one frame
            buf += chunk

    def readable(self) -> bool:
        return bool(self._buffer) or bool(ready_fds([self.rfd], 0))

    def send(self, message: object) -> None:
        """Write one frame. When the worker is gone (its end of the pipe closed: it was
        SIGKILLed, or it stopped this child) the child exits at once and quietly: its
        result could not be recorded anyway, the attempt is reaped and retried, and an
        orphan must not print a ``BrokenPipeError`` traceback into the worker's log."""
        data = memoryview(encode_frame(message))
        with self._lock:
            try:
                while data:
                    data = data[os.write(self.wfd, data) :]
            except (BrokenPipeError, ConnectionResetError):
                os._exit(_ORPHANED)


class ChildContext:
    """The ``ctx`` a process-isolated body receives; duck-compatible with ``JobContext``.

    Attributes:
        job_id: the job's id.
        attempt: the attempt number, 1-based.
        deadline: when the attempt times out (aware UTC datetime), or ``None``.
        execution_id: for a flow step, its execution's id (``None`` otherwise).
        step_id: for a flow step, its step id (``None`` otherwise).
    """

    def __init__(
        self,
        pipe: _Pipe,
        *,
        job_id: str,
        attempt: int,
        deadline: float | None,
        heartbeat_every: float,
        execution_id: str | None = None,
        step_id: str | None = None,
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.execution_id = execution_id
        self.step_id = step_id
        self.deadline = (
            None if deadline is None else datetime.fromtimestamp(deadline, tz=timezone.utc)
        )
        self._pipe = pipe
        self._every = heartbeat_every
        self._last: float | None = None
        self._cancelled = False
        self._open = True
        self._reports = threading.Lock()
        """Guards the progress state below (a body may report from its own threads)."""
        self._report_sent: float | None = None
        """When the last ``pg`` frame went (``time.monotonic()``)."""
        self._report_waiting: tuple[float, str | None] | None = None
        """The latest report not sent yet (it came within ``PROGRESS_EVERY_MS``)."""
        self._report_timer: threading.Timer | None = None
        """Sends the waiting report when it falls due."""

    @property
    def cancelled(self) -> bool:
        """True once the worker has decided to stop this attempt (timeout, cancel, lost lease).

        The worker announces it just before the process group gets SIGTERM, so a body that
        handles SIGTERM can read it in its handler.
        """
        if not self._cancelled and self._open:
            while self._pipe.readable():
                message = self._pipe.recv()
                if message is None or message[0] == "cancel":
                    self._cancelled = True
                    break
        return self._cancelled

    def heartbeat(self) -> None:
        """Tell the worker the body is alive. Cheap: sends at most one message per interval.

        Raises:
            RuntimeError: when called after the attempt ended.
        """
        if not self._open:
            raise RuntimeError(
                f"ctx.heartbeat() called outside its attempt (job {self.job_id}, "
                f"attempt {self.attempt} has ended)"
            )
        now = time.monotonic()
        if heartbeat_due(self._last, now, self._every):
            self._last = now
            self._pipe.send(("hb",))

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the body is: ``fraction`` from 0.0 to 1.0 and an optional
        ``message`` (``JobHandle.progress()`` reads it back, SPEC §13), as the thread
        ``ctx.progress`` does.

        Cheap: the first report goes to the worker at once, later ones at most one per
        :data:`~queue_core.rules.control.PROGRESS_EVERY_MS` (the worker writes no more
        often); a report that comes sooner waits, replaced by any later one, and goes
        when due or as the body ends.

        Raises:
            ConfigError: ``invalid_option``: ``fraction`` is not a number from 0.0 to 1.0,
                or ``message`` is not a string.
            RuntimeError: when called after the attempt ended.
        """
        # the rule itself (loaded with the body's module's own import of queue_core)
        from queue_core.rules.control import PROGRESS_EVERY_MS, check_progress

        report, every = check_progress(fraction, message), PROGRESS_EVERY_MS / 1000.0
        with self._reports:
            if not self._open:
                raise RuntimeError(
                    f"ctx.progress() called outside its attempt (job {self.job_id}, "
                    f"attempt {self.attempt} has ended)"
                )
            now = time.monotonic()
            sent = self._report_sent
            if self._report_timer is None and heartbeat_due(sent, now, every):
                self._report_sent = now
                self._pipe.send(("pg", *report))
                return
            self._report_waiting = report
            if self._report_timer is None:
                assert sent is not None
                timer = threading.Timer(sent + every - now, self._send_waiting)
                timer.daemon = True
                self._report_timer = timer
                timer.start()

    def _send_waiting(self) -> None:
        """On the timer's thread: send the waiting report, now due."""
        with self._reports:
            self._report_timer = None
            report, self._report_waiting = self._report_waiting, None
            if report is not None and self._open:
                self._report_sent = time.monotonic()
                self._pipe.send(("pg", *report))

    def _close(self) -> None:
        """The body ended: its waiting report goes now (before the answer), none after."""
        with self._reports:
            self._open = False
            timer, self._report_timer = self._report_timer, None
            if timer is not None:
                timer.cancel()
            report, self._report_waiting = self._report_waiting, None
            if report is not None:
                self._pipe.send(("pg", *report))


_main_module: ModuleType | None = None


def _import(module_name: str, main_path: str | None) -> ModuleType:
    global _main_module
    if module_name != "__main__":
        return importlib.import_module(module_name)
    # The parent's ``__main__`` script: load it once under another name, the way
    # multiprocessing does, so an ``if __name__ == "__main__":`` block does not run here.
    if _main_module is None:
        if main_path is None:
            raise ImportError("the task lives in __main__, which has no file to import")
        spec = importlib.util.spec_from_file_location("__mp_main__", main_path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import the main script {main_path!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["__mp_main__"] = module
        spec.loader.exec_module(module)
        _main_module = module
    return _main_module


def _imports(module_name: str) -> bool:
    """Whether finding a body of ``module_name`` imports it first (its first use here)."""
    if module_name == "__main__":
        return _main_module is None
    return module_name not in sys.modules


def resolve(module_name: str, qualname: str, main_path: str | None = None) -> Callable[..., Any]:
    """Find the body: import the module, walk the qualname, unwrap a task wrapper.

    A ``queue_core`` task object exposes the plain function as ``.fn``; other wrappers
    that are not plain functions are unwrapped through ``__wrapped__``.
    """
    obj: Any = _import(module_name, main_path)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    fn = getattr(obj, "fn", None)
    if callable(fn):
        return fn  # type: ignore[no-any-return]
    wrapped = getattr(obj, "__wrapped__", None)
    if not inspect.isfunction(obj) and callable(wrapped):
        return wrapped  # type: ignore[no-any-return]
    if not callable(obj):
        raise TypeError(f"{module_name}.{qualname} is not callable")
    return obj  # type: ignore[no-any-return]


def _error_info(exc: BaseException) -> dict[str, Any]:
    from queue_core.records.errors import TaskError

    cls = type(exc)
    non_retryable = exc.non_retryable if isinstance(exc, TaskError) else None
    blob: bytes | None
    try:
        blob = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(blob)  # an exception whose __init__ cannot be replayed fails here
    except Exception:
        blob = None
    return {
        "error_class": cls.__name__,
        "error_type": f"{cls.__module__}.{cls.__qualname__}",
        "module": cls.__module__,
        "qualname": cls.__qualname__,
        "message": cap_message(str(exc)),
        "traceback": format_traceback(exc),
        "is_task_error": isinstance(exc, TaskError),
        "non_retryable": non_retryable,
        "exception": blob,
    }


REQUEST_FIELDS = (
    "module",
    "qualname",
    "main_path",
    "args",
    "kwargs",
    "job_id",
    "attempt",
    "deadline",
    "heartbeat_every",
    "wants_ctx",
    "execution_id",
    "step_id",
    "carried",
)
"""The fields of a run request, in the order of its tuple (a tuple pickles and loads in
about half the time of a dict with these keys)."""


def _call(
    pipe: _Pipe, request: tuple[Any, ...], sent_at: float | None
) -> tuple[ChildContext | None, Any]:
    """Run the body of ``request``; ``(ctx, value)`` (the ``ctx`` it got, if any)."""
    module, qualname, main_path, args, kwargs, job_id, attempt, deadline = request[:8]
    every, wants_ctx, execution_id, step_id, carried = request[8:]
    text = str(attempt)
    if os.environ.get("QUEUE_CORE_ATTEMPT") != text:
        os.environ["QUEUE_CORE_ATTEMPT"] = text
    ctx: ChildContext | None = None
    imports = sent_at is not None and _imports(module)
    if imports:  # the import may outlast the timeout: the parent waits for the start
        pipe.send(("prep",))
    body = resolve(module, qualname, main_path)
    if wants_ctx:
        ctx = ChildContext(
            pipe,
            job_id=job_id,
            attempt=attempt,
            deadline=deadline,
            heartbeat_every=every,
            execution_id=execution_id,
            step_id=step_id,
        )
        kwargs = {**kwargs, "ctx": ctx}
    if sent_at is not None:  # the start, as late as it can be taken before the call
        at = time.monotonic()
        if imports or at - sent_at > LATE_START:  # the parent's deadline moves with it
            pipe.send(("go", at))
            if deadline is not None and ctx is not None:
                ctx.deadline = datetime.fromtimestamp(
                    deadline + max(0.0, at - sent_at), tz=timezone.utc
                )
    try:
        if not carried:
            return ctx, body(*args, **kwargs)
        with ExitStack() as scopes:  # a listener's attempt scope (queue_core.worker.scopes)
            from queue_core.worker.scopes import enter_carried

            enter_carried(scopes, carried)
            return ctx, body(*args, **kwargs)
    finally:
        if ctx is not None:
            ctx._close()  # its waiting progress report goes before the answer


def _run(pipe: _Pipe, request: tuple[Any, ...], sent_at: float | None) -> None:
    ctx: ChildContext | None = None
    try:
        ctx, value = _call(pipe, request, sent_at)
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            raise TypeError(
                f"{request[0]}.{request[1]} returned an awaitable: "
                "async bodies run on the worker's event loop, not with isolation='process'"
            )
        if type(value) in _PLAIN:
            answer: tuple[str, Any] = ("val", value)
        else:
            answer = ("ok", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception as exc:  # BaseException (SystemExit...) ends the child on purpose
        pipe.send(("err", _error_info(exc)))
    else:
        pipe.send(answer)
    finally:
        if ctx is not None:
            ctx._close()
        # A body may have installed a SIGTERM handler; the next attempt must die on SIGTERM.
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv: list[str]) -> None:
    """Serve run requests on the pipes named by ``argv`` (``[read_fd, write_fd]``)."""
    pipe = _Pipe(int(argv[0]), int(argv[1]))
    os.set_inheritable(pipe.rfd, False)
    os.set_inheritable(pipe.wfd, False)
    pipe.send(("ready", os.getpid()))
    while True:
        message = pipe.recv()
        if message is None:  # the parent closed the pipe: a clean exit
            return
        if message[0] == "run":
            _run(pipe, message[1], message[2] if len(message) > 2 else None)
        # a stale "cancel" between attempts is ignored


if __name__ == "__main__":
    main(sys.argv[1:])
