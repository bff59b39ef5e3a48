"""What the worker says: one formatter per event, so another log format can plug in.

Logger ``queue_core.worker``. Every attempt end the worker records goes through
:func:`log_attempt_end` (INFO; WARNING when the job is dead-lettered). The event is
built as a plain dict by :func:`attempt_end_event` and handed to the log call in
``extra={"event": ...}`` too, so a JSON formatter can print the fields as they are.
"""

from __future__ import annotations

import logging
from typing import Any

from queue_core.model import Action, AttemptEnd

__all__ = ["attempt_end_event", "log", "log_attempt_end"]

log = logging.getLogger("queue_core.worker")


def attempt_end_event(end: AttemptEnd, task_name: str, duration: float) -> dict[str, Any]:
    """The fields of one attempt end: task, job, attempt, outcome, reason, duration."""
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
    }
    if decision.action is Action.DEAD:
        event["dead_reason"] = decision.reason
    elif decision.action is Action.RETRY:
        event["retry_in_s"] = decision.delay_ms / 1000.0
    if end.error is not None:
        event["error_class"] = end.error.error_class
        event["error"] = end.error.message
    return event


def _text(event: dict[str, Any]) -> str:
    text = f"{event['task']} job {event['job_id']} attempt {event['attempt']}: {event['outcome']}"
    if event["reason"] is not None:
        text += f" ({event['reason']})"
    text += f" in {event['duration_s']:.3f} s"
    if "error_class" in event:
        text += f": {event['error_class']}: {event['error']}"
    if "dead_reason" in event:
        text += f" -> dead-lettered, reason {event['dead_reason']}"
    elif "retry_in_s" in event:
        text += f" -> retry in {event['retry_in_s']:g} s"
    return text


def log_attempt_end(end: AttemptEnd, task_name: str, duration: float) -> None:
    """Log one attempt end: INFO, or WARNING when the job is dead-lettered."""
    dead = end.decision.action is Action.DEAD
    level = logging.WARNING if dead else logging.INFO
    if not log.isEnabledFor(level):
        return
    event = attempt_end_event(end, task_name, duration)
    log.log(level, "%s", _text(event), extra={"event": event})
