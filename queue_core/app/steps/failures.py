"""The failures of flow-file steps (``type: script`` and ``type: http``), each naming the
attempt reason the worker records (SPEC §7 "Flow files").

A body that raises a :class:`StepFailed` is recorded with ``exc.reason`` instead of
``error``: ``exit_code`` (:class:`~queue_core.app.steps.script.ScriptFailed`), ``http_status``
(:class:`~queue_core.app.steps.http.HttpStatusError`), ``template_error``
(:class:`~queue_core.app.steps.templates.TemplateError`), ``not_allowed``
(:class:`StepNotAllowed`, never retried). Every other one is retried by the flow's
policy like any body error (SPEC §3).

The worker looks this module up in ``sys.modules`` (a worker that never ran such a step
never imports it); it imports nothing but :mod:`queue_core.records.errors`.
"""

from __future__ import annotations

from queue_core.records.errors import NonRetryableError, QueueCoreError

__all__ = ["StepFailed", "StepNotAllowed"]


class StepFailed(QueueCoreError):
    """An attempt of a flow-file step failed.

    Attributes:
        reason: the attempt reason recorded (``exit_code``, ``http_status``,
            ``template_error``, ``not_allowed``; ``error`` for a request that failed).
    """

    reason: str = "error"


class StepNotAllowed(StepFailed, NonRetryableError):
    """The worker's operator has not allowed this step on this worker: a script outside
    its ``flow_dirs``, an http step to a host outside its ``http_hosts``. Recorded with
    reason ``not_allowed``; never retried (the job is dead-lettered ``fatal``)."""

    reason = "not_allowed"
