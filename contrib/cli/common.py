"""What the ``queue-core`` commands share: errors and exit codes, the storage options,
opening the queue, paging hints, attempt rows.

Exit codes: ``0`` success; ``1`` not found, storage errors, or an aborted confirmation;
``2`` usage and configuration errors (bad option, bad APP, bad URL, bad JSON, bad
duration). Every error is one line on stderr naming the bad value; passwords in URLs are
masked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import click

import queue_core
from contrib.cli.app import CliUsageError, StorageMissing, open_queue
from contrib.cli.bulk import ConfirmationRefused, show_progress
from contrib.textsafe import printable
from queue_core import (
    ConfigError,
    NotFound,
    QueueCoreError,
    SerializationError,
    StorageError,
    StorageUnavailable,
)
from queue_core.app.config import ENV_URL, resolve_url
from queue_core.storage.urls import mask_url, redact

__all__ = [
    "CliError",
    "CliUsage",
    "next_page_command",
    "show_progress",
]  # show_progress: dlq looks it up here

F = TypeVar("F", bound=Callable[..., Any])

EXIT_FAILURE = 1
EXIT_USAGE = 2


class CliError(click.ClickException):
    """One line on stderr (``Error: ...``); exit code 1 (not found, storage errors)."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str) -> None:
        super().__init__(printable(" ".join(message.split())))


class CliUsage(CliError):
    """A usage or configuration error: exit code 2."""

    exit_code = EXIT_USAGE


def _urls_in_play() -> list[str]:
    """Every storage URL this command may have used: env ``QUEUE_CORE_URL``, the
    configuration file's, ``--url`` and the URL of each queue opened."""
    urls = [os.environ.get(ENV_URL)]
    try:
        urls.append(resolve_url(None))
    except QueueCoreError:  # a bad configuration file: its own error says so
        pass
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    if isinstance(obj, dict):
        urls += [obj.get("url"), *obj.get("urls", ())]
    return sorted({u for u in urls if u}, key=len, reverse=True)


def _remember_url(url: str | None) -> None:
    """Note a URL the command uses, so that :func:`_fail` scrubs its credentials."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    if url and isinstance(obj, dict):
        obj.setdefault("urls", []).append(url)


def _fail(exc: BaseException) -> NoReturn:
    """Translate a library error into a :class:`CliError` (exit 2 for config, 1 otherwise)."""
    message = str(exc) or type(exc).__name__
    for url in _urls_in_play():  # belt and braces: never echo a credential of a URL
        message = redact(message, url)
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
    """A command group that translates library errors raised anywhere below into one-line
    CLI errors (exit 2 for configuration errors, 1 otherwise)."""

    def invoke(self, ctx: click.Context) -> Any:
        with _translated():
            return super().invoke(ctx)


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
    app: str | None, url: str | None, *, create: bool = False, writes: bool = True
) -> tuple[queue_core.Queue, str]:
    """The queue for this command; one built from a URL is closed when the command ends.

    Read-only commands (the default, ``create=False``) refuse storage that does not exist
    rather than create it empty; the commands that store something (``enqueue``, ``flow
    run``, ``pause``, ``resume``) and ``migrate`` (``writes=False``) create storage, and
    the ones that store refuse a ``memory://`` storage of their own process
    (:func:`~contrib.cli.app.open_queue`).
    """
    ctx = click.get_current_context()
    root = ctx.find_root().obj or {}
    app = app if app is not None else root.get("app")
    url = url if url is not None else root.get("url")
    _remember_url(url)
    queue, where = open_queue(app, url, create=create, writes=writes)
    _remember_url(queue.url)
    if not app:  # close what the CLI opened; an --app Queue belongs to its module
        ctx.call_on_close(queue.close)
    return queue, where


def next_page_command(words: list[str], app: str | None, url: str | None) -> str:
    """The command that shows the next page: ``words`` plus the ``--app`` / ``--url`` this
    command was given (before or after its name; a URL with its password masked), so a
    copied hint reads the same storage."""
    import shlex

    root = click.get_current_context().find_root().obj or {}
    app = app if app is not None else root.get("app")
    url = url if url is not None else root.get("url")
    where = [f"--app {shlex.quote(app)}"] if app else []
    if url and not app:
        where.append(f"--url {shlex.quote(mask_url(url))}")
    return " ".join([*words, *where])


def _json_value(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliUsageError(f"invalid {what} {text!r}: not JSON ({exc})") from exc


_ATTEMPT_HEADERS = (
    "#",
    "outcome",
    "reason",
    "error_class",
    "message",
    "worker_id",
    "started_at",
    "finished_at",
    "mode",
)


def _attempt_rows(attempts: list[queue_core.AttemptRecord]) -> list[list[Any]]:
    return [
        [
            a.number,
            a.outcome,
            a.reason,
            a.error_class,
            a.message,
            a.worker_id,
            a.started_at,
            a.finished_at,
            a.mode,
        ]
        for a in attempts
    ]
