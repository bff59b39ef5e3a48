"""The ``queue-core`` commands (SPEC §9).

Exit codes: ``0`` success; ``1`` not found, storage errors, or an aborted confirmation;
``2`` usage and configuration errors (bad option, bad APP, bad URL, bad JSON, bad
duration). Every error is one line on stderr naming the bad value; passwords in URLs are
masked.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NoReturn, TypeVar

import click

import queue_core
from contrib.cli.app import CliUsageError, StorageMissing, load_app, open_queue
from contrib.cli.bulk import (
    ConfirmationRefused,
    confirm,
    dead_entries,
    job_info,
    progress,
    purge_in_chunks,
    show_progress,
)
from contrib.cli.output import echo_json, kv_block, table
from contrib.dashboard.data import scan_jobs
from queue_core import (
    ConfigError,
    JobState,
    NotFound,
    QueueCoreError,
    SerializationError,
    StorageError,
    StorageUnavailable,
)
from queue_core.config import load_config
from queue_core.model import ms_from_dt
from queue_core.registry import mask_url

__all__ = ["cli", "main"]

F = TypeVar("F", bound=Callable[..., Any])

EXIT_FAILURE = 1
EXIT_USAGE = 2


class CliError(click.ClickException):
    """One line on stderr (``Error: ...``); exit code 1 (not found, storage errors)."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class CliUsage(CliError):
    """A usage or configuration error: exit code 2."""

    exit_code = EXIT_USAGE


def _fail(exc: BaseException) -> NoReturn:
    """Translate a library error into a :class:`CliError` (exit 2 for config, 1 otherwise)."""
    message = str(exc) or type(exc).__name__
    url = os.environ.get("QUEUE_CORE_URL")
    if url:  # belt and braces: never echo a password that came in through the env
        message = message.replace(url, mask_url(url))
    if isinstance(exc, (ConfigError, SerializationError, CliUsageError)):
        raise CliUsage(message) from exc
    if isinstance(exc, (NotFound, StorageMissing, ConfirmationRefused)):
        raise CliError(message) from exc
    if isinstance(exc, StorageUnavailable):
        raise CliError(f"storage unavailable: {message}") from exc
    if isinstance(exc, StorageError):
        raise CliError(f"storage error ({type(exc).__name__}): {message}") from exc
    raise CliError(f"{type(exc).__name__}: {message}") from exc


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except (QueueCoreError, CliUsageError, StorageMissing, ConfirmationRefused) as exc:
        _fail(exc)


class _Group(click.Group):
    """Translates library errors raised anywhere below into one-line CLI errors."""

    def invoke(self, ctx: click.Context) -> Any:
        with _translated():
            return super().invoke(ctx)


def _version() -> str:
    try:
        return version("queue-core")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return str(getattr(queue_core, "__version__", "unknown"))


def _storage_options(f: F) -> F:
    """``--app`` / ``--url`` on a command (they override the same options on the group)."""
    f = click.option(
        "--url",
        metavar="URL",
        default=None,
        help="Storage URL (else env QUEUE_CORE_URL, else sqlite:///queue_core.db).",
    )(f)
    f = click.option(
        "--app",
        metavar="MODULE:ATTR",
        default=None,
        help="Use the storage of this Queue object (wins over --url).",
    )(f)
    return f


def _queue(
    app: str | None, url: str | None, *, create: bool = False
) -> tuple[queue_core.Queue, str]:
    """The queue for this command; one built from a URL is closed when the command ends.

    Read-only commands (the default, ``create=False``) refuse storage that does not exist
    rather than create it empty; only ``enqueue`` and ``migrate`` create storage.
    """
    ctx = click.get_current_context()
    root = ctx.find_root().obj or {}
    app = app if app is not None else root.get("app")
    url = url if url is not None else root.get("url")
    queue, where = open_queue(app, url, create=create)
    if not app:  # close what the CLI opened; an --app Queue belongs to its module
        ctx.call_on_close(queue.close)
    return queue, where


# --------------------------------------------------------------------------- the group


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", prog_name="queue-core")
@_storage_options
@click.pass_context
def cli(ctx: click.Context, app: str | None, url: str | None) -> None:
    """queue-core: run workers, enqueue jobs, inspect and replay dead letters.

    Commands other than `worker` find the storage from --app, else --url, else env
    QUEUE_CORE_URL, else the embedded default sqlite:///queue_core.db. --app/--url may
    be given before the command or after it.
    """
    ctx.obj = {"app": app, "url": url}


