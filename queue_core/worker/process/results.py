"""The results of process-isolated attempts and the errors a child reports.

The value types a :class:`~queue_core.worker.process.ProcessPool` returns (re-exported by
:mod:`queue_core.worker.process`), the stand-ins for exceptions that cannot travel back
from a child, and how an answer (or its absence) becomes a :class:`ProcessResult`.
"""

from __future__ import annotations

import enum
import pickle
import signal
from dataclasses import dataclass
from typing import Any

from queue_core.records.errors import TaskError
from queue_core.records.jobs import ErrorInfo
from queue_core.worker.caps import cap_message, cap_traceback

__all__ = [
    "ANSWERS",
    "CHILD_KEPT",
    "ChildError",
    "ChildStartError",
    "ProcessOutcome",
    "ProcessResult",
    "RemoteError",
    "RemoteTaskError",
    "answered",
    "unanswered",
]


class ProcessOutcome(str, enum.Enum):
    """How a process-isolated attempt ended."""

    RETURNED = "returned"
    """The body returned; ``ProcessResult.value`` holds the value."""
    RAISED = "raised"
    """The body raised an exception; ``ProcessResult.error`` describes it."""
    TIMED_OUT = "timed_out"
    """The attempt hit its ``timeout``; its process group was terminated."""
    CANCELLED = "cancelled"
    """``cancelled()`` turned true (or the pool closed); the process group was terminated."""
    DIED = "died"
    """The child exited or was killed on its own (crash, ``os._exit``, OOM killer)."""


CHILD_KEPT = frozenset({ProcessOutcome.RETURNED, ProcessOutcome.RAISED})
"""Outcomes after which the child is healthy and goes back to the idle list."""

ANSWERS = frozenset({"ok", "val", "err"})
"""The frames that answer a run request (see :mod:`queue_core.worker.process.child`)."""


class ChildStartError(RuntimeError):
    """A child interpreter could not be started or did not report ready in time."""


class RemoteError(Exception):
    """Stands in for an exception raised in a child that could not be sent back as itself.

    Attributes:
        error_class: the original class's simple name.
        error_type: the original class's fully qualified name.
    """

    def __init__(self, message: str, *, error_class: str, error_type: str) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.error_type = error_type


class RemoteTaskError(TaskError):
    """Stands in for a :class:`TaskError` subclass that could not be sent back as itself.

    It keeps ``non_retryable``, so a fatal or forced-retryable error is classified as such.
    """

    def __init__(
        self, message: str, *, error_class: str, error_type: str, non_retryable: bool | None
    ) -> None:
        super().__init__(message, non_retryable=non_retryable)
        self.error_class = error_class
        self.error_type = error_type


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildError:
    """An exception raised by a body in a child process."""

    error_class: str
    """Simple class name, e.g. ``ValueError``."""
    error_type: str
    """Fully qualified class name, e.g. ``builtins.ValueError``."""
    message: str
    traceback: str
    """The formatted traceback from the child (tail kept when long)."""
    is_task_error: bool
    """Whether the exception is a ``queue_core`` :class:`TaskError` (or subclass)."""
    non_retryable: bool | None
    """``TaskError.non_retryable`` (True: fatal, False: forced retryable), else ``None``."""
    exception: BaseException
    """The original exception when it pickles, else a :class:`RemoteError` /
    :class:`RemoteTaskError` stand-in with the same message; classify with ``isinstance``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessResult:
    """The end of one process-isolated attempt."""

    outcome: ProcessOutcome
    value: Any = None
    """``RETURNED``: the body's return value."""
    error: ChildError | None = None
    """``RAISED``: the exception."""
    exit_code: int | None = None
    """``DIED`` (and stopped attempts): the child's exit status when it exited normally."""
    signal: int | None = None
    """``DIED`` (and stopped attempts): the signal that killed the child."""
    sigkill: bool = False
    """``TIMED_OUT`` / ``CANCELLED``: SIGKILL was needed because SIGTERM did not end the
    group within ``kill_grace``."""
    group_gone: bool = True
    """The child's process group no longer exists. False only if members survived even
    SIGKILL for a few seconds (e.g. stuck in the kernel, or unreaped zombies)."""
    pid: int = 0
    """The child's pid, which is also its process group id."""
    duration: float = 0.0
    """Seconds from sending the request to the end of the attempt."""

    def describe(self) -> str:
        """A one-line account of how the child ended, for logs and attempt records."""
        if self.outcome is ProcessOutcome.RETURNED:
            return "returned"
        if self.outcome is ProcessOutcome.RAISED and self.error is not None:
            return f"raised {self.error.error_class}: {self.error.message}"
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            how = f"killed by {name} ({self.signal})"
        elif self.exit_code is not None:
            how = f"exited with code {self.exit_code}"
        else:
            how = "ended"
        if self.outcome is ProcessOutcome.DIED:
            return f"child process {self.pid} {how}"
        stop = "timed out" if self.outcome is ProcessOutcome.TIMED_OUT else "cancelled"
        via = "SIGTERM, then SIGKILL" if self.sigkill else "SIGTERM"
        return f"{stop}: process group {self.pid} stopped with {via}; child {how}"

    def error_info(self) -> ErrorInfo | None:
        """The error to record for this attempt, or ``None`` when the body returned."""
        if self.outcome is ProcessOutcome.RETURNED:
            return None
        if self.outcome is ProcessOutcome.RAISED and self.error is not None:
            return ErrorInfo(
                error_class=self.error.error_class,
                error_type=self.error.error_type,
                message=cap_message(self.error.message),
                traceback=cap_traceback(self.error.traceback),
            )
        error_type = _STOP_ERROR_TYPES[self.outcome]
        return ErrorInfo(
            error_class=error_type.rpartition(".")[2],
            error_type=error_type,
            message=self.describe(),
        )


