"""``queue-core dlq list|show|retry|purge``: dead-letter entries (SPEC §9)."""

from __future__ import annotations

import click

import queue_core
from contrib.cli import common
from contrib.cli.app import CliUsageError
from contrib.cli.bulk import confirm, dead_entries, progress, purge_in_chunks
from contrib.cli.common import (
    _ATTEMPT_HEADERS,
    CliError,
    _attempt_rows,
    _Group,
    _queue,
    _storage_options,
    next_page_command,
)
from contrib.cli.lookup import dead_id_of
from contrib.cli.output import echo_json, kv_block, printable, table
from queue_core import NotFound, QueueCoreError
from queue_core.records.jobs import ms_from_dt

__all__ = ["dlq"]


@click.group(cls=_Group)
def dlq() -> None:
    """Inspect, replay and purge dead-letter entries."""


@dlq.command("list")
@click.option("--task", "task_name", default=None, help="Only entries of this task.")
@click.option("--limit", type=click.IntRange(min=1, max=1000), default=20, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of DeadJob objects.")
@_storage_options
def dlq_list(
    task_name: str | None, limit: int, offset: int, as_json: bool, app: str | None, url: str | None
) -> None:
    """List dead-letter entries, newest first, one page at a time."""
    queue, where = _queue(app, url)
    # One extra entry tells whether a next page exists without a count query.
    page = queue.dead_letters(limit=limit + 1, offset=offset, task_name=task_name)
    more = len(page) > limit
    page = page[:limit]
    if as_json:
        echo_json([entry.to_dict() for entry in page])
        return
    if not page:
        scope = f" of task {task_name!r}" if task_name else ""
        click.echo(f"No dead-letter entries{scope} at offset {offset} ({where}).")
        return
    click.echo(
        table(
            ("id", "task_name", "queue", "reason", "error_class", "error", "attempts", "dead_at"),
            [
                [
                    e.id,
                    e.task_name,
                    e.queue,
                    e.reason,
                    e.error_class,
                    e.error,
                    len(e.attempts),
                    e.dead_at,
                ]
                for e in page
            ],
        )
    )
    shown = f"Entries {offset + 1}-{offset + len(page)}"
    if more:
        nxt = ["queue-core", "dlq", "list", f"--offset {offset + limit}", f"--limit {limit}"]
        if task_name:
            nxt.append(f"--task {task_name}")
        click.echo(f"\n{shown}; more exist. Next page: {next_page_command(nxt, app, url)}")
    else:
        click.echo(f"\n{shown}; no more entries.")


@dlq.command("show")
@click.argument("dead_id")
@click.option("--json", "as_json", is_flag=True, help="Print the DeadJob as a JSON object.")
@_storage_options
def dlq_show(dead_id: str, as_json: bool, app: str | None, url: str | None) -> None:
    """Show one dead-letter entry (DEAD_ID: its id or any unique prefix) with every
    attempt record."""
    queue, where = _queue(app, url)
    try:
        entry = queue.dead_letter(dead_id_of(queue, dead_id))
    except NotFound as exc:
        raise CliError(f"{exc} ({where})") from exc
    if entry is None:
        raise CliError(f"no dead-letter entry with id {dead_id!r} ({where})")
    if as_json:
        echo_json(entry.to_dict())
        return
    click.echo(
        kv_block(
            [
                ("id", entry.id),
                ("job_id", entry.job_id),
                ("task_name", entry.task_name),
                ("queue", entry.queue),
                ("reason", entry.reason),
                ("error_class", entry.error_class),
                ("error", entry.error),
                ("args", list(entry.args)),
                ("kwargs", entry.kwargs),
                ("dead_at", entry.dead_at),
                ("replay_of", entry.replay_of),
            ]
        )
    )
    click.echo(f"\nAttempts ({len(entry.attempts)}):")
    click.echo(table(_ATTEMPT_HEADERS, _attempt_rows(entry.attempts)))
    last_tb = next((a.traceback for a in reversed(entry.attempts) if a.traceback), None)
    if last_tb:
        click.echo("\nTraceback of the last failed attempt:\n" + printable(last_tb.rstrip()))
    click.echo(f"\nReplay it with: queue-core dlq retry {entry.id}")


def _entries(n: int) -> str:
    return f"{n} dead-letter entr{'y' if n == 1 else 'ies'}"


@dlq.command("retry")
@click.argument("dead_id", required=False)
@click.option(
    "--all",
    "retry_all",
    is_flag=True,
    help="Replay every dead-letter entry (of --task) instead of one DEAD_ID.",
)
@click.option("--task", "task_name", default=None, help="With --all: only entries of this task.")
@click.option("--queue", "queue_name", default=None, help="Enqueue the replays on this queue.")
@click.option("--yes", "-y", is_flag=True, help="With --all: do not ask for confirmation.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the new jobs as JSON objects with 'id' and 'replay_of'.",
)
@_storage_options
def dlq_retry(
    dead_id: str | None,
    retry_all: bool,
    task_name: str | None,
    queue_name: str | None,
    yes: bool,
    as_json: bool,
    app: str | None,
    url: str | None,
) -> None:
    """Replay the dead-letter entry DEAD_ID (its id or any unique prefix; or, with --all,
    every entry) as a new job with a fresh retry budget: prints `replayed DEAD as job
    JOB` (--json: the new job's id and replay_of)."""
    if retry_all == (dead_id is not None):
        raise CliUsageError(
            "dlq retry takes one DEAD_ID or --all (optionally with --task NAME), not "
            + ("both" if retry_all else "neither")
        )
    if task_name is not None and not retry_all:
        raise CliUsageError(f"--task {task_name!r} filters --all; it cannot be used with DEAD_ID")
    queue, where = _queue(app, url)
    if dead_id is not None:
        try:
            dead_id = dead_id_of(queue, dead_id)
            new_id = queue.retry_dead(dead_id, queue=queue_name)
        except NotFound as exc:
            raise CliError(f"{exc} ({where})") from exc
        if as_json:
            echo_json({"id": new_id, "replay_of": dead_id})
        else:
            click.echo(f"replayed {dead_id} as job {new_id}")
        return
    _retry_all(queue, where, task_name, queue_name, yes=yes, as_json=as_json)


def _retry_all(
    queue: queue_core.Queue,
    where: str,
    task_name: str | None,
    queue_name: str | None,
    *,
    yes: bool,
    as_json: bool,
) -> None:
    """``dlq retry --all``: replay the entries present when it starts, oldest first.

    The entries are listed first (so the prompt can say how many, and replays that die
    again while this runs are not replayed a second time), then retried one by one. An
    entry gone meanwhile (retried or purged by someone else) is counted, not an error.
    """
    scope = f" of task {task_name!r}" if task_name else ""
    ids = [e.id for e in reversed(dead_entries(queue, task_name))]
    if not ids:
        if as_json:
            echo_json({"retried": [], "missing": []})
        else:
            click.echo(f"No dead-letter entries{scope} to retry ({where}).")
        return
    confirm(f"Retry {_entries(len(ids))}{scope} from {where}?", yes=yes)
    retried: list[dict[str, str]] = []
    missing: list[str] = []
    try:
        with progress(common.show_progress(as_json), len(ids), "Retrying") as update:
            for dead in ids:
                try:
                    retried.append(
                        {"id": queue.retry_dead(dead, queue=queue_name), "replay_of": dead}
                    )
                except NotFound:
                    missing.append(dead)
                update(1)
    except QueueCoreError:
        click.echo(
            f"Stopped by an error after retrying {len(retried)} of {_entries(len(ids))} "
            f"({len(missing)} already gone).",
            err=True,
        )
        raise
    if as_json:
        echo_json({"retried": retried, "missing": missing})
        return
    gone = f" {len(missing)} were already gone (retried or purged meanwhile)." if missing else ""
    click.echo(f"Retried {_entries(len(retried))}{scope} as new jobs.{gone}")


def _parse_older_than(value: str | None) -> float | None:
    if value is None:
        return None
    from queue_core.records.durations import parse_duration

    return parse_duration(value, field="--older-than")


@dlq.command("purge")
@click.option("--task", "task_name", default=None, help="Only entries of this task.")
@click.option(
    "--older-than",
    default=None,
    metavar="DURATION",
    help="Only entries dead for at least this long (seconds, or e.g. 90m, 168h).",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@_storage_options
def dlq_purge(
    task_name: str | None, older_than: str | None, yes: bool, app: str | None, url: str | None
) -> None:
    """Delete dead-letter entries (all, or of one task, or older than DURATION)."""
    seconds = _parse_older_than(older_than)  # validate before asking anything
    queue, where = _queue(app, url)
    scope = ""
    if task_name:
        scope += f" of task {task_name!r}"
    if older_than:
        scope += f" dead for at least {older_than}"
    bar = common.show_progress(False)
    if yes and not bar:  # nobody to ask or show progress to: one purge_dead call
        removed = queue.purge_dead(task_name=task_name, older_than=seconds)
        click.echo(f"Purged {_entries(removed)}.")
        return
    # Count first: the prompt says how many, and the bar needs a length.
    before = None if seconds is None else queue.clock.now_ms() - round(seconds * 1000)
    matching = [
        e
        for e in dead_entries(queue, task_name)
        if before is None or ms_from_dt(e.dead_at) <= before
    ]
    if not matching:
        click.echo(f"No dead-letter entries{scope} to purge ({where}).")
        return
    confirm(f"Delete {_entries(len(matching))}{scope} from {where}?", yes=yes)
    if bar:
        with progress(bar, len(matching), "Purging") as update:
            removed = purge_in_chunks(queue, task_name, before, matching, update)
    else:
        removed = queue.storage().purge_dead(task_name, before)
    click.echo(f"Purged {_entries(removed)}.")


COMMANDS: tuple[click.Command, ...] = (dlq,)
"""The commands of this module (:func:`contrib.cli.commands.load_commands` adds them)."""
