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

from collections.abc import Mapping
from typing import Any

from queue_core.records.errors import ConfigError

__all__ = ["FlowSchedule", "schedule_options"]

FlowSchedule = str | Mapping[str, Any]
"""``"5m"`` (every, a duration), ``"*/5 * * * *"`` (a cron expression, UTC), or a mapping
with ``every`` or ``cron`` and optionally ``tz``, ``catch_up`` and ``input``."""

_KEYS = ("every", "cron", "tz", "catch_up", "input")


def schedule_options(schedule: FlowSchedule) -> dict[str, Any]:
    """The periodic options (``every``/``cron``, ``tz``, ``catch_up``) and ``input`` of a
    flow's ``schedule``.

    Raises:
        ConfigError: ``invalid_option``: not a duration, cron text or mapping, or an
            unknown key.
    """
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
