"""The flow methods of :class:`~queue_core.Queue` (``queue.flow`` & co., SPEC §7).

They live in this mixin, which imports no other flow module until one of them is
called, so that importing :mod:`queue_core` (and starting a worker with no flow) never
builds the flow records: a worker's start-up time is spent on imports.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from queue_core.flows.api import ExecutionHandle, Flow
    from queue_core.flows.model import ExecutionInfo, ExecutionState
    from queue_core.flows.scheduled import FlowSchedule
    from queue_core.policy import RetryPolicy
    from queue_core.queue import Queue
    from queue_core.task import Concurrency

__all__ = ["FlowMethods"]


class FlowMethods:
    """``flow``, ``load_flow``, ``execution`` and ``executions`` of :class:`Queue`."""

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
            cast("Queue", self),
            name,
            concurrency=concurrency,
            max_parallel=max_parallel,
            timeout=timeout,
            retry=retry,
            queue=queue,
            schedule=schedule,
        )

    def load_flow(self, path: str | os.PathLike[str]) -> Flow:
        """A flow from a YAML flow file (SPEC §7 "Flow files")."""
        from queue_core.flows.api import load_flow

        return load_flow(cast("Queue", self), path)

    def execution(self, execution_id: str) -> ExecutionHandle:
        """A handle on an existing flow execution (``NotFound`` for an unknown id)."""
        from queue_core.flows.api import ExecutionHandle

        handle = ExecutionHandle(cast("Queue", self), execution_id)
        handle.status()
        return handle

    def executions(
        self,
        flow: str | Flow | None = None,
        state: ExecutionState | str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionInfo]:
        """A page of flow executions, newest first (``flow``: a name or a ``Flow``)."""
        from queue_core.flows.api import executions

        return executions(cast("Queue", self), flow, state, limit, offset)
