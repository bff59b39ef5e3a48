"""``queue-core enqueue``, ``stats`` and ``jobs show|list|cancel`` (SPEC §9, §13)."""

from __future__ import annotations

from typing import Any

import click

import queue_core
from contrib.cli.app import CliUsageError
from contrib.cli.bulk import job_info
from contrib.cli.common import (
    _ATTEMPT_HEADERS,
    CliError,
    _attempt_rows,
    _Group,
    _json_value,
    _queue,
    _storage_options,
    next_page_command,
)
from contrib.cli.control import pause_rows
from contrib.cli.lookup import job_id_of
from contrib.cli.output import echo_json, kv_block, table
from contrib.dashboard.data import scan_jobs
from contrib.textsafe import printable
from queue_core import JobState, NotFound

__all__ = ["enqueue", "jobs", "stats"]


def _duration_arg(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text  # a duration string such as "30s"; the Queue validates it


@click.command()
@click.argument("task_name")
@click.argument("args_json", required=False, metavar="[ARGS_JSON]")
@click.option(
    "--kwargs",
    "kwargs_json",
    default=None,
    metavar="JSON",
    help='Keyword arguments as a JSON object, e.g. \'{"to": "a@example.com"}\'.',
)
@click.option("--queue", "queue_name", default=None, help="Queue name (default: the task's).")
@click.option(
    "--delay",
    default=None,
    metavar="S",
    help="Run no earlier than this long from now (seconds or e.g. 30s, 5m).",
)
@click.option("--priority", type=int, default=None, help="Higher runs first within a queue.")
@click.option(
    "--allow-unregistered",
    is_flag=True,
    help="Enqueue a task that --app does not declare (or without --app) with the "
    "queue defaults instead of the task's own options.",
)
@_storage_options
def enqueue(
    task_name: str,
    args_json: str | None,
    kwargs_json: str | None,
    queue_name: str | None,
    delay: str | None,
    priority: int | None,
    allow_unregistered: bool,
    app: str | None,
    url: str | None,
) -> None:
    """Enqueue TASK_NAME with positional ARGS_JSON (a JSON array); print the job id.

    The job gets the task's declared options (queue, retries, timeout), so the task
    must be known: pass --app MODULE:ATTR, the Queue the task is declared on. Without
    it, the command refuses rather than store the queue defaults, unless
    --allow-unregistered is given.
    """
    args: list[Any] = []
    if args_json is not None:
        value = _json_value(args_json, "ARGS_JSON")
        if not isinstance(value, list):
            raise CliUsageError(
                f"invalid ARGS_JSON {args_json!r}: expected a JSON array like '[1, \"x\"]'"
            )
        args = value
    kwargs: dict[str, Any] | None = None
    if kwargs_json is not None:
        value = _json_value(kwargs_json, "--kwargs")
        if not isinstance(value, dict):
            raise CliUsageError(f"invalid --kwargs {kwargs_json!r}: expected a JSON object")
        kwargs = value
    overrides: dict[str, Any] = {}
    if queue_name is not None:
        overrides["queue"] = queue_name
    if delay is not None:
        overrides["delay"] = _duration_arg(delay)
    if priority is not None:
        overrides["priority"] = priority
    queue, _ = _queue(app, url, create=True)
    try:
        handle = queue.enqueue(
            task_name,
            args=tuple(args),
            kwargs=kwargs,
            allow_unregistered=allow_unregistered,
            **overrides,
        )
    except TypeError as exc:  # the arguments do not fit the task's signature
        raise CliUsageError(f"ARGS_JSON / --kwargs: {exc}") from None
    click.echo(handle.id)


# --------------------------------------------------------------------------- stats / jobs


_STAT_FIELDS = (
    "queued",
    "due",
    "scheduled",
    "running",
    "succeeded",
    "dead",
    "cancelled",
    "skipped",
    "timed_out",
)
"""Columns of ``stats``: the job states, with ``queued`` split into ``due`` (ready to
run now) and ``scheduled`` (``run_at`` in the future); ``queued = due + scheduled``."""


def _stat_row(s: queue_core.QueueStats) -> dict[str, Any]:
    return {
        "queue": s.queue,
        "queued": s.ready + s.scheduled,
        "ready": s.ready,  # QueueStats' name (SPEC §9: --json keeps the records' names)
        "due": s.ready,
        "scheduled": s.scheduled,
        "running": s.running,
        "succeeded": s.succeeded,
        "dead": s.dead,
        "cancelled": s.cancelled,
        "skipped": s.skipped,
        "timed_out": s.timed_out,
    }


@click.command()
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON array of per-queue objects with these columns as keys.",
)
@_storage_options
def stats(as_json: bool, app: str | None, url: str | None) -> None:
    """Job counts per queue, by state: queued (= due + scheduled), running, succeeded,
    dead, cancelled, skipped, timed_out; and what is paused (queue-core pause).

    --json: one object per queue with these keys, every field of QueueStats (so also
    "ready", the same count as "due") and "paused" (true/false); then one
    object per paused task or flow: {"queue": null, "paused": true, "kind", "name",
    "since"}.
    """
    queue, where = _queue(app, url)
    pauses = queue.paused()
    rows = stat_rows(queue.stats(), pauses)
    if as_json:
        extra = [{"queue": None, "paused": True, **p.to_dict()} for p in pauses]
        echo_json(rows + [e for e in extra if e["kind"] != "queue"])
        return
    if not rows:
        click.echo(f"No jobs ({where}).")
        return
    totals = ["(total)", *(sum(r[f] for r in rows) for f in _STAT_FIELDS)]
    body = [
        [r["queue"] + (" (paused)" if r["paused"] else ""), *(r[f] for f in _STAT_FIELDS)]
        for r in rows
    ]
    click.echo(table(("queue", *_STAT_FIELDS), [*body, totals] if len(rows) > 1 else body))
    if pauses:
        click.echo("\nPaused (queue-core resume to undo):")
        click.echo(table(("paused", "name", "since"), pause_rows(pauses)))