def main() -> None:
    """Console-script entry point (``queue-core``)."""
    cli(prog_name="queue-core")


# --------------------------------------------------------------------------- worker


def _positive_float(
    ctx: click.Context, param: click.Parameter, value: float | None
) -> float | None:
    if value is not None and value <= 0:
        raise click.BadParameter(f"must be > 0, got {value!r}")
    return value


@cli.command()
@click.argument("app", metavar="APP")
@click.option("--queues", "-Q", default=None, metavar="Q1,Q2",
              help="Comma-separated queue names (default: env QUEUE_CORE_WORKER_QUEUES, else "
                   "[worker] queues of the configuration file, else every queue with a task "
                   "of APP).")
@click.option("--slots", "-c", type=click.IntRange(min=1), default=None,
              help="Jobs run at once by this worker (default: env QUEUE_CORE_WORKER_SLOTS, "
                   "else [worker] slots of the configuration file, else 8).")
@click.option("--burst", is_flag=True,
              help="Exit once no job is running, ready or due within 60 s.")
@click.option("--lease", type=float, default=None, callback=_positive_float, metavar="S",
              help="Lease length in seconds (default: the Queue's lease).")
@click.option("--reap-interval", type=float, default=5.0, show_default=True,
              callback=_positive_float, metavar="S", help="Seconds between reaper passes.")
@click.option("--shutdown-grace", default=None, metavar="S",
              help="On SIGTERM/SIGINT, how long running attempts may take to finish before "
                   "they are released for retry (seconds or e.g. 30s, 2m; default 30).")
@click.option("--isolation", type=click.Choice(["thread", "process"]), default=None,
              help="Default isolation for sync bodies of tasks that set none themselves "
                   "(default: thread).")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"],
              case_sensitive=False), default="INFO", show_default=True)
@click.option("--no-scheduler", is_flag=True, help="Do not enqueue periodic tasks' ticks.")
def worker(
    app: str,
    queues: str | None,
    slots: int | None,
    burst: bool,
    lease: float | None,
    reap_interval: float,
    shutdown_grace: str | None,
    isolation: str | None,
    log_level: str,
    no_scheduler: bool,
) -> None:
    """Run a worker for the Queue object APP (module:attribute).

    The current directory is put on sys.path first, so `queue-core worker tasks:queue`
    finds ./tasks.py. SIGTERM or SIGINT stops the worker gracefully: it stops claiming,
    lets running attempts finish within --shutdown-grace and releases the rest for retry.
    """
    grace = None
    if shutdown_grace is not None:  # validated before APP is imported
        from queue_core.durations import parse_duration

        grace = parse_duration(shutdown_grace, field="--shutdown-grace")
    queue = load_app(app)
    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else None
    if queues is not None and not names:
        raise CliUsageError(f"invalid --queues {queues!r}: expected comma-separated queue names")
    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    options: dict[str, Any] = {} if lease is None else {"lease": lease}
    if isolation is not None:
        options["isolation"] = isolation
    if grace is not None:
        options["shutdown_grace"] = grace
    options["scheduler"] = not no_scheduler
    queue.run_worker(queues=names, slots=slots, burst=burst, reap_interval=reap_interval, **options)


# --------------------------------------------------------------------------- enqueue


