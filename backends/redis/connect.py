"""Redis URLs -> redis-py clients (``redis://``, ``rediss://``, ``redis+cluster://``,
``rediss+cluster://``), with this backend's own options taken out of the query."""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script
from redis.connection import parse_url

from queue_core.records.errors import ConfigError
from queue_core.rules.outcomes import DEFAULT_RETENTION_MS, parse_retention
from queue_core.storage.urls import mask_url, redact

__all__ = [
    "DEFAULT_PREFIX",
    "SCHEMES",
    "Clients",
    "LazyCluster",
    "check_cluster_prefix",
    "clients_from_url",
    "wake_name",
]

WAKE_MAX_S = 10.0
"""The longest ``BLPOP`` of ``wait_for_jobs``; the wake-up client's socket timeout is 5 s
more, so a connection that stalls (open, carrying nothing) fails within 15 s instead of
blocking an idle worker forever."""

DEFAULT_PREFIX = "qc"

#: URL scheme -> (redis-py's scheme, cluster?)
SCHEMES = {
    "redis": ("redis", False),
    "rediss": ("rediss", False),
    "redis+cluster": ("redis", True),
    "rediss+cluster": ("rediss", True),
}


def wake_name() -> str:
    """A name of its own for one storage's wake-up connections (``CLIENT SETNAME``), so
    that ``interrupt_waits`` finds them in ``CLIENT LIST`` to unblock them."""
    return f"qc-wake-{os.getpid()}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Clients:
    """What a URL asks for: the clients and the backend's options."""

    client: Any  # redis.Redis[bytes] | RedisCluster[bytes]
    wake: Any  # a client without socket timeout for blocking waits, or None (built lazily)
    prefix: str
    retention_ms: int


def check_cluster_prefix(prefix: str) -> None:
    """Refuse a prefix that would break the hash tag the backend wraps it in."""
    if "{" in prefix or "}" in prefix:
        raise ConfigError(
            f"prefix {prefix!r} must not contain '{{' or '}}' on a Redis Cluster: the "
            "storage puts the prefix in hash tags itself (its keys start with "
            "'{prefix}:' or '{prefix:<queue>}:'), so that each script's keys share one slot",
            code="invalid_option",
            field="prefix",
            value=prefix,
        )


def _refused(url: str, exc: BaseException) -> ConfigError:
    """The error for a URL redis-py refused with ``exc`` (no piece of the password in it)."""
    return ConfigError(
        f"invalid redis URL {mask_url(url)!r}: {redact(str(exc), url)}",
        code="invalid_url",
        field="url",
    )


