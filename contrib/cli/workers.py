"""``queue-core workers [--json]``: the live workers registered in storage (SPEC §9).

Built on :class:`queue_core.storage.abilities.SupportsWorkerRegistry`: each worker registers itself
when it starts, refreshes its record every third of its ttl and removes it when it
stops cleanly; a worker that died drops out once its ttl has passed. On a storage
without the ability the command exits 1 naming it.

The command registers itself on the ``queue-core`` group when this module is imported
(``contrib.cli.commands`` imports it last).
"""

from __future__ import annotations

import click

from contrib.cli.common import CliError, _queue, _storage_options
from contrib.cli.output import echo_json, table
from queue_core.records.workers import WorkerInfo
from queue_core.storage.abilities import SupportsWorkerRegistry

__all__ = ["WORKER_COLUMNS", "worker_row", "workers"]

WORKER_COLUMNS = ("id", "host", "pid", "queues", "slots", "busy", "stuck", "started", "last seen")


def worker_row(info: WorkerInfo) -> list[object]:
    """One table row of ``info``, in :data:`WORKER_COLUMNS` order."""
    return [
        info.id,
        info.host,
        info.pid,
        ",".join(info.queues),
        info.slots,
        info.busy,
        info.stuck,
        info.started,
        info.seen,
    ]


@click.command()
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON array of worker objects (WorkerInfo fields; times in epoch ms).",
)
@_storage_options
def workers(as_json: bool, app: str | None, url: str | None) -> None:
    """Live workers: id, host, pid, queues, slots, busy and stuck slots, started, last seen.

    A worker counts as live until its ttl (Worker(presence_ttl=...), env
    QUEUE_CORE_WORKER_TTL, default 15 s) has passed since its last refresh.
    """
    queue, where = _queue(app, url)
    storage = queue.storage()
    if not isinstance(storage, SupportsWorkerRegistry):
        raise CliError(
            f"storage {where} ({type(storage).__name__}) cannot list workers: it lacks the "
            "SupportsWorkerRegistry ability"
        )
    found = storage.list_workers()
    if as_json:
        echo_json([w.to_dict() for w in found])
        return
    if not found:
        click.echo(f"No live workers ({where}).")
        return
    click.echo(table(WORKER_COLUMNS, [worker_row(w) for w in found]))


COMMANDS: tuple[click.Command, ...] = (workers,)
"""The commands of this module (:func:`contrib.cli.commands.load_commands` adds them)."""
