"""What a worker's operator allows flow-file steps to do on that worker (SECURITY.md).

Whoever can write to the storage can start a flow execution of any definition; a
``type: script`` step names an executable and a ``type: http`` step a URL (with the
worker's secrets in its templates). So a worker runs them only where its operator allows:

- ``flow_dirs``: directories whose scripts (at any depth) it may run. The script's real
  path (symbolic links resolved) must be inside one of them. Not given: the worker's
  project -- its working directory (never the filesystem root: a service started in
  ``/`` allows nothing by it) and the directories of the flow files its application
  loaded (``queue.load_flow``) --, so a stored definition cannot make a worker run
  ``/usr/bin/id``. An empty list: no script runs.
- ``http_hosts``: hosts its http steps may reach: a name or an address (``127.0.0.1``,
  ``api.example.com``, ``::1``), ``*.example.com`` for any subdomain of ``example.com``
  (names only, never an address), ``*`` for any host. Only ``http`` and ``https`` URLs.
  Not given: any host (``*``); an empty list: no http step runs. The host is the one
  httpx connects to (the same parse); redirects are never followed.

A step refused here raises :class:`~queue_core.app.steps.failures.StepNotAllowed` before
anything is rendered or started: the attempt is recorded ``failed`` with reason
``not_allowed`` and a message naming the setting, and the job is dead-lettered
``fatal`` (another attempt on this worker would be refused the same way).

Set with ``Worker(flow_dirs=..., http_hosts=...)``, ``queue-core worker --flow-dir DIR
--http-host HOST``, env ``QUEUE_CORE_WORKER_FLOW_DIRS`` (``os.pathsep``-separated) /
``QUEUE_CORE_WORKER_HTTP_HOSTS`` (comma-separated), or ``[worker] flow_dirs`` /
``http_hosts`` of the configuration file.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from queue_core.app.steps.failures import StepNotAllowed
from queue_core.records.errors import ConfigError

__all__ = [
    "ENV_FLOW_DIRS",
    "ENV_HTTP_HOSTS",
    "StepGate",
    "check_flow_dirs",
    "check_http_hosts",
]

ENV_FLOW_DIRS: Final = "QUEUE_CORE_WORKER_FLOW_DIRS"
ENV_HTTP_HOSTS: Final = "QUEUE_CORE_WORKER_HTTP_HOSTS"
_SCHEMES: Final = ("http", "https")
_HOW_HOSTS: Final = (
    f"`queue-core worker --http-host HOST`, Worker(http_hosts=[...]), {ENV_HTTP_HOSTS} "
    "or [worker] http_hosts"
)


def _bad(field: str, value: object, expected: str) -> ConfigError:
    return ConfigError(
        f"invalid {field}: {value!r} — expected {expected}",
        code="invalid_option",
        field=field,
        value=value,
    )


def check_flow_dirs(
    value: Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None,
    *,
    field: str = "flow_dirs",
) -> tuple[Path, ...]:
    """The real paths of ``value``'s directories (a string is ``os.pathsep``-separated).

    Raises:
        ConfigError: ``invalid_option`` naming an entry that is not an existing directory.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[str | os.PathLike[str]] = [v for v in value.split(os.pathsep) if v.strip()]
    elif isinstance(value, os.PathLike):
        items = [value]
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise _bad(field, value, "a list of directories")
    out: list[Path] = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)) or not str(item).strip():
            raise _bad(field, item, "a directory (a non-empty path)")
        path = Path(item).expanduser().resolve()
        if not path.is_dir():
            raise _bad(field, str(item), f"an existing directory ({path} is not one)")
        out.append(path)
    return tuple(out)


def check_http_hosts(
    value: Sequence[str] | str | None, *, field: str = "http_hosts"
) -> tuple[str, ...]:
    """``value``'s host patterns, lower-cased (a string is comma-separated).

    Raises:
        ConfigError: ``invalid_option`` for an entry that is not a host, ``*.domain``
            or ``*``.
    """
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, Sequence):
        raise _bad(field, value, "a list of hosts")
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise _bad(field, item, "a host name, an address, '*.domain' or '*'")
        host = item.strip().lower().strip("[]")
        if not host and isinstance(value, str):
            continue
        bare = host[2:] if host.startswith("*.") else host
        if host != "*" and (not bare or "*" in bare or "/" in bare or " " in bare):
            raise _bad(field, item, "a host name, an address, '*.domain' or '*'")
        out.append(host)
    return tuple(out)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


