"""The ``queue-core`` group and what its commands share (SPEC §9).

The commands live in one module each (``contrib.cli.worker``, ``jobs``, ``dlq``,
``config``, ``flows``; the dashboard's in ``contrib.dashboard.cli``); each registers
itself on :data:`cli` when imported, and the end of this module imports them all.

Exit codes: ``0`` success; ``1`` not found, storage errors, or an aborted confirmation;
``2`` usage and configuration errors (bad option, bad APP, bad URL, bad JSON, bad
duration). Every error is one line on stderr naming the bad value; passwords in URLs are
masked.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import click

import queue_core
from contrib.cli.app import CliUsageError, StorageMissing, open_queue
from contrib.cli.bulk import ConfirmationRefused, show_progress
from queue_core import (
    ConfigError,
    NotFound,
    QueueCoreError,
    SerializationError,
    StorageError,
    StorageUnavailable,
)
from queue_core.registry import mask_url

__all__ = ["cli", "load_commands", "main", "show_progress"]  # show_progress: dlq looks it up here

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
    """Translates library errors raised anywhere below into one-line CLI errors.

    Command modules are imported when a command is looked up, not with this module:
    ``queue-core worker`` imports only ``contrib.cli.worker`` (a worker's start-up time
    is spent on imports); listing the commands (``--help``) imports them all.
    """

    def invoke(self, ctx: click.Context) -> Any:
        with _translated():
            return super().invoke(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            load_commands(cmd_name)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        load_commands()
        return super().list_commands(ctx)


def _version() -> str:
    # importlib.metadata costs tens of ms to import: only ``--version`` pays for it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("queue-core")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return str(getattr(queue_core, "__version__", "unknown"))


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo(f"queue-core, version {_version()}")
    ctx.exit()


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
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
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


def _json_value(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliUsageError(f"invalid {what} {text!r}: not JSON ({exc})") from exc


_ATTEMPT_HEADERS = ("#", "outcome", "reason", "error_class", "message", "worker_id",
                    "started_at", "finished_at", "mode")


def _attempt_rows(attempts: list[queue_core.AttemptRecord]) -> list[list[Any]]:
    return [
        [a.number, a.outcome, a.reason, a.error_class, a.message, a.worker_id,
         a.started_at, a.finished_at, a.mode]
        for a in attempts
    ]


# --------------------------------------------------------------------------- registration
_ALONE = {"worker": "contrib.cli.worker"}  # commands whose start-up time matters


def load_commands(name: str | None = None) -> None:
    """Register the commands on :data:`cli`: only the module of ``name`` when that one is
    known to live alone (``worker``), else every command module (idempotent)."""
    if name in _ALONE:
        importlib.import_module(_ALONE[name])
        return
    # One line per command module (each registers itself on ``cli`` when imported).
    import contrib.cli.config  # noqa: F401
    import contrib.cli.dlq  # noqa: F401
    import contrib.cli.flows  # noqa: F401
    import contrib.cli.jobs  # noqa: F401
    import contrib.cli.schedules  # noqa: F401
    import contrib.cli.worker  # noqa: F401
    import contrib.cli.workers  # noqa: F401
    from contrib.dashboard.cli import dashboard_command

    if "dashboard" not in cli.commands:
        cli.add_command(dashboard_command)
