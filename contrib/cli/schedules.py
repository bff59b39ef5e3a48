"""``queue-core schedules [--json]``: the periodic tasks with their last and next tick
(SPEC §11).

The schedules are declared in code (``@queue.periodic``), so the command reads them from
``--app``; their last ticks come from storage (``SupportsSchedules.schedule_ticks``).
Schedules stored but not declared by the app (or every stored one, without ``--app``)
are listed with what storage knows: their last tick. The command registers itself on the
``queue-core`` group when this module is imported.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import click

from contrib.cli.common import CliError, _queue, _storage_options
from contrib.cli.output import echo_json, table
from queue_core import Queue
from queue_core.storage.abilities import SupportsSchedules

__all__ = ["schedule_rows", "schedules"]


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


def schedule_rows(queue: Queue, now_ms: int) -> list[dict[str, Any]]:
    """One row per schedule, sorted by task: ``task``, ``every`` (seconds) or ``cron``,
    ``tz``, ``last`` and ``next`` (ISO 8601 UTC; ``last`` is ``None`` before the first
    tick, ``next`` for a schedule the app does not declare)."""
    storage = queue.storage()
    if not isinstance(storage, SupportsSchedules):
        raise CliError(
            f"{type(storage).__name__} cannot run periodic tasks (it lacks SupportsSchedules)"
        )
    stored = storage.schedule_ticks()
    declared = queue.periodic_tasks
    rows: list[dict[str, Any]] = []
    for name in sorted(set(declared) | set(stored)):
        periodic = declared.get(name)
        row: dict[str, Any] = {"task": name, "every": None, "cron": None, "tz": None}
        if periodic is not None:
            row.update(periodic.schedule.describe())
        row["last"] = _iso(stored.get(name))
        row["next"] = None if periodic is None else _iso(periodic.schedule.next_tick(now_ms))
        rows.append(row)
    return rows


@click.command()
@_storage_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON array: task, every (seconds) or cron, tz, last, next.",
)
def schedules(app: str | None, url: str | None, as_json: bool) -> None:
    """List periodic tasks (of --app) with their last and next tick."""
    queue, _ = _queue(app, url)
    rows = schedule_rows(queue, queue.clock.now_ms())
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("No schedules (declare them with @queue.periodic; pass --app).")
        return
    click.echo(
        table(
            ["TASK", "SCHEDULE", "TZ", "LAST", "NEXT"],
            [
                [
                    r["task"],
                    r["cron"] if r["cron"] is not None else _every(r["every"]),
                    r["tz"],
                    r["last"],
                    r["next"],
                ]
                for r in rows
            ],
        )
    )


def _every(seconds: float | None) -> str | None:
    return None if seconds is None else f"every {seconds:g}s"


COMMANDS: tuple[click.Command, ...] = (schedules,)
"""The commands of this module (:func:`contrib.cli.commands.load_commands` adds them)."""