_LOADED_DIRS: set[Path] = set()
"""Directories of the flow files this process loaded (its application's, at import)."""


def trust_flow_file(path: Path) -> None:
    """Record that this process loaded the flow file ``path``: its directory is one of
    the default ``flow_dirs`` (:func:`default_flow_dirs`)."""
    _LOADED_DIRS.add(path.parent.resolve())


def default_flow_dirs(cwd: Path | None = None) -> tuple[Path, ...]:
    """The ``flow_dirs`` of a worker whose operator named none: its working directory
    (unless it is the filesystem root) and the directories of the flow files this
    process loaded."""
    here = (cwd or Path.cwd()).resolve()
    dirs = [] if here == Path(here.anchor) else [here]
    return (*dirs, *sorted(_LOADED_DIRS - set(dirs)))


class StepGate:
    """The flow-file steps one worker may run (see the module docstring).

    Args:
        flow_dirs: the directories scripts may live in; ``None``: the defaults
            (:func:`default_flow_dirs`, read when a script step runs).
        http_hosts: the hosts http steps may reach; ``None``: any.
    """

    __slots__ = ("_flow_dirs", "http_hosts")

    def __init__(
        self, flow_dirs: tuple[Path, ...] | None = None, http_hosts: tuple[str, ...] | None = None
    ) -> None:
        self._flow_dirs = flow_dirs
        self.http_hosts: tuple[str, ...] = ("*",) if http_hosts is None else http_hosts

    @property
    def flow_dirs(self) -> tuple[Path, ...]:
        """The directories scripts may live in (the defaults when none were given)."""
        return default_flow_dirs() if self._flow_dirs is None else self._flow_dirs

    def __repr__(self) -> str:
        dirs = [str(d) for d in self.flow_dirs]
        return f"StepGate(flow_dirs={dirs!r}, http_hosts={list(self.http_hosts)!r})"

    def check_script(self, file: str) -> None:
        """Refuse ``file`` unless its real path is inside one of :attr:`flow_dirs`.

        Raises:
            StepNotAllowed: naming the file and how to allow it.
        """
        real = Path(file).resolve()
        for base in self.flow_dirs:
            if real == base or base in real.parents:
                return
        given = ", ".join(str(d) for d in self.flow_dirs) or "none"
        raise StepNotAllowed(
            f"script {file} was not run: it is outside the flow directories this worker may "
            f"run scripts from ({given}); its operator allows a directory with "
            f"`queue-core worker --flow-dir DIR`, Worker(flow_dirs=[...]), "
            f"{ENV_FLOW_DIRS} or [worker] flow_dirs"
        )

    def check_http_enabled(self) -> None:
        """Refuse every http step when no host is allowed (before rendering anything).

        Raises:
            StepNotAllowed: naming how to allow hosts.
        """
        if not self.http_hosts:
            raise StepNotAllowed(
                "http step was not run: this worker's http steps may reach no host; its "
                f"operator allows one with {_HOW_HOSTS}"
            )

    def check_http(self, scheme: str, host: str) -> None:
        """Refuse a request to ``scheme://host`` unless the scheme is http(s) and the host
        matches one of :attr:`http_hosts`.

        Raises:
            StepNotAllowed: naming the host and how to allow it.
        """
        if scheme not in _SCHEMES:
            raise StepNotAllowed(
                f"http step to a {scheme or 'missing'}:// URL was not run: only http:// and "
                "https:// URLs are requested"
            )
        name = host.lower().rstrip(".")
        for pattern in self.http_hosts:
            if pattern == "*" or pattern == name:
                return
            if pattern.startswith("*.") and name.endswith(pattern[1:]) and not _is_ip(name):
                return
        given = ", ".join(self.http_hosts) or "none"
        raise StepNotAllowed(
            f"http step to host {host!r} was not run: the hosts this worker's http steps may "
            f"reach are {given}; its operator allows one with {_HOW_HOSTS}"
        )