def stat_rows(
    counts: list[queue_core.QueueStats], pauses: list[queue_core.Pause]
) -> list[dict[str, Any]]:
    """The rows of ``stats``: one per queue with jobs, and one per paused queue (zeros
    when it has none), each with ``paused``."""
    paused = {p.name for p in pauses if p.kind is queue_core.PauseKind.QUEUE}
    rows = {s.queue: {**_stat_row(s), "paused": s.queue in paused} for s in counts}
    for name in paused - set(rows):
        empty = queue_core.QueueStats(queue=name)
        rows[name] = {**_stat_row(empty), "paused": True}
    return [rows[name] for name in sorted(rows)]


@click.group(cls=_Group)
def jobs() -> None:
    """Inspect jobs."""


@jobs.command("show")
@click.argument("job_id")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the JobInfo as JSON, with its records under 'attempt_records'.",
)
@_storage_options
def jobs_show(job_id: str, as_json: bool, app: str | None, url: str | None) -> None:
    """Show one job (JOB_ID: its id or any unique prefix): its info and every attempt
    record."""
    queue, where = _queue(app, url)
    try:
        handle = queue.job(job_id_of(queue, job_id))
        info = handle.info()
        attempts = handle.attempts()
    except NotFound as exc:
        raise CliError(f"{exc} ({where})") from exc
    progress = handle.progress()
    if as_json:
        echo_json(
            {
                **info.to_dict(),
                "progress": None if progress is None else progress.to_dict(),
                "attempt_records": [a.to_dict() for a in attempts],
            }
        )
        return
    click.echo(
        kv_block(
            [
                ("id", info.id),
                ("task_name", info.task_name),
                ("queue", info.queue),
                ("state", info.state),
                ("reason", info.reason),
                ("attempts", f"{info.attempts} of {info.max_attempts}"),
                ("priority", info.priority),
                ("result", info.result),
                ("error_class", info.error_class),
                ("error", info.error),
                ("enqueued_at", info.enqueued_at),
                ("run_at", info.run_at),
                ("started_at", info.started_at),
                ("finished_at", info.finished_at),
                ("replay_of", info.replay_of),
                ("dead_id", info.dead_id),
                ("progress", progress_text(progress)),
            ]
        )
    )
    if attempts:
        click.echo(f"\nAttempts ({len(attempts)}):")
        click.echo(table(_ATTEMPT_HEADERS, _attempt_rows(attempts)))
    failed = next((a for a in reversed(attempts) if a.traceback), None)
    if failed is not None and failed.traceback:
        tb = printable(failed.traceback.rstrip())  # job text never drives the terminal
        click.echo("\nTraceback of the last failed attempt:\n" + tb)


def progress_text(progress: queue_core.Progress | None) -> str | None:
    """``40% 40 of 100 files (at 2026-12-01T10:00:00+00:00)``, or ``None``."""
    if progress is None:
        return None
    message = f" {printable(progress.message)}" if progress.message else ""
    return f"{progress.fraction:.0%}{message} (at {progress.at.isoformat(timespec='seconds')})"


_STATES = [state.value for state in JobState]

_SCAN_LIMIT = 5000
"""Default bound of the client-side scan behind ``jobs list --task``."""


