"""Flow steps on the worker (SPEC §7): building a step's call at claim time, running
``type: script`` and ``type: http`` steps, and the flow deadline.

A step job's payload carries no arguments. When the worker starts an attempt of one,
it reads the execution input and the results of the step's dependencies from storage
(``get_step_inputs``, off the event loop) and passes them by parameter name
(:func:`queue_core.app.steps.calls.step_kwargs`). A ``type: script`` step's job names
:data:`~queue_core.app.steps.jobs.SCRIPT_TASK` and a ``type: http`` step's
:data:`~queue_core.app.steps.jobs.HTTP_TASK`: the worker runs them as async tasks whose body
is :func:`queue_core.app.steps.run.run_step_attempt` with the stored step definition and
the worker's :class:`~queue_core.app.steps.gate.StepGate` (cancelling a script stops its
process group, SIGTERM → ``kill_grace`` → SIGKILL; cancelling a request closes it).

The execution's deadline (``ClaimedJob.flow_deadline_at``) bounds every attempt: the
watchdog ends the attempt there (:func:`flow_deadline_of`), recorded ``timed_out`` with
reason ``flow_timeout``, a decision that is never retried.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from queue_core.app.steps.names import FILE_STEP_TASKS, HTTP_TASK, SCRIPT_TASK
from queue_core.app.task import Task, build_spec
from queue_core.records.jobs import Reason

if TYPE_CHECKING:
    from collections.abc import Callable
    from inspect import Signature

    from queue_core.app.steps.gate import StepGate
    from queue_core.app.steps.run import StepAttempt
    from queue_core.records.jobs import ClaimedJob
    from queue_core.rules.flows.spec import FlowSpec
    from queue_core.storage.flows import StepInputs
    from queue_core.storage.protocol import Storage
    from queue_core.worker.host import WorkerHost

__all__ = [
    "HTTP_TASK",
    "SCRIPT_TASK",
    "file_step_tasks",
    "flow_binds",
    "flow_deadline_of",
    "step_call",
    "step_failure_reason",
]

_DEFAULT_KILL_GRACE = 10.0


async def _file_step(call: StepAttempt) -> Any:
    """The body of every ``type: script`` and ``type: http`` step."""
    from queue_core.app.steps.run import run_step_attempt

    return await run_step_attempt(call)


def file_step_tasks(queue: WorkerHost) -> dict[str, Task[Any, Any]]:
    """The tasks the worker runs ``type: script`` and ``type: http`` steps with (never
    registered on the queue), by name."""
    spec = build_spec(is_async=True)
    return {name: Task(queue, _file_step, name=name, spec=spec) for name in FILE_STEP_TASKS}


def step_failure_reason(exc: BaseException) -> Reason | None:
    """The attempt reason of a flow-file step's failure (``exit_code``, ``http_status``,
    ``template_error``, ``not_allowed``), or ``None``. Looked up in ``sys.modules``: if
    no such step ran here, :mod:`queue_core.app.steps.failures` was never imported and no
    ``StepFailed`` exists (a worker with no flow never loads it)."""
    failures = sys.modules.get("queue_core.app.steps.failures")
    if failures is None or not isinstance(exc, failures.StepFailed):
        return None
    try:
        return Reason(exc.reason)
    except ValueError:
        return Reason.ERROR


def flow_binds(job: ClaimedJob) -> bool:
    """Whether the flow's deadline, not the attempt's own ``timeout``, bounds ``job``'s
    attempt: an attempt ended at it is ``flow_timeout`` (never retried)."""
    at = job.flow_deadline_at
    if at is None:
        return False
    return job.timeout_ms is None or at - job.started_at <= job.timeout_ms


def flow_deadline_of(job: ClaimedJob, claimed_at: float) -> float | None:
    """When the worker ends an attempt for its flow's deadline (clock monotonic), or
    ``None``: what was left of the execution at storage's claim stamp
    (``job.started_at``), counted from the claim's return -- never before the deadline."""
    at = job.flow_deadline_at
    if at is None:
        return None
    return claimed_at + max(0.0, (at - job.started_at) / 1000.0)


def step_call(
    storage: Storage,
    job: ClaimedJob,
    signature: Signature | None,
    loads: Callable[[bytes], Any],
    specs: dict[str, FlowSpec],
    gate: StepGate | None = None,
    inputs: StepInputs | None = None,
) -> dict[str, Any]:
    """The keyword arguments of a step attempt (blocking storage reads: call it in a
    thread). ``specs`` caches parsed definitions by hash (immutable); ``gate`` is what the
    worker allows script and http steps (default: nothing); ``inputs``: the step's, when
    read with its claim. The flow modules load here, at a worker's first step attempt."""
    from queue_core.app.steps.calls import step_kwargs, step_values
    from queue_core.app.steps.gate import StepGate
    from queue_core.app.steps.run import StepAttempt
    from queue_core.storage.abilities import SupportsFlows

    assert isinstance(storage, SupportsFlows)
    assert job.execution_id is not None and job.step_id is not None
    if inputs is None:  # else read with the claim (Runner.prefetch)
        inputs = storage.get_step_inputs(job.execution_id, job.step_id)
    if job.task_name not in FILE_STEP_TASKS:
        return step_kwargs(signature, inputs, loads)
    record = storage.get_execution(job.execution_id)
    assert record is not None
    spec = specs.get(record.spec_hash)
    if spec is None:
        spec = specs[record.spec_hash] = record.spec()
    step = spec.step(job.step_id)
    value, results = step_values(inputs, loads)
    grace = step.kill_grace_ms / 1000.0 if step.kill_grace_ms is not None else None
    return {
        "call": StepAttempt(
            step=step,
            execution_id=job.execution_id,
            attempt=job.attempt,
            input=value,
            results=results,
            gate=gate if gate is not None else StepGate(),
            kill_grace=grace if grace is not None else _DEFAULT_KILL_GRACE,
            flow=spec.name,
        )
    }
