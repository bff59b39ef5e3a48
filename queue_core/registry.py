"""URL scheme -> storage backend, resolved lazily.

In-repo backends are listed here as ``"module:Class"`` strings and imported on first
use, so ``import queue_core`` never imports a backend or its driver. Third parties add
schemes through the ``queue_core.backends`` entry-point group (the entry point names the
scheme and points at the class); a built-in scheme cannot be overridden. A backend class
is a :class:`~queue_core.storage.StorageFactory`: it provides ``from_url(url) -> Storage``.

:func:`mask_url` lives in :mod:`queue_core.urls`; it is re-exported here for code written
against earlier releases.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from typing import cast

from queue_core.config import load_config
from queue_core.errors import ConfigError
from queue_core.storage import Storage, StorageFactory
from queue_core.urls import mask_url

__all__ = [
    "DEFAULT_URL",
    "ENV_URL",
    "backend_class",
    "mask_url",
    "open_storage",
    "resolve_url",
    "supported_schemes",
]

ENV_URL = "QUEUE_CORE_URL"
DEFAULT_URL = "sqlite:///queue_core.db"

_BUILTIN: dict[str, tuple[str, str]] = {
    # scheme: (target, pip extra that brings its driver)
    "memory": ("backends.memory:MemoryStorage", ""),
    "sqlite": ("backends.sql:SQLStorage", "sql"),
    "postgresql": ("backends.sql:SQLStorage", "postgres"),
    "postgresql+psycopg": ("backends.sql:SQLStorage", "postgres"),
    "redis": ("backends.redis:RedisStorage", "redis"),
    "rediss": ("backends.redis:RedisStorage", "redis"),
    "redis+cluster": ("backends.redis:RedisStorage", "redis"),
    "rediss+cluster": ("backends.redis:RedisStorage", "redis"),
    "sqs": ("backends.sqs:SQSStorage", "aws"),
}

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


@functools.lru_cache(maxsize=1)
def _third_party() -> dict[str, str]:
    # Scanning installed distributions costs tens of ms: do it once, and only when a
    # scheme is not built in (or when the supported schemes are listed in an error).
    from importlib.metadata import entry_points

    found: dict[str, str] = {}
    for ep in entry_points(group="queue_core.backends"):
        found[ep.name] = ep.value
    return found


def supported_schemes() -> list[str]:
    """Every scheme a URL may use: the built-in ones and those registered by entry points."""
    return sorted(set(_BUILTIN) | set(_third_party()))


def resolve_url(url: str | None) -> str:
    """The URL to use: ``url``, else env ``QUEUE_CORE_URL``, else ``url`` of the
    configuration file (``queue-core.toml`` / ``[tool.queue-core]``, see
    :mod:`queue_core.config`), else the embedded default."""
    if url:
        return url
    env = os.environ.get(ENV_URL)
    if env:
        return env
    from_file = load_config().file_values.get("url")
    if from_file:
        return str(from_file)
    return DEFAULT_URL


def _scheme_of(url: str) -> str:
    m = _SCHEME_RE.match(url)
    if not m:
        raise ConfigError(
            f"invalid storage URL {mask_url(url)!r}: expected SCHEME://..., with SCHEME one of "
            f"{', '.join(supported_schemes())}",
            code="invalid_url",
            field="url",
            value=mask_url(url),
        )
    return m.group(1).lower()


def backend_class(url: str) -> StorageFactory:
    """Import and return the backend class (a :class:`StorageFactory`) for ``url``'s scheme.

    Raises:
        ConfigError: ``invalid_url`` (no ``SCHEME://``), ``unknown_scheme``,
            ``missing_driver`` (the backend's driver is not installed) or
            ``invalid_backend`` (the registered target has no ``from_url``).
    """
    scheme = _scheme_of(url)
    if scheme in _BUILTIN:
        target, extra = _BUILTIN[scheme]
    elif scheme in (third := _third_party()):
        target, extra = third[scheme], ""
    else:
        import difflib  # only for this message

        schemes = supported_schemes()
        close = difflib.get_close_matches(scheme, schemes, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"unknown storage URL scheme {scheme!r} in {mask_url(url)!r}: supported schemes are "
            f"{', '.join(schemes)}{hint}",
            code="unknown_scheme",
            field="url",
            value=scheme,
        )
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        pip = f"pip install 'queue-core[{extra}]'" if extra else "reinstall queue-core"
        raise ConfigError(
            f"the {scheme!r} backend needs a driver that is not installed ({exc.name or exc}); "
            f"install it with: {pip}",
            code="missing_driver",
            field="url",
            value=scheme,
        ) from exc
    factory = getattr(module, attr, None)
    if not callable(getattr(factory, "from_url", None)):
        raise ConfigError(
            f"the {scheme!r} backend {target!r} is not a storage factory: it must name a "
            "class with a from_url(url) classmethod (see queue_core.storage.StorageFactory)",
            code="invalid_backend",
            field="url",
            value=scheme,
        )
    return cast(StorageFactory, factory)


def open_storage(url: str | None = None) -> Storage:
    """Build the storage for ``url`` (see :func:`resolve_url` for the fallbacks)."""
    resolved = resolve_url(url)
    factory = backend_class(resolved)
    try:
        return factory.from_url(resolved)
    except ConfigError:
        raise
    except ValueError as exc:
        # a URL parser's own error ("Invalid IPv6 URL", a port that is not a number):
        # quoted only when the URL has no password, since it may quote a piece of one
        masked = mask_url(resolved)
        why = f": {exc}" if masked == resolved else ""
        raise ConfigError(
            f"invalid storage URL {masked!r}{why}", code="invalid_url", field="url", value=masked
        ) from None
