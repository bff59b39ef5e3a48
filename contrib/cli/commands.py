"""The ``queue-core`` command group (SPEC §9): its options, and the registration of the
commands, which live in one module each (``contrib.cli.worker``, ``jobs``, ``dlq``,
``config``, ``control``, ``flows``, ``schedules``, ``workers``; the dashboard's in
``contrib.dashboard.cli``). A command module defines its commands and lists them in
``COMMANDS``; :func:`load_commands` imports the modules and adds them to :data:`cli`, so
no command module imports this one.

What the commands share (errors and exit codes, the storage options, opening the queue)
is :mod:`contrib.cli.common`.
"""

from __future__ import annotations

import importlib

import click

import queue_core
from contrib.cli.common import _Group, _storage_options

__all__ = ["cli", "load_commands", "main"]


class _RootGroup(_Group):
    """The root group: command modules are imported when a command is looked up, not
    with this module: ``queue-core worker`` imports only ``contrib.cli.worker`` (a
    worker's start-up time is spent on imports); listing the commands (``--help``)
    imports them all."""

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


# --------------------------------------------------------------------------- the group


@click.group(cls=_RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
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


# --------------------------------------------------------------------------- registration
_MODULES = (
    "contrib.cli.config",
    "contrib.cli.control",
    "contrib.cli.dlq",
    "contrib.cli.flows",
    "contrib.cli.flow_resume",
    "contrib.cli.jobs",
    "contrib.cli.schedules",
    "contrib.cli.worker",
    "contrib.cli.workers",
    "contrib.dashboard.cli",
)
"""The modules that hold commands (each lists them in ``COMMANDS``)."""
_ALONE = {"worker": "contrib.cli.worker"}  # commands whose start-up time matters


def _add(module_name: str) -> None:
    for command in importlib.import_module(module_name).COMMANDS:
        if command.name not in cli.commands:
            cli.add_command(command)


def load_commands(name: str | None = None) -> None:
    """Register the commands on :data:`cli`: only the module of ``name`` when that one is
    known to live alone (``worker``), else every command module (idempotent)."""
    if name in _ALONE:
        _add(_ALONE[name])
        return
    for module_name in _MODULES:
        _add(module_name)
