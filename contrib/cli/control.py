"""``queue-core pause|resume [--queue Q] [--task T] [--flow F]`` (SPEC §13).

A pause is stored: every worker stops claiming the jobs of a paused queue or task (and
starting the steps of a paused flow) within a second, running attempts finish, producers
enqueue as usual and schedules keep ticking. ``queue-core stats`` lists the pauses. On a
storage without the ability the command exits 2 naming it.
"""

from __future__ import annotations

import click

from contrib.cli.common import _queue, _storage_options
from contrib.cli.output import echo_json, table
from queue_core import Pause

__all__ = ["pause", "pause_rows", "resume"]


def pause_rows(pauses: list[Pause]) -> list[list[object]]:
    """Table rows (kind, name, since) of ``pauses``."""
    return [[p.kind.value, p.name, p.since.isoformat(timespec="seconds")] for p in pauses]


def _show(pauses: list[Pause], as_json: bool, where: str) -> None:
    if as_json:
        echo_json([p.to_dict() for p in pauses])
    elif pauses:
        click.echo(table(("paused", "name", "since"), pause_rows(pauses)))
    else:
        click.echo(f"Nothing is paused ({where}).")


_TARGETS = (
    click.option("--queue", "queue_name", default=None, metavar="Q", help="A queue."),
    click.option("--task", "task_name", default=None, metavar="T", help="A task (its name)."),
    click.option("--flow", "flow_name", default=None, metavar="F", help="A flow (its name)."),
    click.option("--json", "as_json", is_flag=True, help="Print the pauses as a JSON array."),
)


def _targets(f: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(_TARGETS):
        f = option(f)
    return f


@click.command()
@_targets
@_storage_options
def pause(
    queue_name: str | None,
    task_name: str | None,
    flow_name: str | None,
    as_json: bool,
    app: str | None,
    url: str | None,
) -> None:
    """Pause a queue, a task and/or a flow on every worker (within 1 s); print every
    pause. Running attempts finish; enqueues and schedules go on."""
    queue, where = _queue(app, url, create=True)
    _show(queue.pause(queue=queue_name, task=task_name, flow=flow_name), as_json, where)


@click.command()
@_targets
@_storage_options
def resume(
    queue_name: str | None,
    task_name: str | None,
    flow_name: str | None,
    as_json: bool,
    app: str | None,
    url: str | None,
) -> None:
    """Resume a paused queue, task and/or flow; print the pauses left."""
    queue, where = _queue(app, url, create=True)
    _show(queue.resume(queue=queue_name, task=task_name, flow=flow_name), as_json, where)


COMMANDS: tuple[click.Command, ...] = (pause, resume)
"""The commands of this module (:func:`contrib.cli.commands.load_commands` adds them)."""
