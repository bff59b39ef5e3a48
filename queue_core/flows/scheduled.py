"""Flows started on a schedule: ``queue.flow(name, schedule=...)`` (issue: periodic
schedules, ``schedule=`` on a flow).

A schedule is the periodic task ``<flow>.schedule`` (:meth:`Queue.periodic`): every
worker's scheduler enqueues exactly one job per tick, and that job starts one execution
with the schedule's ``input``. The execution id is derived from the tick job's id, so a
tick job that runs again (its worker died after starting the execution) finds the
execution it started instead of starting a second one. Combine with the flow's
``concurrency=Concurrency(1, "skip")`` when a late run has no value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from queue_core.context import JobContext
from queue_core.errors import ConfigError, NotFound

if TYPE_CHECKING:
    from queue_core.flows.api import Flow

__all__ = ["FlowSchedule", "schedule_flow"]

FlowSchedule = str | Mapping[str, Any]
"""``"5m"`` (every, a duration), ``"*/5 * * * *"`` (a cron expression, UTC), or a mapping
with ``every`` or ``cron`` and optionally ``tz``, ``catch_up`` and ``input``."""

_KEYS = ("every", "cron", "tz", "catch_up", "input")


def _options(schedule: FlowSchedule) -> dict[str, Any]:
    if isinstance(schedule, str):
        text = schedule.strip()
        return {"cron": text} if " " in text else {"every": text}
    if not isinstance(schedule, Mapping):
        raise ConfigError(
            f"schedule: invalid value {schedule!r} — expected a duration ('5m'), a cron "
            "expression ('*/5 * * * *') or a mapping with every/cron, tz, catch_up, input",
            code="invalid_option",
            field="schedule",
            value=schedule,
        )
    unknown = sorted(set(schedule) - set(_KEYS))
    if unknown:
        raise ConfigError(
            f"schedule: unknown key(s) {', '.join(map(repr, unknown))}; accepted: "
            f"{', '.join(_KEYS)}",
            code="invalid_option",
            field="schedule",
            value=unknown[0],
        )
    return dict(schedule)


def schedule_flow(flow: Flow, schedule: FlowSchedule, queue: str | None) -> str:
    """Register the periodic task that starts ``flow`` on ``schedule``; its name.

    Raises:
        ConfigError: a bad schedule (``invalid_option``, ``invalid_duration``,
            ``invalid_cron``, ``conflicting_options``), nothing registered.
    """
    options = _options(schedule)
    input_value = options.pop("input", None)
    owner = flow._owner  # noqa: SLF001 - the flow's queue
    owner.serializer.dumps_result(input_value)  # refused now, not at every tick
    name = f"{flow.name}.schedule"

    def start_scheduled(ctx: JobContext = JobContext.INJECTED) -> str:
        execution_id = hashlib.sha256(ctx.job_id.encode()).hexdigest()[:32]
        try:
            owner.execution(execution_id)  # this tick's job ran before: it started it
        except NotFound:
            flow._start(input_value, execution_id)  # noqa: SLF001
        return execution_id

    start_scheduled.__qualname__ = start_scheduled.__name__ = name.replace(".", "_")
    if queue is None:
        owner.periodic(**options, name=name)(start_scheduled)
    else:
        owner.periodic(**options, name=name, queue=queue)(start_scheduled)
    return name
