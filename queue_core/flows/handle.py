"""``ExecutionHandle``: a reference to one flow or workflow execution (SPEC §7, §12) --
its state, steps, result, cancel, and resuming it (``retry()``, ``replay(step_id)``).

Also importable from :mod:`queue_core.flows.api`.
"""

from __future__ import annotations

from typing import Any

from queue_core.app.durable_history import history
from queue_core.app.durable_run import execution_value
from queue_core.app.handle import wait_finished
from queue_core.flows.host import FlowHost
from queue_core.records.errors import ConfigError, NotFound
from queue_core.records.flows import ExecutionInfo, ExecutionState, StepRun
from queue_core.records.workflows import HistoryEntry
from queue_core.storage.abilities import SupportsFlows, SupportsWorkflows
from queue_core.storage.flows import ExecutionRecord

__all__ = ["ExecutionHandle", "flows_of", "workflows_of"]


def flows_of(queue: FlowHost) -> SupportsFlows:
    """The queue's storage as :class:`SupportsFlows`.

    Raises:
        ConfigError: ``unsupported``, naming the ability, when the storage lacks it.
    """
    storage = queue.storage()
    if not isinstance(storage, SupportsFlows):
        raise ConfigError(
            f"flows need a storage with the SupportsFlows ability; "
            f"{type(storage).__name__} does not have it (memory:// does)",
            code="unsupported",
            field="storage",
            value=type(storage).__name__,
        )
    return storage


def workflows_of(queue: FlowHost, what: str = "workflows") -> SupportsWorkflows:
    """The queue's storage as :class:`SupportsWorkflows` (``what`` names the feature).

    Raises:
        ConfigError: ``unsupported``, naming the ability, when the storage lacks it.
    """
    storage = queue.storage()
    if not isinstance(storage, SupportsWorkflows):
        raise ConfigError(
            f"{what} need a storage with the SupportsWorkflows ability; "
            f"{type(storage).__name__} does not have it yet (memory:// does)",
            code="unsupported",
            field="storage",
            value=type(storage).__name__,
        )
    return storage


class ExecutionHandle:
    """A reference to one flow or workflow execution.

    Attributes:
        id: the execution id.
    """

    __slots__ = ("id", "_queue")

    def __init__(self, queue: FlowHost, execution_id: str) -> None:
        self.id = execution_id
        self._queue = queue

    def _record(self) -> ExecutionRecord:
        rec = flows_of(self._queue).get_execution(self.id)
        if rec is None:
            raise NotFound(f"no flow execution with id {self.id!r}")
        return rec

    def status(self) -> ExecutionState:
        """The execution's current state."""
        return self._record().state

    @property
    def kind(self) -> str:
        """``"flow"`` or ``"workflow"`` (SPEC §12)."""
        return self._record().kind

    def info(self) -> ExecutionInfo:
        """The execution as ``queue.executions()`` lists it."""
        return self._record().info()

    def steps(self) -> list[StepRun]:
        """Every step in index order, with its job's attempt records (a workflow: its
        function step ``main``, then its children)."""
        storage = self._queue.storage()
        return [
            StepRun(
                step_id=s.step_id,
                state=s.state,
                reason=s.reason,
                job_id=s.job_id,
                attempts=storage.list_attempts(s.job_id) if s.job_id else [],
            )
            for s in flows_of(self._queue).list_steps(self.id)
        ]

    def cancel(self) -> ExecutionState:
        """Cancel: ``cancelling`` while running steps stop, then ``cancelled``. A
        workflow's cancel reaches its children and sub-executions."""
        return flows_of(self._queue).cancel_execution(self.id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the execution to finish and return its result: a flow's
        ``{step id: result}`` of every step; a workflow's function's return value.

        The wait is measured on the queue's clock, like ``JobHandle.result``.

        Raises:
            ExecutionFailed: it ended ``failed`` (``step_failed``, naming the step),
                ``timed_out`` (``flow_timeout``), ``cancelled`` or ``skipped``.
            TimeoutError: it has not finished within ``timeout`` seconds.
        """
        rec = wait_finished(self._queue.clock, self._record, timeout, f"execution {self.id}")
        return execution_value(self._queue.storage(), self._queue.serializer.loads_result, rec)

    def history(self) -> list[HistoryEntry]:
        """What a workflow's function did so far, in order: its ``ctx.step`` results,
        sleeps, event waits and children (:class:`~queue_core.records.workflows.HistoryEntry`);
        ``[]`` for a flow, or on a storage without ``SupportsWorkflows``."""
        storage = self._queue.storage()
        if not isinstance(storage, SupportsWorkflows):
            return []
        state = storage.workflow_state(self.id)
        if state is None:
            raise NotFound(f"no flow execution with id {self.id!r}")
        return history(state, self._queue.clock.now_ms())

    def retry(self) -> ExecutionState:
        """Resume a ``failed``, ``timed_out`` or ``cancelled`` execution from where it
        failed (SPEC §12): succeeded steps keep their results and do not run again;
        failed and ``not_run`` steps run again with a fresh retry budget; the deadline
        starts anew. A workflow's function runs again, its finished ``ctx.step`` results
        kept. Returns the state afterwards (``running``, or ``queued`` for a concurrency
        place).

        Raises:
            ConfigError: ``invalid_option`` for an execution in another state;
                ``unsupported`` on a storage without ``SupportsWorkflows``.
        """
        return workflows_of(self._queue, "retry()").resume_execution(self.id)

    def replay(self, step_id: str) -> ExecutionState:
        """Re-run one step of a finished execution and what depends on it, keeping the
        rest: in a flow, ``step_id`` and every step depending on it; in a workflow, the
        ``ctx.step`` (or child) ``step_id`` and every step the function took after it
        (``"main"``: the whole function). Steps that failed run again too, as with
        :meth:`retry`.

        Raises:
            ConfigError: ``invalid_option`` for an unfinished execution or a step it does
                not have (naming its steps); ``unsupported`` as for :meth:`retry`.
        """
        return workflows_of(self._queue, "replay()").resume_execution(self.id, step_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExecutionHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<ExecutionHandle {self.id}>"