def _json_value(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliUsageError(f"invalid {what} {text!r}: not JSON ({exc})") from exc


def _duration_arg(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text  # a duration string such as "30s"; the Queue validates it


@cli.command()
@click.argument("task_name")
@click.argument("args_json", required=False, metavar="[ARGS_JSON]")
@click.option("--kwargs", "kwargs_json", default=None, metavar="JSON",
              help='Keyword arguments as a JSON object, e.g. \'{"to": "a@example.com"}\'.')
@click.option("--queue", "queue_name", default=None, help="Queue name (default: the task's).")
@click.option("--delay", default=None, metavar="S",
              help="Run no earlier than this long from now (seconds or e.g. 30s, 5m).")
@click.option("--priority", type=int, default=None, help="Higher runs first within a queue.")
@click.option("--allow-unregistered", is_flag=True,
              help="Enqueue a task that --app does not declare (or without --app) with the "
                   "queue defaults instead of the task's own options.")
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
    handle = queue.enqueue(
        task_name,
        args=tuple(args),
        kwargs=kwargs,
        allow_unregistered=allow_unregistered,
        **overrides,
    )
    click.echo(handle.id)


# --------------------------------------------------------------------------- dlq


@cli.group(cls=_Group)
def dlq() -> None:
    """Inspect, replay and purge dead-letter entries."""


_ATTEMPT_HEADERS = ("#", "outcome", "reason", "error_class", "message", "worker_id",
                    "started_at", "finished_at", "mode")


def _attempt_rows(attempts: list[queue_core.AttemptRecord]) -> list[list[Any]]:
    return [
        [a.number, a.outcome, a.reason, a.error_class, a.message, a.worker_id,
         a.started_at, a.finished_at, a.mode]
        for a in attempts
    ]


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
    click.echo(table(
        ("id", "task_name", "queue", "reason", "error_class", "error", "attempts", "dead_at"),
        [[e.id, e.task_name, e.queue, e.reason, e.error_class, e.error, len(e.attempts), e.dead_at]
         for e in page],
    ))
    shown = f"Entries {offset + 1}-{offset + len(page)}"
    if more:
        nxt = ["queue-core", "dlq", "list", f"--offset {offset + limit}", f"--limit {limit}"]
        if task_name:
            nxt.append(f"--task {task_name}")
        click.echo(f"\n{shown}; more exist. Next page: {' '.join(nxt)}")
    else:
        click.echo(f"\n{shown}; no more entries.")


@dlq.command("show")
@click.argument("dead_id")
@click.option("--json", "as_json", is_flag=True, help="Print the DeadJob as a JSON object.")
@_storage_options
def dlq_show(dead_id: str, as_json: bool, app: str | None, url: str | None) -> None:
    """Show one dead-letter entry with every attempt record."""
    queue, where = _queue(app, url)
    entry = queue.dead_letter(dead_id)
    if entry is None:
        raise CliError(f"no dead-letter entry with id {dead_id!r} ({where})")
    if as_json:
        echo_json(entry.to_dict())
        return
    click.echo(kv_block([
        ("id", entry.id), ("job_id", entry.job_id), ("task_name", entry.task_name),
        ("queue", entry.queue), ("reason", entry.reason), ("error_class", entry.error_class),
        ("error", entry.error), ("args", list(entry.args)), ("kwargs", entry.kwargs),
        ("dead_at", entry.dead_at), ("replay_of", entry.replay_of),
    ]))
    click.echo(f"\nAttempts ({len(entry.attempts)}):")
    click.echo(table(_ATTEMPT_HEADERS, _attempt_rows(entry.attempts)))
    last_tb = next((a.traceback for a in reversed(entry.attempts) if a.traceback), None)
    if last_tb:
        click.echo("\nTraceback of the last failed attempt:\n" + last_tb.rstrip())
    click.echo(f"\nReplay it with: queue-core dlq retry {entry.id}")


def _entries(n: int) -> str:
    return f"{n} dead-letter entr{'y' if n == 1 else 'ies'}"


@dlq.command("retry")
@click.argument("dead_id", required=False)
@click.option("--all", "retry_all", is_flag=True,
              help="Replay every dead-letter entry (of --task) instead of one DEAD_ID.")
@click.option("--task", "task_name", default=None, help="With --all: only entries of this task.")
@click.option("--queue", "queue_name", default=None, help="Enqueue the replays on this queue.")
@click.option("--yes", "-y", is_flag=True, help="With --all: do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the new jobs as JSON objects with 'id' and 'replay_of'.")
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
    """Replay the dead-letter entry DEAD_ID (or, with --all, every entry) as a new job
    with a fresh retry budget; print the new job id."""
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
            new_id = queue.retry_dead(dead_id, queue=queue_name)
        except NotFound as exc:
            raise CliError(f"no dead-letter entry with id {dead_id!r} ({where})") from exc
        if as_json:
            echo_json({"id": new_id, "replay_of": dead_id})
        else:
            click.echo(new_id)
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
        with progress(show_progress(as_json), len(ids), "Retrying") as update:
            for dead in ids:
                try:
                    retried.append({"id": queue.retry_dead(dead, queue=queue_name),
                                    "replay_of": dead})
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
    from queue_core.durations import parse_duration

    return parse_duration(value, field="--older-than")


@dlq.command("purge")
@click.option("--task", "task_name", default=None, help="Only entries of this task.")
@click.option("--older-than", default=None, metavar="DURATION",
              help="Only entries dead for at least this long (seconds, or e.g. 90m, 168h).")
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
    bar = show_progress(False)
    if yes and not bar:  # nobody to ask or show progress to: one purge_dead call
        removed = queue.purge_dead(task_name=task_name, older_than=seconds)
        click.echo(f"Purged {_entries(removed)}.")
        return
    # Count first: the prompt says how many, and the bar needs a length.
    before = None if seconds is None else queue.clock.now_ms() - round(seconds * 1000)
    matching = [
        e for e in dead_entries(queue, task_name)
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


# --------------------------------------------------------------------------- stats / jobs


_STAT_FIELDS = ("queued", "due", "scheduled", "running", "succeeded", "dead", "cancelled",
                "skipped", "timed_out")
"""Columns of ``stats``: the job states, with ``queued`` split into ``due`` (ready to
run now) and ``scheduled`` (``run_at`` in the future); ``queued = due + scheduled``."""


def _stat_row(s: queue_core.QueueStats) -> dict[str, Any]:
    return {
        "queue": s.queue, "queued": s.ready + s.scheduled, "due": s.ready,
        "scheduled": s.scheduled, "running": s.running, "succeeded": s.succeeded,
        "dead": s.dead, "cancelled": s.cancelled, "skipped": s.skipped, "timed_out": s.timed_out,
    }


@cli.command()
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON array of per-queue objects with these columns as keys.")
@_storage_options
def stats(as_json: bool, app: str | None, url: str | None) -> None:
    """Job counts per queue, by state: queued (= due + scheduled), running, succeeded,
    dead, cancelled, skipped, timed_out."""
    queue, where = _queue(app, url)
    rows = [_stat_row(s) for s in queue.stats()]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"No jobs ({where}).")
        return
    totals = ["(total)", *(sum(r[f] for r in rows) for f in _STAT_FIELDS)]
    body = [[r["queue"], *(r[f] for f in _STAT_FIELDS)] for r in rows]
    click.echo(table(("queue", *_STAT_FIELDS), [*body, totals] if len(rows) > 1 else body))


@cli.group(cls=_Group)
def jobs() -> None:
    """Inspect jobs."""


@jobs.command("show")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True,
              help="Print the JobInfo as JSON, with its records under 'attempt_records'.")
@_storage_options
def jobs_show(job_id: str, as_json: bool, app: str | None, url: str | None) -> None:
    """Show one job: its info and every attempt record."""
    queue, where = _queue(app, url)
    handle = queue.job(job_id)
    try:
        info = handle.info()
        attempts = handle.attempts()
    except NotFound as exc:
        raise CliError(f"no job with id {job_id!r} ({where})") from exc
    if as_json:
        echo_json({**info.to_dict(), "attempt_records": [a.to_dict() for a in attempts]})
        return
    click.echo(kv_block([
        ("id", info.id), ("task_name", info.task_name), ("queue", info.queue),
        ("state", info.state), ("reason", info.reason),
        ("attempts", f"{info.attempts} of {info.max_attempts}"), ("priority", info.priority),
        ("result", info.result), ("error_class", info.error_class), ("error", info.error),
        ("enqueued_at", info.enqueued_at), ("run_at", info.run_at),
        ("started_at", info.started_at), ("finished_at", info.finished_at),
        ("replay_of", info.replay_of), ("dead_id", info.dead_id),
    ]))
    if attempts:
        click.echo(f"\nAttempts ({len(attempts)}):")
        click.echo(table(_ATTEMPT_HEADERS, _attempt_rows(attempts)))


_STATES = [state.value for state in JobState]

_SCAN_LIMIT = 5000
"""Default bound of the client-side scan behind ``jobs list --task``."""


@jobs.command("list")
@click.option("--state", type=click.Choice(_STATES), default=None, help="Only jobs in this state.")
@click.option("--queue", "queue_name", default=None, metavar="Q", help="Only jobs of this queue.")
@click.option("--task", "task_name", default=None, metavar="T", help="Only jobs of this task.")
@click.option("--limit", type=click.IntRange(min=1, max=1000), default=20, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--scan-limit", type=click.IntRange(min=1), default=_SCAN_LIMIT, show_default=True,
              help="With --task: read at most this many jobs to find the page (the storage "
                   "cannot filter by task, so the CLI does).")
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
    filters = [f"{k} {v!r}" for k, v in
               (("state", state), ("queue", queue_name), ("task", task_name)) if v]
    if not infos:
        scope = f" ({', '.join(filters)})" if filters else ""
        click.echo(f"No jobs{scope} at offset {offset} ({where}).")
    else:
        click.echo(table(
            ("id", "task_name", "queue", "state", "reason", "attempts", "priority",
             "enqueued_at", "finished_at"),
            [[i.id, i.task_name, i.queue, i.state, i.reason, f"{i.attempts}/{i.max_attempts}",
              i.priority, i.enqueued_at, i.finished_at] for i in infos],
        ))
        shown = f"Jobs {offset + 1}-{offset + len(infos)}"
        if page.has_next:
            nxt = ["queue-core", "jobs", "list", f"--offset {offset + limit}", f"--limit {limit}"]
            nxt += [f"--{k} {v}" for k, v in
                    (("state", state), ("queue", queue_name), ("task", task_name)) if v]
            click.echo(f"\n{shown}; more exist. Next page: {' '.join(nxt)}")
        else:
            click.echo(f"\n{shown}; no more jobs.")
    if note:
        click.echo(f"\n{note}")


@jobs.command("cancel")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True,
              help="Print the job's id, state and cancel_requested as a JSON object.")
