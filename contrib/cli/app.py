"""Finding the queue a command works on: ``--app``, ``--url``, env, embedded default."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from queue_core import ConfigError, Queue
from queue_core.registry import mask_url, resolve_url

__all__ = ["CliUsageError", "load_app", "open_queue"]

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


def load_app(spec: str) -> Queue:
    """Import ``module:attribute`` (``attribute`` may be dotted) and return that Queue.

    ``module`` alone looks for an attribute named ``queue`` (then ``app``).

    Raises:
        CliUsageError: the spec is malformed, the module or attribute is missing, or the
            object found is not a :class:`queue_core.Queue`.
    """
    module_name, sep, attribute = spec.strip().partition(":")
    if not module_name or (sep and not attribute):
        raise CliUsageError(
            f"invalid APP {spec!r}: expected module:attribute, e.g. myapp.tasks:queue"
        )
    module = _import_module(module_name, spec)
    candidates = [attribute] if attribute else list(_DEFAULT_ATTRIBUTES)
    for name in candidates:
        obj: Any = module
        try:
            for part in name.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        if not isinstance(obj, Queue):
            raise CliUsageError(
                f"invalid APP {spec!r}: {module_name}:{name} is a {type(obj).__name__}, "
                "not a queue_core.Queue"
            )
        return obj
    wanted = " or ".join(repr(c) for c in candidates)
    raise CliUsageError(f"invalid APP {spec!r}: module {module_name!r} has no attribute {wanted}")


def open_queue(app: str | None, url: str | None) -> tuple[Queue, str]:
    """The queue for a non-worker command and a masked description of where it lives.

    ``--app`` wins, then ``--url``, then env ``QUEUE_CORE_URL``, then the embedded default.
    """
    if app:
        return load_app(app), f"app {app}"
    if url is not None and not url.strip():
        raise ConfigError(
            "invalid storage URL '': it is empty", code="invalid_url", field="url", value=url
        )
    resolved = resolve_url(url)
    return Queue(resolved), mask_url(resolved)
