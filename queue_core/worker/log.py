"""What the worker says: one formatter per event, so another log format can plug in.

Logger ``queue_core.worker``. Every attempt end the worker records goes through
:func:`log_attempt_end` (INFO; WARNING when the job is dead-lettered, once the entry is
written, naming its dead-letter id). The traceback of a failed attempt follows its line
as the worker's ``log_tracebacks`` says (:data:`LOG_TRACEBACKS`). The event is
built as a plain dict by :func:`attempt_end_event` and handed to the log call in
``extra={"event": ...}`` too, so a JSON formatter can print the fields as they are.

The attempt-end line is on the hot path (one per job), so it skips what ``Logger.log``
spends most of its time on: the record is a copy of a template record (no
``findCaller`` stack walk, no path splitting) with the time, level, message and thread
filled in, handed to ``Logger.handle`` (the logger's filters and handlers apply as
usual).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

from queue_core.records.errors import ConfigError
from queue_core.records.jobs import Action, AttemptEnd, Outcome

__all__ = [
    "LOG_TRACEBACKS",
    "attempt_end_event",
    "check_log_tracebacks",
    "fast_record",
    "log",
    "log_attempt_end",
    "wants_traceback",
]

log = logging.getLogger("queue_core.worker")

LOG_TRACEBACKS = ("dead", "all", "none")
"""Values of a worker's ``log_tracebacks``: the traceback of a failed attempt is logged
after its line for dead-lettered jobs only (``dead``, the default), for every failed
attempt (``all``), or never (``none``)."""


def check_log_tracebacks(value: object) -> str:
    """``value`` if it is one of :data:`LOG_TRACEBACKS`, else ``ConfigError``."""
    if value in LOG_TRACEBACKS:
        return str(value)
    raise ConfigError(
        f"invalid log_tracebacks: {value!r} — expected one of {', '.join(LOG_TRACEBACKS)}",
        code="invalid_option",
        field="log_tracebacks",
        value=value,
    )


def wants_traceback(end: AttemptEnd, mode: str) -> bool:
    """Whether ``end``'s traceback is logged under ``log_tracebacks=mode``."""
    tb = None if end.error is None else end.error.traceback
    if mode == "none" or not tb or not tb.startswith("Traceback"):
        return False  # none, or an error the worker made itself (no frames to show)
    if mode == "all":
        return end.outcome is not Outcome.SUCCEEDED
    return end.decision.action is Action.DEAD


def attempt_end_event(
    end: AttemptEnd,
    task_name: str,
    duration: float,
    *,
    queue: str | None = None,
    worker_id: str | None = None,
    dead_id: str | None = None,
    traceback: bool = False,
) -> dict[str, Any]:
    """The fields of one attempt end: task, job, attempt, outcome, reason, duration
    (``duration_s`` rounded to ms, ``duration_ms`` to µs), queue and worker id; then
    ``dead_reason`` or ``retry_in_s``, ``spends_attempt: False`` for an attempt that
    spent none of the retry budget (a shutdown release), the error, the dead-letter
    entry's ``dead_id`` when known and, when ``traceback`` is true, the error's
    ``traceback``."""
    decision = end.decision
    event: dict[str, Any] = {
        "event": "attempt_end",
        "task": task_name,
        "job_id": end.ref.job_id,
        "attempt": end.ref.attempt,
        "outcome": end.outcome.value,
        "reason": end.reason,
        "action": decision.action.value,
        "duration_s": round(duration, 3),
        "duration_ms": round(duration * 1000.0, 3),
        "queue": queue,
        "worker_id": worker_id,
    }
    if decision.action is Action.DEAD:
        event["dead_reason"] = decision.reason
        if dead_id is not None:
            event["dead_id"] = dead_id
    elif decision.action is Action.RETRY:
        event["retry_in_s"] = decision.delay_ms / 1000.0
    if not decision.spends_attempt:
        event["spends_attempt"] = False
    if end.error is not None:
        event["error_class"] = end.error.error_class
        event["error"] = end.error.message
        if traceback and end.error.traceback:
            event["traceback"] = end.error.traceback
    return event


