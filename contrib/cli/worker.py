"""``queue-core worker``: run a worker for an APP's Queue (SPEC §9)."""

from __future__ import annotations

import logging
from typing import Any

import click

from contrib.cli.app import CliUsageError, load_app
from contrib.logformat import LOG_FORMATS, configure_logging

__all__ = ["worker"]


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A duration option: seconds or a duration string (``30s``, ``2m``, ``1h30m``)."""
    if value is None:
        return None
    from queue_core.records.durations import parse_duration
    from queue_core.records.errors import ConfigError

    try:
        return parse_duration(value, field=f"--{param.name}".replace("_", "-"))
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("app", metavar="[APP]", required=False, default=None)
@click.option(
    "--url",
    default=None,
    metavar="URL",
    help="Without APP: run the flow-file (script) steps of this storage; default env "
    "QUEUE_CORE_URL, else the configuration file's url, else sqlite:///queue_core.db.",
)
@click.option(
    "--queues",
    "-Q",
    default=None,
    metavar="Q1,Q2",
    help="Comma-separated queue names (default: env QUEUE_CORE_WORKER_QUEUES, else "
    "[worker] queues of the configuration file, else every queue with a task "
    "of APP).",
)
@click.option(
    "--slots",
    "-c",
    type=click.IntRange(min=1),
    default=None,
    help="Jobs run at once by this worker (default: env QUEUE_CORE_WORKER_SLOTS, "
    "else [worker] slots of the configuration file, else 8).",
)
@click.option(
    "--prefetch",
    type=click.IntRange(min=0, max=10_000),
    default=None,
    metavar="N",
    help="Jobs claimed ahead of free slots, held until a slot frees (default: env "
    "QUEUE_CORE_WORKER_PREFETCH, else [worker] prefetch of the configuration file, else "
    "--slots; 0: claim for free slots only).",
)
@click.option(
    "--burst", is_flag=True, help="Exit once no job is running, ready or due within 60 s."
)
@click.option(
    "--lease",
    default=None,
    callback=_duration,
    metavar="S",
    help="Lease length (seconds or e.g. 30s, 2m; default: the Queue's lease).",
)
@click.option(
    "--reap-interval",
    default="5",
    show_default=True,
    callback=_duration,
    metavar="S",
    help="Time between reaper passes (seconds or e.g. 500ms, 5s).",
)
@click.option(
    "--shutdown-grace",
    default=None,
    metavar="S",
    help="On SIGTERM/SIGINT, how long running attempts may take to finish before "
    "they are released for retry (seconds or e.g. 30s, 2m; default 30).",
)
@click.option(
    "--isolation",
    type=click.Choice(["thread", "process"]),
    default=None,
    help="Default isolation for sync bodies of tasks that set none themselves (default: thread).",
)
@click.option(
    "--max-tasks-per-child",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="isolation=process: replace a child process once it has run N attempts "
    "(default: children are kept).",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
@click.option(
    "--log-format",
    type=click.Choice(list(LOG_FORMATS)),
    default="text",
    show_default=True,
    help="text: one readable line per event; json: one JSON object per line with "
    "the event's fields (job_id, task, attempt, outcome, ...), for log shippers.",
)
@click.option(
    "--log-tracebacks",
    type=click.Choice(["dead", "all", "none"]),
    default="dead",
    show_default=True,
    help="Log a failed attempt's traceback after its line: when the job is "
    "dead-lettered (dead), for every failed attempt (all), or never (none).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    metavar="P",
    help="Serve this worker's Prometheus metrics (attempts, durations, "
    "pick-up latency, busy/stuck slots) at http://HOST:P/metrics.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    metavar="HOST",
    help="Address --metrics-port binds to (0.0.0.0: every interface).",
)
@click.option("--no-scheduler", is_flag=True, help="Do not enqueue periodic tasks' ticks.")
@click.option(
    "--flow-dir",
    "flow_dirs",
    multiple=True,
    metavar="DIR",
    help="Run type: script flow steps whose file is inside DIR (repeatable). Default: env "
    "QUEUE_CORE_WORKER_FLOW_DIRS, else [worker] flow_dirs of the configuration file, else "
    "the working directory (never /) and the directories of the flow files the app loaded. "
    "Any other script step is refused (reason not_allowed), never run.",
)
@click.option(
    "--http-host",
    "http_hosts",
    multiple=True,
    metavar="HOST",
    help="Let type: http flow steps reach HOST: a name or an address, *.example.com for "
    "its subdomains, * for any host (repeatable). Default: env QUEUE_CORE_WORKER_HTTP_HOSTS, "
    "else [worker] http_hosts, else any host. With hosts named, an http step to another "
    "host is refused (reason not_allowed).",
)
def worker(
    app: str | None,
    url: str | None,
    queues: str | None,
    slots: int | None,
    prefetch: int | None,
    burst: bool,
    lease: float | None,
    reap_interval: float,
    shutdown_grace: str | None,
    isolation: str | None,
    max_tasks_per_child: int | None,
    log_level: str,
    log_format: str,
    log_tracebacks: str,
    metrics_port: int | None,
    metrics_host: str,
    no_scheduler: bool,
    flow_dirs: tuple[str, ...],
    http_hosts: tuple[str, ...],
) -> None:
    """Run a worker for the Queue object APP (module:attribute).

    The current directory is put on sys.path first, so `queue-core worker tasks:queue`
    finds ./tasks.py. Without APP the worker runs the steps of YAML flow files (`type:
    script`) on the storage of --url (else env QUEUE_CORE_URL, the configuration file,
    the embedded default): no Python app needed. SIGTERM or SIGINT stops the worker
    gracefully: it stops claiming, lets running attempts finish within --shutdown-grace
    and releases the rest for retry. Flow-file steps that run executables run only from
    the worker's flow directories (by default its working directory), http steps reach
    the hosts it allows (by default any): --flow-dir, --http-host (see SECURITY.md).
    """
    grace = None
    if shutdown_grace is not None:  # validated before APP is imported
        from queue_core.records.durations import parse_duration

        grace = parse_duration(shutdown_grace, field="--shutdown-grace")
    root = click.get_current_context().find_root().obj or {}
    url = url if url is not None else root.get("url")
    if app and url:
        raise CliUsageError(
            f"give APP or --url, not both: APP {app!r} is a Queue that names its own storage"
        )
    queue = load_app(app) if app else _flow_queue(url)
    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else None
    if queues is not None and not names:
        raise CliUsageError(f"invalid --queues {queues!r}: expected comma-separated queue names")
    configure_logging(log_level, log_format, redact_urls=[queue.url] if queue.url else [])
    options: dict[str, Any] = {} if lease is None else {"lease": lease}
    if prefetch is not None:
        options["prefetch"] = prefetch
    if isolation is not None:
        options["isolation"] = isolation
    if max_tasks_per_child is not None:
        options["max_tasks_per_child"] = max_tasks_per_child
    if grace is not None:
        options["shutdown_grace"] = grace
    if metrics_port is not None:
        options["listeners"] = [_serve_metrics(metrics_host, metrics_port)]
    options["scheduler"] = not no_scheduler
    if flow_dirs:
        options["flow_dirs"] = list(flow_dirs)
    if http_hosts:
        options["http_hosts"] = list(http_hosts)
    options["log_tracebacks"] = log_tracebacks
    options["app"] = app.strip() if app else None
    queue.run_worker(queues=names, slots=slots, burst=burst, reap_interval=reap_interval, **options)


def _flow_queue(url: str | None) -> Any:
    """The Queue of a worker started without APP: flow-file steps only (a ``type:
    script`` step needs no task; a ``type: task`` step needs the app that declares it)."""
    from queue_core import Queue

    return Queue(url)


def _serve_metrics(host: str, port: int) -> Any:
    """A :class:`contrib.worker_metrics.WorkerMetrics` serving on ``host:port``."""
    try:
        from contrib.worker_metrics import WorkerMetrics
    except ImportError as exc:  # prometheus-client is in the dashboard extra
        raise CliUsageError(
            f"--metrics-port needs prometheus-client ({exc}): pip install 'queue-core[dashboard]'"
        ) from exc
    metrics = WorkerMetrics()
    try:
        metrics.serve(port, addr=host)
    except OSError as exc:
        raise CliUsageError(
            f"invalid --metrics-port {port}: cannot listen on {host}:{port} ({exc.strerror or exc})"
        ) from exc
    logging.getLogger("queue_core.worker").info("metrics at http://%s:%d/metrics", host, port)
    return metrics


COMMANDS: tuple[click.Command, ...] = (worker,)
"""The commands of this module (:func:`contrib.cli.commands.load_commands` adds them)."""
