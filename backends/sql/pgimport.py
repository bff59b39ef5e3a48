"""``import psycopg`` without its two ``importlib.metadata`` look-ups.

psycopg's ``psycopg.version`` and ``psycopg_binary.version`` modules each set only
``__version__``, from ``importlib.metadata.version()``: importing ``importlib.metadata``
(``email``, ``zipfile``, ...) and scanning ``sys.path`` for the two distributions is a
tenth of a PostgreSQL worker's start-up. :func:`import_psycopg` reads the same versions
from the ``<name>-<version>.dist-info`` directory installed beside each package (what the
look-up would find for that install) and registers the two modules, already imported, with
them; psycopg then imports as usual. Where no single such directory is found (an editable
or unusual install), nothing is registered for that package and psycopg looks its version
up itself.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

__all__ = ["import_psycopg", "installed_version"]

# (package, distribution name as a wheel's dist-info directory spells it)
_PACKAGES = (("psycopg", "psycopg"), ("psycopg_binary", "psycopg_binary"))


def installed_version(package: str, dist: str) -> str | None:
    """The version in the name of the one ``<dist>-<version>.dist-info`` directory beside
    the top-level ``package`` (not imported), or ``None`` when there is not exactly one."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    parent = os.path.dirname(list(spec.submodule_search_locations)[0])
    try:
        names = os.listdir(parent)
    except OSError:
        return None
    prefix, suffix = f"{dist}-", ".dist-info"
    found = [
        n[len(prefix) : -len(suffix)] for n in names if n.startswith(prefix) and n.endswith(suffix)
    ]
    if len(found) != 1 or not found[0] or "-" in found[0]:
        return None
    return found[0]


def _preset_versions() -> list[str]:
    """Register ``<package>.version`` modules that psycopg would build with importlib.metadata;
    the names registered."""
    registered = []
    for package, dist in _PACKAGES:
        name = f"{package}.version"
        version = None if name in sys.modules else installed_version(package, dist)
        if version is None:
            continue
        module = ModuleType(name, f"{dist} distribution version (from its dist-info directory)")
        module.__version__ = version  # type: ignore[attr-defined]
        sys.modules[name] = module
        registered.append(name)
    return registered


def import_psycopg() -> ModuleType:
    """``import psycopg``, with the versions preset when psycopg is not imported yet."""
    if "psycopg" in sys.modules:
        return sys.modules["psycopg"]
    registered = _preset_versions()
    import psycopg

    for name in registered:  # the attribute the import system sets on a package
        package, _, attr = name.rpartition(".")
        if package in sys.modules:
            setattr(sys.modules[package], attr, sys.modules[name])
        else:  # psycopg used another libpq wrapper: leave no trace of this one
            del sys.modules[name]
    return psycopg
