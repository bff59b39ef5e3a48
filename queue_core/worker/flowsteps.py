"""Flow steps on the worker (SPEC §7): building a step's call at claim time, running
``type: script`` steps, and the flow deadline.

A step job's payload carries no arguments. When the worker starts an attempt of one,
it reads the execution input and the results of the step's dependencies from storage
(``get_step_inputs``, off the event loop) and passes them by parameter name
(:func:`queue_core.flows.calls.step_kwargs`). A ``type: script`` step's job names
:data:`~queue_core.flows.jobs.SCRIPT_TASK`: the worker runs it as an async task whose
body is :func:`queue_core.flows.script.run_script` (cancelling it stops the script's
process group, SIGTERM → ``kill_grace`` → SIGKILL).

The execution's deadline (``ClaimedJob.flow_deadline_at``) bounds every attempt: the
watchdog ends the attempt there (:func:`flow_deadline_of`), recorded ``timed_out`` with
reason ``flow_timeout``, a decision that is never retried.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from queue_core.flows.names import SCRIPT_TASK
from queue_core.task import Task, build_spec

if TYPE_CHECKING:
    from collections.abc import Callable
    from inspect import Signature

    from queue_core.flows.model import FlowSpec
    from queue_core.flows.script import ScriptCall
    from queue_core.model import ClaimedJob
    from queue_core.queue import Queue
    from queue_core.storage import Storage

__all__ = [
    "SCRIPT_TASK",
    "flow_binds",
    "flow_deadline_of",
    "is_script_failure",
    "script_task",
    "step_call",
]

_DEFAULT_KILL_GRACE = 10.0


async def _script_step(call: ScriptCall) -> Any:
    """The body of every ``type: script`` step: run the file, return its result."""
    from queue_core.flows.script import run_script

    return await run_script(call)


def script_task(queue: Queue) -> Task[Any, Any]:
    """The task the worker runs ``type: script`` steps with (never registered on the queue)."""
    return Task(queue, _script_step, name=SCRIPT_TASK, spec=build_spec(is_async=True))


def is_script_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a script step's non-zero exit (recorded ``exit_code``). Looked up
    in ``sys.modules``: if no script step ran here, :mod:`queue_core.flows.script` was
    never imported and no ``ScriptFailed`` exists (a worker with no flow never loads it)."""
    script = sys.modules.get("queue_core.flows.script")
    return script is not None and isinstance(exc, script.ScriptFailed)


def flow_binds(job: ClaimedJob) -> bool:
    """Whether the flow's deadline, not the attempt's own ``timeout``, bounds ``job``'s
    attempt: an attempt ended at it is ``flow_timeout`` (never retried)."""
    at = job.flow_deadline_at
    if at is None:
        return False
    return job.timeout_ms is None or at - job.started_at <= job.timeout_ms


def flow_deadline_of(job: ClaimedJob, claimed_at: float, lead: float) -> float | None:
    """When the worker ends an attempt for its flow's deadline (clock monotonic), acted
    on ``lead`` seconds early like the attempt's own deadline, or ``None``."""
    at = job.flow_deadline_at
    if at is None:
        return None
    left = max(0.0, (at - job.started_at) / 1000.0)
    return claimed_at + max(0.0, left - lead)


def step_call(
    storage: Storage,
    job: ClaimedJob,
    signature: Signature | None,
    loads: Callable[[bytes], Any],
    specs: dict[str, FlowSpec],
) -> dict[str, Any]:
    """The keyword arguments of a step attempt (blocking storage reads: call it in a
    thread). ``specs`` caches parsed definitions by hash (immutable). The flow modules
    load here, at a worker's first step attempt."""
    from queue_core.flows.calls import step_kwargs, step_values
    from queue_core.flows.script import ScriptCall
    from queue_core.flows.storage import SupportsFlows

    assert isinstance(storage, SupportsFlows)
    assert job.execution_id is not None and job.step_id is not None
    inputs = storage.get_step_inputs(job.execution_id, job.step_id)
    if job.task_name != SCRIPT_TASK:
        return step_kwargs(signature, inputs, loads)
    record = storage.get_execution(job.execution_id)
    assert record is not None
    spec = specs.get(record.spec_hash)
    if spec is None:
        spec = specs[record.spec_hash] = record.spec()
    step = spec.step(job.step_id)
    assert step.file is not None
    value, results = step_values(inputs, loads)
    grace = step.kill_grace_ms / 1000.0 if step.kill_grace_ms is not None else None
    return {
        "call": ScriptCall(
            file=step.file,
            execution_id=job.execution_id,
            step_id=job.step_id,
            attempt=job.attempt,
            input=value,
            results=results,
            kill_grace=grace if grace is not None else _DEFAULT_KILL_GRACE,
        )
    }
