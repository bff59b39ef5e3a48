"""``queue-core config`` and ``queue-core migrate`` (SPEC §9)."""

from __future__ import annotations

import click

from contrib.cli.app import CliUsageError
from contrib.cli.common import _queue, _storage_options
from contrib.cli.output import echo_json, table
from queue_core import SupportsMigrate, SupportsSchemaVersion
from queue_core.app.config import load_config
from queue_core.storage.urls import mask_url

__all__ = ["config_command", "migrate"]


@click.command("config")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {file, settings: [{key, value, source}]} as JSON.",
)
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
    rows = [(s.key, mask_url(s.value) if s.key == "url" else s.value, s.source) for s in settings]
    if as_json:
        echo_json(
            {
                "file": None if config.path is None else str(config.path),
                "settings": [{"key": k, "value": v, "source": src} for k, v, src in rows],
            }
        )
        return
    where = "none found" if config.path is None else str(config.path)
    click.echo(f"configuration file: {where}")
    click.echo(
        table(
            ("key", "value", "source"),
            [(k, ",".join(v) if isinstance(v, list) else v, src) for k, v, src in rows],
        )
    )


@click.command()
@_storage_options
def migrate(app: str | None, url: str | None) -> None:
    """Create or upgrade the storage schema (idempotent): says whether it created the
    schema, upgraded it or found it up to date. A storage that keeps no schema (it does
    not implement SupportsMigrate, e.g. memory:// or Redis) has nothing to migrate, and
    the command says so."""
    queue, where = _queue(app, url, create=True, writes=False)
    storage = queue.storage()
    if not isinstance(storage, SupportsMigrate):
        click.echo(
            f"Nothing to migrate: {type(storage).__name__} ({where}) keeps no schema "
            "(it does not implement SupportsMigrate)."
        )
        return
    versioned = storage if isinstance(storage, SupportsSchemaVersion) else None
    before = versioned.schema_version() if versioned is not None else None
    queue.migrate()
    after = versioned.schema_version() if versioned is not None else None
    if before == 0 and after:
        click.echo(f"Schema created, version {after} ({where}).")
    elif before is not None and after is not None and before < after:
        click.echo(f"Schema upgraded from version {before} to {after} ({where}).")
    else:
        version = f", version {after}" if after else ""
        click.echo(f"Schema is up to date{version} ({where}).")


COMMANDS: tuple[click.Command, ...] = (config_command, migrate)
"""The commands of this module (:func:`contrib.cli.commands.load_commands` adds them)."""