def _text(event: dict[str, Any]) -> str:
    text = f"{event['task']} job {event['job_id']} attempt {event['attempt']}: {event['outcome']}"
    if event["reason"] is not None:
        text += f" ({event['reason']})"
    text += f" in {event['duration_s']:.3f} s"
    if "error_class" in event:
        text += f": {event['error_class']}: {event['error']}"
    if "dead_id" in event:
        text += f" -> dead-lettered as {event['dead_id']}, reason {event['dead_reason']}"
    elif "dead_reason" in event:
        text += f" -> dead-lettered, reason {event['dead_reason']}"
    elif event["outcome"] == "suspended":  # a workflow waits (SPEC §12)
        wait = event.get("retry_in_s")
        text += f" -> waits {wait:g} s" if wait else " -> waits; its slot is free"
    elif event.get("spends_attempt") is False:
        text += " -> released for retry; spends no attempt of its retry budget"
    elif "retry_in_s" in event:
        text += f" -> retry in {event['retry_in_s']:g} s"
    if "traceback" in event:
        text += "\n" + event["traceback"].rstrip()
    return text


_template: tuple[int, dict[str, Any]] | None = None
"""(pid, attributes of a record made by ``Logger.makeRecord``): every attribute a
handler or formatter may read, ``process``/``processName`` of this process."""


def fast_record(
    logger: logging.Logger, level: int, message: str, event: dict[str, Any]
) -> logging.LogRecord:
    """A record like ``logger.makeRecord`` makes for ``message`` (no ``%`` arguments),
    with ``record.event = event``, without the per-record stack walk and path work.

    ``pathname``/``lineno``/``funcName`` are those of a record made without caller
    information (``"(unknown file)"``, ``0``); ``thread``/``threadName`` follow
    ``logging.logThreads``.
    """
    global _template
    pid = os.getpid()
    if _template is None or _template[0] != pid:  # first call, or in a forked child
        made = logger.makeRecord(logger.name, level, "(unknown file)", 0, "", (), None)
        _template = (pid, dict(made.__dict__))
    record: logging.LogRecord = logging.LogRecord.__new__(logging.LogRecord)
    record.__dict__.update(_template[1])
    # The record's own stamp, read as logging.LogRecord reads it: a log line's time is
    # the machine's wall time, also when the worker runs on a manual clock.
    created = time.time()
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0
    record.relativeCreated = (created - _START) * 1000.0
    record.name = logger.name
    record.levelno = level
    record.levelname = logging.getLevelName(level)
    record.msg = message
    record.event = event
    if logging.logThreads:
        record.thread = threading.get_ident()
        record.threadName = threading.current_thread().name
    else:
        record.thread = record.threadName = None
    if "taskName" in record.__dict__:  # Python 3.12+: the asyncio task, as makeRecord does
        record.taskName = _task_name()
    return record


def _task_name() -> str | None:
    asyncio = sys.modules.get("asyncio")
    if asyncio is None or not getattr(logging, "logAsyncioTasks", True):
        return None
    try:
        task = asyncio.current_task()
    except Exception:  # noqa: BLE001 - no running loop in this thread
        return None
    return None if task is None else str(task.get_name())


_probe = logging.LogRecord("", 0, "", 0, "", None, None)
_START = _probe.created - _probe.relativeCreated / 1000.0
"""When ``logging`` was imported (``relativeCreated`` counts from it)."""
del _probe


def log_attempt_end(
    end: AttemptEnd,
    task_name: str,
    duration: float,
    *,
    queue: str | None = None,
    worker_id: str | None = None,
    dead_id: str | None = None,
    traceback: bool = False,
) -> None:
    """Log one attempt end: INFO, or WARNING when the job is dead-lettered (naming
    ``dead_id`` when given); its error's traceback follows when ``traceback``."""
    dead = end.decision.action is Action.DEAD
    level = logging.WARNING if dead else logging.INFO
    if not log.isEnabledFor(level):
        return
    event = attempt_end_event(
        end, task_name, duration, queue=queue, worker_id=worker_id, dead_id=dead_id,
        traceback=traceback,
    )  # fmt: skip
    log.handle(fast_record(log, level, _text(event), event))