@_storage_options
def jobs_cancel(job_id: str, as_json: bool, app: str | None, url: str | None) -> None:
    """Cancel a job: a queued job ends cancelled at once; a running one is asked to stop
    (its worker stops it and records the end). Exit 1 for an unknown id or a job that
    had already finished otherwise."""
    queue, where = _queue(app, url)
    try:
        state = queue.cancel(job_id)
    except NotFound as exc:
        raise CliError(f"no job with id {job_id!r} ({where})") from exc
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


@cli.command("config")
@click.option("--json", "as_json", is_flag=True,
              help="Print {file, settings: [{key, value, source}]} as JSON.")
@click.option("--url", metavar="URL", default=None, help="Show the effective values with this URL.")
def config_command(as_json: bool, url: str | None) -> None:
    """Show every effective setting and where it came from.

    Precedence: explicit argument (here --url) > environment variable > configuration
    file (./queue-core.toml, else [tool.queue-core] in ./pyproject.toml, or the file
    named by env QUEUE_CORE_CONFIG) > default. The file is validated: an unknown key or
    a bad value is an error naming it.
    """
    ctx = click.get_current_context()
    root = ctx.find_root().obj or {}
    if root.get("app"):
        raise CliUsageError(
            f"config does not take --app ({root['app']}): it shows the settings of the "
            "configuration file and the environment; a Queue's own arguments are in its code"
        )
    url = url if url is not None else root.get("url")
    config = load_config()
    explicit = {} if url is None else {"url": (url, "--url")}
    settings = config.settings(explicit)
    rows = [
        (s.key, mask_url(s.value) if s.key == "url" else s.value, s.source) for s in settings
    ]
    if as_json:
        echo_json({
            "file": None if config.path is None else str(config.path),
            "settings": [{"key": k, "value": v, "source": src} for k, v, src in rows],
        })
        return
    where = "none found" if config.path is None else str(config.path)
    click.echo(f"configuration file: {where}")
    click.echo(table(("key", "value", "source"), [
        (k, ",".join(v) if isinstance(v, list) else v, src) for k, v, src in rows
    ]))


@cli.command()
@_storage_options
def migrate(app: str | None, url: str | None) -> None:
    """Create or upgrade the storage schema (idempotent)."""
    queue, where = _queue(app, url, create=True)
    queue.migrate()
    click.echo(f"Schema is up to date ({where}).")


def _register_dashboard() -> None:
    """``queue-core dashboard``: the command lives with the dashboard (contrib.dashboard)."""
    from contrib.dashboard.cli import dashboard_command

    cli.add_command(dashboard_command)


_register_dashboard()


def _register_flow() -> None:
    """``queue-core flow ...``: the group registers itself on import (contrib.cli.flows)."""
    import contrib.cli.flows  # noqa: F401


_register_flow()
import contrib.cli.schedules  # noqa: E402, F401, I001 - queue-core schedules registers itself
