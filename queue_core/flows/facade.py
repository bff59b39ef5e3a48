"""The flow and workflow methods of :class:`~queue_core.Queue` (``queue.flow`` & co.,
SPEC §7; ``queue.workflow`` and ``queue.send_event``, SPEC §12).

They live in this mixin, which imports no other flow module until one of them is
called, so that importing :mod:`queue_core` (and starting a worker with no flow) never
builds the flow records: a worker's start-up time is spent on imports.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar, cast, overload

if TYPE_CHECKING:
    from queue_core.app.durable import DurableContext
    from queue_core.app.task import Concurrency
    from queue_core.flows.api import ExecutionHandle, Flow
    from queue_core.flows.host import FlowHost
    from queue_core.flows.scheduled import FlowSchedule
    from queue_core.flows.workflows import Workflow
    from queue_core.records.flows import ExecutionInfo, ExecutionState
    from queue_core.rules import RetryPolicy

__all__ = ["FlowMethods"]

P = ParamSpec("P")
R = TypeVar("R")


class FlowMethods:
    """``flow``, ``load_flow``, ``workflow``, ``send_event``, ``execution`` and
    ``executions`` of :class:`Queue`."""

    def flow(
        self,
        name: str,
        *,
        concurrency: Concurrency | int | None = None,
        max_parallel: int = 0,
        timeout: float | str | timedelta | None = None,
        retry: RetryPolicy | None = None,
        queue: str | None = None,
        schedule: FlowSchedule | None = None,
    ) -> Flow:
        """Declare a flow, a DAG of steps (SPEC §7, :class:`~queue_core.flows.api.Flow`);
        ``schedule`` starts one execution per tick (:mod:`queue_core.flows.scheduled`)."""
        from queue_core.flows.api import Flow

        return Flow(
            cast("FlowHost", self),
            name,
            concurrency=concurrency,
            max_parallel=max_parallel,
            timeout=timeout,
            retry=retry,
            queue=queue,
            schedule=schedule,
        )

    @overload
    def workflow(
        self, func: Callable[Concatenate[DurableContext, P], Coroutine[Any, Any, R]], /
    ) -> Workflow[P, R]: ...

    @overload
    def workflow(self, func: Callable[Concatenate[DurableContext, P], R], /) -> Workflow[P, R]: ...

    @overload
    def workflow(
        self,
        func: None = None,
        /,
        *,
        timeout: float | str | timedelta | None = None,
        retry: RetryPolicy | None = None,
        concurrency: Concurrency | int | None = None,
        name: str | None = None,
        queue: str | None = None,
    ) -> _WorkflowDecorator: ...

    def workflow(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        timeout: float | str | timedelta | None = None,
        retry: RetryPolicy | None = None,
        concurrency: Concurrency | int | None = None,
        name: str | None = None,
        queue: str | None = None,
    ) -> Any:
        """Declare a durable workflow (SPEC §12): ``@queue.workflow`` or
        ``@queue.workflow(timeout=, retry=, concurrency=, name=, queue=)`` on an ``async
        def`` or plain ``def`` function whose first parameter receives the
        :class:`~queue_core.DurableContext`.

        Args:
            timeout: the whole execution's deadline, waiting time included (counted from
                the moment it runs); ``None``: none.
            retry: the function's :class:`~queue_core.RetryPolicy` (merged over the
                queue's defaults); a retry replays the function, finished steps skipped.
            concurrency: ``Concurrency(limit, behavior, key)``: active executions
                (``running``, ``waiting``, ``cancelling``); ``key`` receives the call's
                arguments.
            name: the workflow's name (default ``module.qualname``), also the name of the
                task its function runs as.
            queue: the queue its function step runs on (default: the queue's default).

        Returns:
            A :class:`~queue_core.flows.workflows.Workflow`: ``.start(*args, **kwargs)``.

        Raises:
            ConfigError: a bad option, a function without a first parameter, a name
                already registered.
        """
        from queue_core.flows.workflows import Workflow

        def decorate(fn: Callable[..., Any]) -> Workflow[Any, Any]:
            return Workflow(
                cast("FlowHost", self),
                fn,
                name=name,
                timeout=timeout,
                retry=retry,
                concurrency=concurrency,
                queue=queue,
            )

        return decorate(func) if func is not None else decorate

    def send_event(self, name: str, key: str | None = None, data: Any = None) -> int:
        """Send event ``name`` (SPEC §12): stored, and delivered atomically to every
        workflow waiting for it (``ctx.wait_for_event(name)``, or with this ``key``),
        also to a wait whose suspension is stored just after; each wait gets one event,
        once. Returns how many waits it ended.

        Raises:
            ConfigError: a bad name or key; ``unsupported`` on a storage without
                ``SupportsWorkflows``.
            SerializationError: ``data`` cannot be serialized.
        """
        from queue_core.flows.workflows import send_event

        return send_event(cast("FlowHost", self), name, key, data)

    def load_flow(self, path: str | os.PathLike[str]) -> Flow:
        """A flow from a YAML flow file (SPEC §7 "Flow files")."""
        from queue_core.flows.api import load_flow

        return load_flow(cast("FlowHost", self), path)

    def execution(self, execution_id: str) -> ExecutionHandle:
        """A handle on an existing flow execution (``NotFound`` for an unknown id)."""
        from queue_core.flows.api import ExecutionHandle

        handle = ExecutionHandle(cast("FlowHost", self), execution_id)
        handle.status()
        return handle

    def executions(
        self,
        flow: str | Flow | Workflow[..., Any] | None = None,
        state: ExecutionState | str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionInfo]:
        """A page of flow and workflow executions, newest first (``flow``: a name, a
        ``Flow`` or a ``Workflow``)."""
        from queue_core.flows.listing import executions

        return executions(cast("FlowHost", self), flow, state, limit, offset)


class _WorkflowDecorator(Protocol):
    """What ``@queue.workflow(...)`` returns: applied to a function, its Workflow."""

    @overload
    def __call__(
        self, fn: Callable[Concatenate[DurableContext, P], Coroutine[Any, Any, R]], /
    ) -> Workflow[P, R]: ...

    @overload
    def __call__(self, fn: Callable[Concatenate[DurableContext, P], R], /) -> Workflow[P, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Any: ...
