"""Finding the queue a command works on: ``--app``, ``--url``, env, embedded default."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from queue_core import ConfigError, Queue, SupportsSchemaVersion
from queue_core.app.config import ENV_URL, resolve_url
from queue_core.storage.urls import mask_url

__all__ = [
    "CliUsageError",
    "StorageMissing",
    "check_storage_exists",
    "load_app",
    "open_queue",
    "sqlite_file",
]

_DEFAULT_ATTRIBUTES = ("queue", "app")


class CliUsageError(Exception):
    """A bad command-line value (exit code 2), with a one-line message."""


def _import_module(module_name: str, spec: str) -> Any:
    cwd = os.getcwd()
    # Like celery/rq: APP modules are looked up from the current directory first.
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise CliUsageError(
                f"invalid APP {spec!r}: no module named {module_name!r} "
                f"(looked in the current directory {cwd} and on sys.path)"
            ) from exc
        raise CliUsageError(
            f"invalid APP {spec!r}: importing {module_name!r} failed: {exc}"
        ) from exc
    except ImportError as exc:
        raise CliUsageError(
            f"invalid APP {spec!r}: importing {module_name!r} failed: {exc}"
        ) from exc


def _close_names(name: str, obj: Any) -> list[str]:
    import difflib  # only for this message

    public = [n for n in dir(obj) if not n.startswith("_")]
    return difflib.get_close_matches(name, public, n=3, cutoff=0.6)


def _queue_names(module: Any) -> list[str]:
    return [n for n in dir(module) if isinstance(getattr(module, n, None), Queue)]


def _did_you_mean(names: list[str], spec_of: Any = repr) -> str:
    if not names:
        return ""
    return "; did you mean " + " or ".join(spec_of(n) for n in names) + "?"


def load_app(spec: str) -> Queue:
    """Import ``module:attribute`` (``attribute`` may be dotted) and return that Queue.

    ``module`` alone looks for an attribute named ``queue`` (then ``app``). A mistake
    gets a suggestion: ``tasks.queue`` -> ``tasks:queue``, a close attribute name, or
    which part of a dotted attribute is missing on what.

    Raises:
        CliUsageError: the spec is malformed, the module or attribute is missing, or the
            object found is not a :class:`queue_core.Queue`.
    """
    text = spec.strip()
    module_name, sep, attribute = text.partition(":")
    if not module_name or (sep and not attribute):
        raise CliUsageError(
            f"invalid APP {spec!r}: expected module:attribute, e.g. myapp.tasks:queue"
        )
    try:
        module = _import_module(module_name, spec)
    except CliUsageError as exc:
        hint = _dotted_instead_of_colon(module_name, sep)
        if hint is None:
            raise
        raise CliUsageError(f"{exc}; did you mean {hint!r}?") from exc
    candidates = [attribute] if attribute else list(_DEFAULT_ATTRIBUTES)
    for name in candidates:
        obj: Any = module
        parts = name.split(".")
        for depth, part in enumerate(parts):
            if not hasattr(obj, part):
                if not attribute:  # looking for a default name: try the next one
                    break
                found = ":".join((module_name, ".".join(parts[:depth]))) if depth else None
                if depth == 0:
                    queues = _queue_names(module)
                    close = [n for n in _close_names(part, obj) if n in queues] or queues
                    close = close or _close_names(part, obj)
                    suggestion = _did_you_mean(close, lambda n: repr(f"{module_name}:{n}"))
                    raise CliUsageError(
                        f"invalid APP {spec!r}: module {module_name!r} has no attribute "
                        f"{part!r}{suggestion}"
                    )
                if isinstance(obj, Queue):
                    raise CliUsageError(
                        f"invalid APP {spec!r}: {found} is a Queue, which has no attribute "
                        f"{part!r} — APP names the Queue object itself: did you mean "
                        f"{found!r}?"
                    )
                raise CliUsageError(
                    f"invalid APP {spec!r}: {found} (a {type(obj).__name__}) has no "
                    f"attribute {part!r}{_did_you_mean(_close_names(part, obj))}"
                )
            obj = getattr(obj, part)
        else:
            if not isinstance(obj, Queue):
                queues = _queue_names(module)
                hint = _did_you_mean(queues, lambda n: repr(f"{module_name}:{n}"))
                raise CliUsageError(
                    f"invalid APP {spec!r}: {module_name}:{name} is a {type(obj).__name__}, "
                    f"not a queue_core.Queue{hint}"
                )
            return obj
    wanted = " or ".join(repr(c) for c in candidates)
    queues = _queue_names(module)
    hint = _did_you_mean(queues, lambda n: repr(f"{module_name}:{n}"))
    raise CliUsageError(
        f"invalid APP {spec!r}: module {module_name!r} has no attribute {wanted}{hint}"
    )


def _dotted_instead_of_colon(module_name: str, sep: str) -> str | None:
    """``tasks:queue`` when ``tasks.queue`` was given and ``tasks`` has a Queue ``queue``."""
    if sep or "." not in module_name:
        return None
    parent, _, attribute = module_name.rpartition(".")
    try:
        module = importlib.import_module(parent)
    except Exception:  # noqa: BLE001 - only a hint: any failure means no suggestion
        return None
    if isinstance(getattr(module, attribute, None), Queue):
        return f"{parent}:{attribute}"
    return None


# --------------------------------------------------------------------------- storage


class StorageMissing(Exception):
    """A read-only command was pointed at storage that does not exist (exit code 1)."""


_HOW_TO_POINT = (
    "point the command at your app's storage with --app MODULE:ATTR (e.g. --app "
    "tasks:queue, the Queue your tasks are declared on), --url URL, or env QUEUE_CORE_URL"
)


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (relative to the working directory), or ``None``
    for other schemes, in-memory SQLite and URI-style filenames."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() != "sqlite" or "uri=true" in parts.query.lower():
        return None
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if path in ("", ":memory:"):
        return None
    return Path(path)


def _no_schema_yet(app: str) -> str:
    """The hint for an ``--app`` whose storage holds nothing yet: the user pointed at the
    right storage; it is only new."""
    return (
        f"no schema yet: run `queue-core migrate --app {app}` or start a worker "
        f"(`queue-core worker {app}`)"
    )


def check_storage_exists(url: str | None, source: str, app: str | None = None) -> None:
    """Refuse storage that a read-only command would create instead of reading.

    Args:
        url: the resolved storage URL (``None``: a Queue built on a storage object).
        source: where the URL came from, for the message (``"--url"``, ...).

        app: the ``--app`` the URL came from: the hint is then to create the schema,
            not to point elsewhere.

    Raises:
        StorageMissing: a ``sqlite:///`` file that does not exist, or ``memory://``
            (which exists only inside the process that created it).
    """
    if url is None:
        return
    masked = mask_url(url)
    if url.lower().startswith("memory:"):
        raise StorageMissing(
            f"storage {masked} ({source}) does not exist outside the process that created "
            f"it, so there is nothing to read here; {_HOW_TO_POINT} naming persistent storage"
        )
    path = sqlite_file(url)
    if path is not None and not path.exists():
        hint = _no_schema_yet(app) if app else _HOW_TO_POINT
        raise StorageMissing(
            f"storage {masked} ({source}) does not exist: there is no file {path.resolve()}; {hint}"
        )


def _refuse_lost_writes(url: str, source: str) -> None:
    raise StorageMissing(
        f"storage {mask_url(url)} ({source}) lives only inside this command's process: "
        "what the command stores would be lost when it ends; "
        f"{_HOW_TO_POINT} naming the storage your workers use"
    )


def refuse_empty_schema(queue: Queue, source: str, app: str | None = None) -> None:
    """Refuse a database that holds no queue-core schema (a PostgreSQL database, an empty
    SQLite file) instead of letting a read-only command create the tables.

    Raises:
        StorageMissing: the storage reports schema version 0; ``queue`` is closed.
    """
    storage = queue.storage()
    if isinstance(storage, SupportsSchemaVersion) and storage.schema_version() == 0:
        queue.close()
        where = mask_url(queue.url) if queue.url else type(storage).__name__
        hint = (
            _no_schema_yet(app) if app else f"{_HOW_TO_POINT} naming the storage your workers use"
        )
        raise StorageMissing(
            f"storage {where} ({source}) holds no queue-core schema, so there is nothing "
            f"to read here; {hint}"
        )


def open_queue(
    app: str | None, url: str | None, *, create: bool = True, writes: bool = False
) -> tuple[Queue, str]:
    """The queue for a non-worker command and a masked description of where it lives.

    ``--app`` wins, then ``--url``, then env ``QUEUE_CORE_URL``, then the embedded default.

    Args:
        app: the ``--app`` value.
        url: the ``--url`` value.
        create: ``False`` for read-only commands: storage that does not exist is an
            error (:class:`StorageMissing`) instead of being created empty. The
            ``memory://`` storage of an ``--app`` module that was already imported when
            the command started exists (it is this process's own) and is read.
        writes: with ``create``, the command stores something (a job, an execution, a
            pause): a ``memory://`` storage this process did not have before is refused
            (:class:`StorageMissing`), since what it stored would be lost as the command
            ends (SPEC §10: nothing is lost).
    """
    if app:
        # A module imported before this command ran (the CLI invoked in-process, as
        # click's CliRunner does, or embedded in an app) holds a Queue that already
        # lived here: its memory:// storage is the one this process has been using.
        imported_before = app.strip().partition(":")[0] in sys.modules
        queue = load_app(app)
        in_memory = queue.url is not None and queue.url.lower().startswith("memory:")
        if create and writes and in_memory and not imported_before:
            _refuse_lost_writes(queue.url or "", f"the storage of --app {app}")
        if not create and not (imported_before and in_memory):
            check_storage_exists(queue.url, f"the storage of --app {app}", app)
            refuse_empty_schema(queue, f"the storage of --app {app}", app)
        return queue, f"app {app}"
    if url is not None and not url.strip():
        raise ConfigError(
            "invalid storage URL '': it is empty", code="invalid_url", field="url", value=url
        )
    resolved = resolve_url(url)
    if create and writes and resolved.lower().startswith("memory:"):
        _refuse_lost_writes(resolved, "from --url" if url else f"from env {ENV_URL}")
    if not create:
        if url:
            source = "from --url"
        elif os.environ.get(ENV_URL):
            source = f"from env {ENV_URL}"
        else:
            source = f"the default: no --app, --url or {ENV_URL} was given"
        check_storage_exists(resolved, source)
    queue = Queue(resolved)
    if not create:
        refuse_empty_schema(queue, source)
    return queue, mask_url(resolved)
