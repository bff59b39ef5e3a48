"""``queue-core config`` and ``queue-core migrate`` (SPEC §9)."""

from __future__ import annotations

import click

from contrib.cli.app import CliUsageError
from contrib.cli.commands import _queue, _storage_options, cli
from contrib.cli.output import echo_json, table
from queue_core.config import load_config
from queue_core.registry import mask_url

__all__ = ["config_command", "migrate"]


@cli.command("config")
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


@cli.command()
@_storage_options
def migrate(app: str | None, url: str | None) -> None:
    """Create or upgrade the storage schema (idempotent)."""
    queue, where = _queue(app, url, create=True)
    queue.migrate()
    click.echo(f"Schema is up to date ({where}).")