def _more_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A cluster URL that names several nodes (``host1:7000,host2:7001``): the URL with its
    first node only, and the other nodes (host, port); any other URL as it is."""
    parts = urlsplit(url)
    if not parts.scheme.lower().endswith("+cluster"):
        return url, []
    user, at, hosts = parts.netloc.rpartition("@")
    if "," not in hosts:
        return url, []
    first, *rest = hosts.split(",")
    seeds = []
    for item in rest:
        node = urlsplit(f"//{item}")
        if not node.hostname:
            raise ValueError(f"node {item!r} names no host")
        seeds.append((node.hostname, node.port or 6379))
    return urlunsplit(parts._replace(netloc=f"{user}{at}{first}")), seeds


def clients_from_url(url: str) -> Clients:
    """Parse ``url`` and build its clients (see :meth:`RedisStorage.from_url`)."""
    try:
        one, seeds = _more_seeds(url)
        parts = urlsplit(one)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(
            f"invalid redis URL {mask_url(url)!r}: its host or port does not parse (expected "
            "redis://[[user]:password@]host[:port][/db], or on a cluster "
            "redis+cluster://[[user]:password@]host[:port][,host[:port]...]/; "
            "percent-encode '/', '#', '?' and '@' in a password, e.g. '/' as %2F)",
            code="invalid_url",
            field="url",
        ) from exc
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigError(
            f"not a redis URL: {mask_url(url)!r}; expected one of "
            f"{', '.join(s + '://' for s in SCHEMES)}",
            code="invalid_url",
            field="url",
            value=parts.scheme,
        )
    driver_scheme, cluster = SCHEMES[scheme]
    prefix = DEFAULT_PREFIX
    retention = DEFAULT_RETENTION_MS
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "prefix":
            prefix = value
        elif name == "retention":
            retention = parse_retention(value)
        else:
            rest.append((name, value))
    clean = urlunsplit(parts._replace(scheme=driver_scheme, query=urlencode(rest)))
    if cluster:
        lazy = _cluster_client(url, clean, parts.path, prefix, seeds)
        return Clients(lazy, None, prefix, retention)
    db = parts.path.strip("/")
    if db and not (db.isascii() and db.isdigit()):  # redis-py would quietly use db 0
        raise ConfigError(
            f"invalid redis URL {mask_url(url)!r}: its database {db!r} is not a number "
            "(expected redis://host:port/N with N a database index, 0 to the server's "
            "`databases` - 1, or no path for database 0)",
            code="invalid_url",
            field="url",
            value=db,
        )
    try:
        client = redis.Redis.from_url(clean, socket_connect_timeout=10, socket_timeout=30)
        named = None if any(n == "client_name" for n, _ in rest) else wake_name()  # else the URL's
        wake = redis.Redis.from_url(
            clean, socket_connect_timeout=10, socket_timeout=WAKE_MAX_S + 5, socket_keepalive=True,
            client_name=named,
        )  # fmt: skip
    except (ValueError, TypeError) as exc:
        raise _refused(url, exc) from exc
    return Clients(client, wake, prefix, retention)


class LazyCluster:
    """A ``RedisCluster`` built on first use, and built again on the next use after a
    build failed.

    redis-py's cluster client reads the slot map from its seed node when it is built; a
    storage built while that node is down (a worker starting during an outage, or
    respawned while the node restarts) would otherwise fail before its first call, where
    a standalone client connects on first use and the worker's outage handling retries
    it. Every attribute but :meth:`close`, :meth:`register_script`, :attr:`ready` and
    :attr:`seed` is the built client's; a failed build raises redis-py's error,
    translated by the caller's ``translate_errors`` like any call's.
    """

    def __init__(self, build: Callable[[], RedisCluster[bytes]], seed: str) -> None:
        self._build = build
        self._client: RedisCluster[bytes] | None = None
        self._lock = threading.Lock()
        #: ``host:port`` of the URL's node, for ``repr`` before the client is built
        self.seed = seed

    @property
    def ready(self) -> RedisCluster[bytes] | None:
        """The client if it is built, else ``None`` (never connects)."""
        return self._client

    def built(self) -> RedisCluster[bytes]:
        """The cluster client, built now if it is not yet."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._build()
                client = self._client
        return client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.built(), name)

    def register_script(self, script: str | bytes) -> Script:
        """A script run through this client (never connects: the storage registers its
        scripts when it is built)."""
        return Script(self, script.encode() if isinstance(script, str) else script)

    def close(self) -> None:
        """Close the client if it was built (never connects)."""
        if self._client is not None:
            self._client.close()


def _cluster_client(
    url: str, clean: str, path: str, prefix: str, seeds: list[tuple[str, int]]
) -> LazyCluster:
    db = path.strip("/")
    if db not in ("", "0"):
        raise ConfigError(
            f"a Redis Cluster has only database 0, got {db!r} in {mask_url(url)!r}; "
            "write redis+cluster://host:port/?prefix=...",
            code="invalid_url",
            field="url",
            value=db,
        )
    check_cluster_prefix(prefix)
    parts = urlsplit(clean)
    clean = urlunsplit(parts._replace(path=""))
    try:  # an option redis-py refuses fails here, before any connection
        parse_url(clean)
    except (ValueError, TypeError) as exc:
        raise _refused(url, exc) from exc

    def build() -> RedisCluster[bytes]:  # the URL's node, then the other seeds
        nodes = [ClusterNode(host, port) for host, port in seeds]
        return RedisCluster.from_url(
            clean, startup_nodes=nodes, socket_connect_timeout=10, socket_timeout=30
        )

    return LazyCluster(build, f"{parts.hostname}:{parts.port or 6379}")