@jobs.command("list")
@click.option("--state", type=click.Choice(_STATES), default=None, help="Only jobs in this state.")
@click.option("--queue", "queue_name", default=None, metavar="Q", help="Only jobs of this queue.")
@click.option("--task", "task_name", default=None, metavar="T", help="Only jobs of this task.")
@click.option("--limit", type=click.IntRange(min=1, max=1000), default=20, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--scan-limit",
    type=click.IntRange(min=1),
    default=_SCAN_LIMIT,
    show_default=True,
    help="With --task: read at most this many jobs to find the page (the storage "
    "cannot filter by task, so the CLI does).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of JobInfo objects.")
@_storage_options
def jobs_list(
    state: str | None,
    queue_name: str | None,
    task_name: str | None,
    limit: int,
    offset: int,
    scan_limit: int,
    as_json: bool,
    app: str | None,
    url: str | None,
) -> None:
    """List jobs, newest first, one page at a time (needs a storage with the
    SupportsJobScan ability; every built-in backend has it)."""
    queue, where = _queue(app, url)
    page = scan_jobs(
        queue.storage(),
        state=JobState(state) if state else None,
        queue=queue_name,
        task=task_name,
        limit=limit,
        offset=offset,
        max_scan=scan_limit,
    )
    if page is None:
        raise CliError(
            f"storage {where} cannot list jobs: it lacks the optional SupportsJobScan ability "
            f"(a list_jobs method); `queue-core jobs show ID` and `stats` work on any storage"
        )
    infos = [job_info(queue, record) for record in page.jobs]
    note = None
    if task_name:
        note = (
            f"Filtered by task here: the storage's list_jobs cannot filter by task, so the CLI "
            f"read {page.scanned} job{'' if page.scanned == 1 else 's'} (newest first)"
        )
        if page.truncated:
            note += (
                f" and stopped at --scan-limit {scan_limit}: older jobs of task "
                f"{task_name!r} may exist (raise --scan-limit to look further)."
            )
        else:
            note += "."
    if as_json:
        echo_json([info.to_dict() for info in infos])
        if note:
            click.echo(note, err=True)
        return
    filters = [
        f"{k} {v!r}" for k, v in (("state", state), ("queue", queue_name), ("task", task_name)) if v
    ]
    if not infos:
        scope = f" ({', '.join(filters)})" if filters else ""
        click.echo(f"No jobs{scope} at offset {offset} ({where}).")
    else:
        click.echo(
            table(
                (
                    "id",
                    "task_name",
                    "queue",
                    "state",
                    "reason",
                    "attempts",
                    "priority",
                    "enqueued_at",
                    "finished_at",
                ),
                [
                    [
                        i.id,
                        i.task_name,
                        i.queue,
                        i.state,
                        i.reason,
                        f"{i.attempts}/{i.max_attempts}",
                        i.priority,
                        i.enqueued_at,
                        i.finished_at,
                    ]
                    for i in infos
                ],
            )
        )
        shown = f"Jobs {offset + 1}-{offset + len(infos)}"
        if page.has_next:
            nxt = ["queue-core", "jobs", "list", f"--offset {offset + limit}", f"--limit {limit}"]
            nxt += [
                f"--{k} {v}"
                for k, v in (("state", state), ("queue", queue_name), ("task", task_name))
                if v
            ]
            click.echo(f"\n{shown}; more exist. Next page: {next_page_command(nxt, app, url)}")
        else:
            click.echo(f"\n{shown}; no more jobs.")
    if note:
        click.echo(f"\n{note}")


@jobs.command("cancel")
@click.argument("job_id")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the job's id, state and cancel_requested as a JSON object.",
)
@_storage_options
def jobs_cancel(job_id: str, as_json: bool, app: str | None, url: str | None) -> None:
    """Cancel a job: a queued job ends cancelled at once; a running one is asked to stop
    (its worker stops it and records the end). Exit 1 for an unknown id or a job that
    had already finished otherwise. JOB_ID: the id or any unique prefix."""
    queue, where = _queue(app, url)
    try:
        job_id = job_id_of(queue, job_id)
        state = queue.cancel(job_id)
    except NotFound as exc:
        raise CliError(f"{exc} ({where})") from exc
    requested = state is JobState.RUNNING
    if as_json:
        echo_json({"id": job_id, "state": state.value, "cancel_requested": requested})
    elif state is JobState.CANCELLED:
        click.echo(f"Job {job_id} is cancelled.")
    elif requested:
        click.echo(
            f"Job {job_id} is running: cancel requested; its worker stops it and records "
            f"the end (state stays running until then)."
        )
    if state is not JobState.CANCELLED and not requested:
        raise CliError(f"job {job_id!r} had already finished ({state.value}): nothing to cancel")


COMMANDS: tuple[click.Command, ...] = (enqueue, stats, jobs)
"""The commands of this module (:func:`contrib.cli.commands.load_commands` adds them)."""
