"""``queue-core dashboard``: serve the web dashboard with uvicorn.

The command is :data:`dashboard_command`; ``contrib.cli`` registers it on the
``queue-core`` group, and ``python -m contrib.dashboard`` runs it on its own.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from queue_core import ConfigError, QueueCoreError

__all__ = ["TOKEN_ENV", "dashboard_command"]

TOKEN_ENV = "QUEUE_CORE_DASHBOARD_TOKEN"
"""Env var read for ``--token`` (keeps the token out of ``ps`` listings)."""

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def _answers_to(bind: str, extra: tuple[str, ...]) -> list[str]:
    """The host names to allow: ``extra``, the bound name when ``--host`` is a name, and
    this machine's name when it binds every interface (IP addresses and localhost are
    always allowed)."""
    import ipaddress
    import socket

    names = list(extra)
    try:
        wildcard = ipaddress.ip_address(bind.strip("[]")).is_unspecified
    except ValueError:  # a name, not an address
        wildcard = False
        if bind and bind.lower() != "localhost":
            names.append(bind)
    if wildcard:
        names.append(socket.gethostname())
    return list(dict.fromkeys(n.lower() for n in names))


def _scrubbed(message: str, url: str | None) -> str:
    """``message`` without a credential of ``url`` or of the URL it resolves to."""
    from queue_core.app.config import resolve_url
    from queue_core.storage.urls import redact

    resolved: str | None = url
    try:
        resolved = resolve_url(url)
    except QueueCoreError:  # a bad configuration file
        pass
    for candidate in {url, resolved}:
        message = redact(message, candidate)
    return message


def _root_options() -> tuple[str | None, str | None]:
    """``--app`` / ``--url`` given on the ``queue-core`` group, if this runs under it."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    if isinstance(obj, dict):
        return obj.get("app"), obj.get("url")
    return None, None


@click.command("dashboard", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--app",
    metavar="MODULE:ATTR",
    default=None,
    help="Use the storage of this Queue (wins over --url).",
)
@click.option(
    "--url",
    metavar="URL",
    default=None,
    help="Storage URL (else env QUEUE_CORE_URL, else sqlite:///queue_core.db).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Port to bind."
)
@click.option(
    "--token",
    metavar="T",
    envvar=TOKEN_ENV,
    default=None,
    help=f"Require this token on every request (Bearer header or ?token= once). Env {TOKEN_ENV}.",
)
@click.option("--read-only", is_flag=True, help="Show everything, refuse retry/purge/cancel.")
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name the dashboard answers to besides IP addresses and localhost (the "
    "name users open, e.g. behind a proxy); repeat for several, '.example.com' for a "
    "domain, '*' for any. Other Host headers get 400 (DNS rebinding).",
)
@click.option(
    "--root-path",
    default="",
    metavar="PATH",
    help="URL prefix when served behind a proxy under a sub-path, e.g. /queues.",
)
def dashboard_command(
    app: str | None,
    url: str | None,
    host: str,
    port: int,
    token: str | None,
    read_only: bool,
    allowed_hosts: tuple[str, ...],
    root_path: str,
) -> None:
    """Serve the web dashboard and Prometheus metrics (/metrics).

    Binds to 127.0.0.1 by default. Pages: queues, jobs, a job, dead letters (retry,
    purge). Actions are POSTs with CSRF tokens; --token protects every request.
    """
    try:
        import uvicorn

        from contrib.cli.app import CliUsageError, StorageMissing, open_queue
        from contrib.dashboard.app import create_app
        from contrib.dashboard.origin import ALWAYS_ALLOWED
    except ImportError as exc:  # the extra is not installed
        raise click.ClickException(
            "the dashboard needs the 'dashboard' extra: "
            f"pip install 'queue-core[dashboard]' ({exc})"
        ) from exc
    root_app, root_url = _root_options()
    app = app if app is not None else root_app
    url = url if url is not None else root_url
    if token is not None and not token.strip():
        raise click.UsageError("invalid --token '': give a non-empty token or leave it out")
    try:
        queue, where = open_queue(app, url, create=False)  # never an empty file for a typo
        hosts = _answers_to(host, allowed_hosts)
        asgi = create_app(queue, token=token, read_only=read_only, allowed_hosts=hosts)
    except (CliUsageError, ConfigError) as exc:
        raise click.UsageError(_scrubbed(str(exc), url)) from exc
    except StorageMissing as exc:  # as the read-only commands: exit 1, where it looked
        raise click.ClickException(_scrubbed(str(exc), url)) from exc
    except QueueCoreError as exc:
        raise click.ClickException(_scrubbed(f"{type(exc).__name__}: {exc}", url)) from exc
    if host not in _LOCAL_HOSTS and token is None:
        click.echo(
            f"warning: serving on {host} without --token: anyone who can reach this port can "
            "read every job and retry or purge dead letters",
            err=True,
        )
    shown_host = f"[{host}]" if ":" in host else host
    click.echo(
        f"queue-core dashboard for {where} at http://{shown_host}:{port}{root_path}/"
        + (" (read-only)" if read_only else "")
        + (" (token required)" if token else ""),
        err=True,
    )
    click.echo(
        f"answers to {ALWAYS_ALLOWED}" + "".join(f", {h}" for h in hosts)
        + " (add names with --allowed-host)",
        err=True,
    )  # fmt: skip
    config = uvicorn.Config(
        asgi,
        host=host,
        port=port,
        root_path=root_path.rstrip("/"),
        log_level=os.environ.get("QUEUE_CORE_DASHBOARD_LOG_LEVEL", "info"),
        access_log=True,
    )
    server = uvicorn.Server(config)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl+C it shut down on: a clean stop
        pass
    finally:
        if not app:  # a Queue opened from a URL is ours to close
            queue.close()
    if not server.started:
        sys.exit(1)


def main(argv: list[str] | None = None) -> Any:
    """``python -m contrib.dashboard``."""
    return dashboard_command.main(args=argv, prog_name="queue-core dashboard")


COMMANDS: tuple[click.Command, ...] = (dashboard_command,)
"""The commands of this module (:func:`contrib.cli.commands.load_commands` adds them)."""
