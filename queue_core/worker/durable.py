"""Workflows on the worker (SPEC §12): the two things a workflow's attempt needs of it.

- The function step's job and a child job carry their call's arguments in their payload
  (:func:`carries_payload`), unlike a flow step, whose call is built from the execution
  (``get_step_inputs``).
- A function that stopped to wait raises :class:`~queue_core.app.durable.Suspended` out
  of its body; :func:`record_suspension` records that attempt with outcome ``suspended``
  and a ``RETRY`` decision that spends no attempt, carrying the suspension to
  ``Storage.finish`` (:class:`~queue_core.records.workflows.SuspendedEnd`). The slot is
  freed like after any attempt end: a sleeping or waiting workflow holds no slot.

Everything else -- replaying the function, memos fenced by the lease -- happens in the
body (:mod:`queue_core.app.durable`), which the worker runs like any task body. This
module imports none of it: a worker that runs no workflow never loads the workflow code
(:func:`suspended` looks the class up in ``sys.modules``, as ``step_failure_reason`` does).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from queue_core.records.jobs import Action, AttemptEnd, ClaimedJob, Decision, Outcome, Reason

if TYPE_CHECKING:
    from queue_core.app.durable import Suspended
    from queue_core.app.task import Task
    from queue_core.records.workflows import Suspension
    from queue_core.worker.slots import Attempt

__all__ = [
    "carries_payload",
    "record_suspension",
    "suspended",
    "suspended_end",
    "suspension_decision",
]

_PARKED_AT = 2**62  # queue_core.records.workflows.PARKED_AT, without loading that module


def carries_payload(job: ClaimedJob, task: Task[Any, Any]) -> bool:
    """Whether a step job's payload holds its call (a workflow's function step, whose task
    is a workflow body, or a child job, whose step id ``<task>#<n>`` no flow step has)."""
    step_id = job.step_id
    return step_id is not None and ("#" in step_id or getattr(task.func, "__durable__", False))


def suspended(exc: BaseException) -> Suspended | None:
    """``exc`` when it is a workflow's :class:`~queue_core.app.durable.Suspended`."""
    durable = sys.modules.get("queue_core.app.durable")
    if durable is None or not isinstance(exc, durable.Suspended):
        return None
    return exc  # type: ignore[no-any-return]


def suspension_decision(exc: Suspended) -> Decision:
    """``RETRY`` spending no attempt; its delay is the time to the wake (a sleep, an event
    wait's timeout), so an idle worker wakes for it, else 0 (storage parks the job)."""
    ready = exc.suspension.ready_at
    delay = 0 if ready is None or ready >= _PARKED_AT else max(0, ready - exc.now_ms)
    return Decision(action=Action.RETRY, delay_ms=delay, spends_attempt=False)


def record_suspension(recorder: Any, att: Attempt, exc: Suspended) -> None:
    """Record ``att`` ended ``suspended`` (reason ``sleep``, ``event`` or ``children``)
    through ``recorder.end`` (the one recording path)."""
    reason = Reason(exc.suspension.reason)
    decision = suspension_decision(exc)
    recorder.end(att, Outcome.SUSPENDED, reason, decision, suspension=exc.suspension)


def suspended_end(end: AttemptEnd, suspension: Suspension) -> AttemptEnd:
    """``end`` as the :class:`~queue_core.records.workflows.SuspendedEnd` storage applies."""
    from queue_core.records.workflows import SuspendedEnd

    return SuspendedEnd(
        ref=end.ref,
        outcome=end.outcome,
        decision=end.decision,
        reason=end.reason,
        result=end.result,
        error=end.error,
        mode=end.mode,
        suspension=suspension,
    )
