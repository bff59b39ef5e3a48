"""URL scheme -> storage backend, resolved lazily.

In-repo backends are listed here as ``"module:Class"`` strings and imported on first
use, so ``import queue_core`` never imports a backend or its driver. Third parties add
schemes through the ``queue_core.backends`` entry-point group (the entry point names the
scheme and points at the class); a built-in scheme cannot be overridden. A backend class
is a :class:`~queue_core.storage.protocol.StorageFactory`: it provides ``from_url(url) -> Storage``.

:func:`mask_url` lives in :mod:`queue_core.storage.urls`; it is re-exported here for code written
against earlier releases.
"""

from __future__ import annotations

import functools
import importlib
import re
from typing import cast

from queue_core.records.errors import ConfigError
from queue_core.storage.protocol import StorageFactory
from queue_core.storage.urls import check_sqlite_url, mask_url

__all__ = [
    "backend_class",
    "mask_url",
    "supported_schemes",
]


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
    # Entry points are read from installed metadata (a *.dist-info directory): a package
    # that is only on sys.path registers nothing.
    from importlib.metadata import entry_points

    found: dict[str, str] = {}
    for ep in entry_points(group="queue_core.backends"):
        found[ep.name] = ep.value
    return found


def _distribution_of(scheme: str) -> str | None:
    """The name of the installed distribution whose entry point registers ``scheme``."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="queue_core.backends", name=scheme):
        if ep.dist is not None:
            return str(ep.dist.metadata["Name"] or ep.dist.name)
    return None


def _missing_driver(scheme: str, extra: str | None, target: str, exc: ImportError) -> ConfigError:
    """The error for a backend module that cannot be imported, saying what to install:
    the extra of queue-core for a built-in scheme, the registering distribution (or its
    missing dependency) for a third-party one."""
    missing = exc.name or str(exc)
    module_name = target.partition(":")[0]
    if extra is not None:
        pip = (
            f"pip install 'queue-core[{extra}]'"
            if extra
            else "pip install --force-reinstall queue-core"
        )
        hint = f"install it with: {pip}"
    else:
        dist = _distribution_of(scheme)
        owner = f"distribution {dist!r}" if dist else "a third-party distribution"
        own_module = missing == module_name or module_name.startswith(f"{missing}.")
        if own_module:
            hint = (
                f"the scheme is registered by the {owner}, whose module {module_name!r} is "
                f"missing: reinstall it (pip install --force-reinstall {dist or '<distribution>'})"
            )
        else:
            hint = (
                f"the scheme is registered by the {owner}; install the package that provides "
                f"{missing!r}, which {dist or 'that distribution'} depends on"
                + (f" (pip install {dist} installs its declared dependencies)" if dist else "")
            )
    return ConfigError(
        f"the {scheme!r} backend needs a module that is not installed ({missing}); {hint}",
        code="missing_driver",
        field="url",
        value=scheme,
    )


def supported_schemes() -> list[str]:
    """Every scheme a URL may use: the built-in ones and those registered by entry points."""
    return sorted(set(_BUILTIN) | set(_third_party()))


def _scheme_of(url: str) -> str:
    m = _SCHEME_RE.match(url)
    if not m:
        check_sqlite_url(url)  # a bare ':memory:' gets the SQLite message
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
    extra: str | None
    if scheme in _BUILTIN:
        target, extra = _BUILTIN[scheme]
    elif scheme in (third := _third_party()):
        target, extra = third[scheme], None
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
        raise _missing_driver(scheme, extra, target, exc) from exc
    factory = getattr(module, attr, None)
    if not callable(getattr(factory, "from_url", None)):
        raise ConfigError(
            f"the {scheme!r} backend {target!r} is not a storage factory: it must name a "
            "class with a from_url(url) classmethod "
            "(see queue_core.storage.protocol.StorageFactory)",
            code="invalid_backend",
            field="url",
            value=scheme,
        )
    return cast(StorageFactory, factory)