_STOP_ERROR_TYPES = {
    ProcessOutcome.TIMED_OUT: "builtins.TimeoutError",
    ProcessOutcome.CANCELLED: "queue_core.worker.process.AttemptCancelled",
    ProcessOutcome.DIED: "queue_core.worker.process.ProcessDied",
    ProcessOutcome.RAISED: "queue_core.worker.process.RemoteError",
}
"""``ErrorInfo.error_type`` recorded for attempts whose child did not answer."""


_stand_ins: dict[tuple[type[Exception], str, str], type[Any]] = {}


def _stand_in_class(base: type[Exception], info: dict[str, Any]) -> type[Any]:
    """A subclass of ``base`` that carries the original class's name, qualname and module.

    So ``type(exc).__name__`` (and so ``non_retryable`` name matching) sees the original
    names, while ``isinstance(exc, RemoteError)`` still tells a stand-in apart.
    """
    module = info.get("module") or "builtins"
    qualname = info.get("qualname") or info["error_class"]
    key = (base, module, qualname)
    cls = _stand_ins.get(key)
    if cls is None:
        cls = type(info["error_class"], (base,), {"__module__": module, "__qualname__": qualname})
        _stand_ins[key] = cls
    return cls


def _child_error(info: dict[str, Any]) -> ChildError:
    exception: BaseException | None = None
    if info["exception"] is not None:
        try:
            loaded = pickle.loads(info["exception"])
        except Exception:
            loaded = None
        if isinstance(loaded, BaseException):
            exception = loaded
    if exception is None:
        names = {"error_class": info["error_class"], "error_type": info["error_type"]}
        if info["is_task_error"]:
            cls = _stand_in_class(RemoteTaskError, info)
            exception = cls(info["message"], non_retryable=info["non_retryable"], **names)
        else:
            exception = _stand_in_class(RemoteError, info)(info["message"], **names)
    return ChildError(
        error_class=info["error_class"],
        error_type=info["error_type"],
        message=info["message"],
        traceback=info["traceback"],
        is_task_error=info["is_task_error"],
        non_retryable=info["non_retryable"],
        exception=exception,
    )


def answered(answer: Any, pid: int, elapsed: float) -> ProcessResult:
    """The result of an attempt whose child answered (``ok``, ``val`` or ``err``)."""
    if answer[0] == "val":  # a plain value, sent as itself
        return ProcessResult(
            outcome=ProcessOutcome.RETURNED, value=answer[1], pid=pid, duration=elapsed
        )
    if answer[0] == "err":
        return ProcessResult(
            outcome=ProcessOutcome.RAISED, error=_child_error(answer[1]), pid=pid, duration=elapsed
        )
    try:
        value = pickle.loads(answer[1])
    except Exception as exc:
        info = {
            "error_class": type(exc).__name__,
            "error_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": f"cannot load the value returned by the child: {exc}",
            "traceback": "",
            "is_task_error": False,
            "non_retryable": None,
            "exception": None,
        }
        return ProcessResult(
            outcome=ProcessOutcome.RAISED, error=_child_error(info), pid=pid, duration=elapsed
        )
    return ProcessResult(outcome=ProcessOutcome.RETURNED, value=value, pid=pid, duration=elapsed)


def unanswered(
    why_stopped: ProcessOutcome | None,
    status: tuple[int | None, int | None],
    sigkill: bool,
    group_gone: bool,
    pid: int,
    elapsed: float,
) -> ProcessResult:
    """The result of an attempt whose child gave no answer: stopped for ``why_stopped``
    (timed out, cancelled) or, when ``None``, died; ``status`` is the child's
    ``(exit code, signal)``, ``sigkill``/``group_gone`` what stopping its group took."""
    exit_code, sig = status
    return ProcessResult(
        outcome=why_stopped or ProcessOutcome.DIED,
        exit_code=exit_code,
        signal=sig,
        sigkill=sigkill,
        group_gone=group_gone,
        pid=pid,
        duration=elapsed,
    )
