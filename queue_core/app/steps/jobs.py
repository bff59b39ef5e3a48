"""The jobs of an execution's steps, computed once by the core at ``flow.start``.

Storage releases a step by copying its job (:class:`~queue_core.records.jobs.NewJob`) and
setting ``flow_deadline_at``; it computes nothing. So every option is merged here,
field by field, later wins: queue defaults → flow → step (SPEC §7):

* retry: :meth:`FlowSpec.step_policy` gives ``max_attempts`` and the delay storage
  applies to a reaped attempt; the flow's and the step's explicit fields go to the job's
  ``options`` (``{"policy": …}``) so the worker's decisions merge them over the task's
  own policy (queue defaults → task), flow and step last;
* ``queue``: step, else flow, else ``"default"``; ``priority``: step, else 0;
* ``timeout``: the step's (``timeout_ms == 0`` is "no limit"), else the queue's
  ``default_timeout``; ``heartbeat``, ``schedule_to_start``, ``isolation`` and
  ``kill_grace`` as the step gives them.

A step job's payload carries no arguments: the worker builds the call when it claims
the job, from ``get_step_inputs``. A ``type: script`` step's job names
:data:`SCRIPT_TASK` and a ``type: http`` step's :data:`HTTP_TASK`: workers run them from
the stored definition (:mod:`queue_core.app.steps.run`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from queue_core.app.steps.names import HTTP_TASK, SCRIPT_TASK
from queue_core.records.jobs import NewJob
from queue_core.rules import RetryPolicy, lost_delay_ms, merge_policies
from queue_core.rules.flows.spec import FlowSpec, StepSpec
from queue_core.storage.flows import NewExecution, step_job_id

__all__ = ["HTTP_TASK", "SCRIPT_TASK", "build_execution", "step_job", "step_options"]


def step_task_name(step: StepSpec) -> str:
    """The task name of ``step``'s job: its task, or the name of the runner of its kind."""
    if step.task is not None:
        return step.task
    return HTTP_TASK if step.kind == "http" else SCRIPT_TASK


def step_options(spec: FlowSpec, step: StepSpec) -> str | None:
    """The job ``options`` JSON of a step: flow+step retry fields, exception lists,
    isolation and kill grace (the per-call override format the worker reads)."""
    opts: dict[str, Any] = {}
    explicit = merge_policies(RetryPolicy(**spec.retry), RetryPolicy(**step.retry))
    if explicit.explicit:
        opts["policy"] = {
            name: (list(v) if isinstance(v := getattr(explicit, name), tuple) else v)
            for name in sorted(explicit.explicit)
        }
    if step.retry_on:
        opts["retry_on"] = list(step.retry_on)
    if step.dont_retry_on:
        opts["dont_retry_on"] = list(step.dont_retry_on)
    if step.isolation is not None:
        opts["isolation"] = step.isolation
    if step.kill_grace_ms is not None:
        opts["kill_grace"] = step.kill_grace_ms / 1000.0
    if not opts:
        return None
    return json.dumps(opts, separators=(",", ":"), sort_keys=True)


def step_job(
    spec: FlowSpec,
    idx: int,
    *,
    execution_id: str,
    payload: bytes,
    queue_defaults: RetryPolicy | None,
    default_timeout_ms: int | None,
    rng: Callable[[], float],
) -> NewJob:
    """The job of step ``idx`` of an execution of ``spec`` (see the module docstring)."""
    step = spec.steps[idx]
    policy = spec.step_policy(step.id, queue_defaults)
    if step.timeout_ms is None:
        timeout_ms = default_timeout_ms
    else:
        timeout_ms = step.timeout_ms or None
    return NewJob(
        id=step_job_id(execution_id, idx),
        task_name=step_task_name(step),
        queue=step.queue or spec.queue or "default",
        payload=payload,
        priority=step.priority or 0,
        max_attempts=policy.max_attempts,
        lost_delay_ms=lost_delay_ms(policy, 1, rng),
        timeout_ms=timeout_ms,
        heartbeat_ms=step.heartbeat_ms,
        schedule_to_start_ms=step.schedule_to_start_ms,
        options=step_options(spec, step),
        execution_id=execution_id,
        step_id=step.id,
    )


def build_execution(
    spec: FlowSpec,
    *,
    execution_id: str,
    input: bytes,
    empty_payload: bytes,
    queue_defaults: RetryPolicy | None,
    default_timeout_ms: int | None,
    rng: Callable[[], float],
    conc_key: str | None = None,
    parent: tuple[str, int] | None = None,
    payload: bytes | None = None,
) -> NewExecution:
    """The :class:`NewExecution` of ``spec`` with the job of every step (``payload``: the
    first step's, a workflow's function step carrying its call's arguments)."""
    jobs = [
        step_job(
            spec,
            i,
            execution_id=execution_id,
            payload=payload if payload is not None and i == 0 else empty_payload,
            queue_defaults=queue_defaults,
            default_timeout_ms=default_timeout_ms,
            rng=rng,
        )
        for i in range(len(spec.steps))
    ]
    return NewExecution.build(
        id=execution_id, spec=spec, input=input, jobs=jobs, conc_key=conc_key, parent=parent
    )
