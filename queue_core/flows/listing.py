"""``queue.executions()``: a page of flow and workflow executions, newest first (SPEC §7,
§12: ``flow=`` takes a name, a ``Flow`` or a ``Workflow``)."""

from __future__ import annotations

from typing import Any

from queue_core.flows.api import Flow, _invalid
from queue_core.flows.handle import flows_of
from queue_core.flows.host import FlowHost
from queue_core.flows.workflows import Workflow
from queue_core.records.flows import ExecutionInfo, ExecutionState
from queue_core.rules.paging import check_page

__all__ = ["executions"]


def executions(
    queue: FlowHost,
    flow: str | Flow | Workflow[..., Any] | None = None,
    state: ExecutionState | str | None = None,
    limit: int = 20,
    offset: int = 0,
) -> list[ExecutionInfo]:
    """``queue.executions(...)``: a page of executions, newest first.

    Raises:
        ConfigError: ``invalid_option`` for a ``flow`` that is not a name, a ``Flow`` or
            a ``Workflow``, a bad ``state``, ``limit`` or ``offset``.
    """
    if isinstance(flow, (Flow, Workflow)):
        name: str | None = flow.name
    elif flow is None or isinstance(flow, str):
        name = flow
    else:
        raise _invalid("flow", flow, "a flow or workflow name (str), a Flow or a Workflow")
    wanted: ExecutionState | None = None
    if state is not None:
        try:
            wanted = ExecutionState(state)
        except ValueError:
            raise _invalid(
                "state", state, "one of " + ", ".join(s.value for s in ExecutionState)
            ) from None
    limit, offset = check_page(limit, offset)
    records = flows_of(queue).list_executions(name, wanted, limit, offset)
    return [r.info() for r in records]
