"""The Redis store every part of :class:`~backends.redis.RedisStorage` holds: the clients,
the key names, the homes (``homes.py``), the clock (Redis ``TIME``), the Lua scripts and
the two ways to run them.

Every script takes ``ARGV[1..3]`` = key prefix of the home it runs in (the storage's
prefix on a standalone server; a hash tag on a cluster, ``homes.py``), now (``''``: the
script reads ``TIME``), retention (:meth:`RedisStore.args`) and derives its keys from that
prefix, so a script call names no key; on a cluster the home's tag goes in ``KEYS`` so
that the client routes the call to the node owning its slot (:meth:`RedisStore.call`).
The hot paths use :meth:`RedisStore.run`: one pre-packed ``EVALSHA`` on the calling
thread's pinned connection (``backends/redis/pinned.py``). redis-py errors are translated
by ``backends/redis/errors.py`` around each call, in the parts.
"""

from __future__ import annotations

import threading
from typing import Any, cast

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script
from redis.exceptions import AskError, MovedError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from backends.redis import connect
from backends.redis.connect import LazyCluster, check_cluster_prefix
from backends.redis.errors import translate_errors
from backends.redis.homes import Homes
from backends.redis.keys import Keys
from backends.redis.pinned import Pinned, command_pinned, run_pinned
from backends.redis.scripts import load_script
from queue_core.records.errors import ConfigError, StorageError

__all__ = ["RedisStore"]


class RedisStore:
    """One storage's connection to Redis (see the module doc); built by ``RedisStorage``."""

    def __init__(
        self,
        client: redis.Redis[bytes] | RedisCluster[bytes],
        *,
        prefix: str,
        retention_ms: int,
        wake_client: redis.Redis[bytes] | RedisCluster[bytes] | None,
    ) -> None:
        if retention_ms < 0:
            raise ConfigError(
                f"retention_ms must be >= 0, got {retention_ms!r}",
                code="invalid_option",
                field="retention_ms",
                value=retention_ms,
            )
        if not prefix:
            raise ConfigError(
                "prefix must not be empty", code="invalid_option", field="prefix", value=prefix
            )
        self.cluster = isinstance(client, (RedisCluster, LazyCluster))
        if self.cluster:
            check_cluster_prefix(prefix)
        self.prefix = prefix
        #: the first part of every key: ``prefix``, or ``{prefix}`` (a hash tag) on a cluster
        self.key_prefix = f"{{{prefix}}}" if self.cluster else prefix
        self.retention_ms = retention_ms
        self.keys = Keys(self.key_prefix)
        self.client: Any = cast(Any, client)
        self.closed = False
        #: the calling thread's pinned connection of the hot paths
        self.pinned = Pinned()
        self._wake: Any = wake_client
        self._wake_lock = threading.Lock()
        self._base = [self.key_prefix, "", str(retention_ms)]
        #: where each job's keys live (one home on a standalone server)
        self.homes = Homes(self)
        # a cluster or single-connection client goes through Script.__call__
        self._pinned_pool = (
            None if self.cluster or self.client.connection else self.client.connection_pool
        )
        self._scripts: dict[str, Script] = {}
        # on a cluster: home -> (pinned connections, pool) of the master owning its slot
        self._routes: dict[int, tuple[Pinned, Any]] = {}
        self._node_pinned: dict[str, Pinned] = {}

    def script(self, name: str) -> Script:
        """``lua/<name>.lua`` with its prelude, registered on first use."""
        got = self._scripts.get(name)
        if got is None:
            got = self._scripts[name] = self.register(load_script(name, self.cluster))
        return got

    def register(self, text: str) -> Script:
        """A script from its full text (run by SHA; reloaded on ``NOSCRIPT``)."""
        return cast(Script, self.client.register_script(text))

    def args(self, now: int | None, home: str | None = None) -> list[Any]:
        """A script's first three arguments: the prefix of ``home`` (default: the storage's
        own), ``now`` (``''``: Redis ``TIME``) and the retention; refused once the storage
        is closed."""
        if self.closed:
            raise StorageError("RedisStorage is closed")
        if now is None and home is None:
            return list(self._base)
        return [
            self.key_prefix if home is None else home,
            "" if now is None else now,
            self._base[2],
        ]

    def call(self, script: Script, args: list[Any]) -> Any:
        """Run ``script`` through the client (on a cluster, routed to the slot of the home
        ``args`` start with)."""
        return script(keys=[args[0]] if self.cluster else [], args=args)

    def run(self, script: Script, args: list[Any]) -> Any:
        """Run ``script`` with ``args`` through the lowest-overhead path.

        The hot paths call this instead of :meth:`call`: it sends one pre-packed EVALSHA
        on the calling thread's pinned connection, keeping redis-py's retry policy (the
        connection's ``Retry``, disconnecting between tries) and NOSCRIPT reload, but
        skipping the per-call bookkeeping of ``Redis.execute_command``. On a cluster the
        connection is one of the master owning the home's slot, and the home is named in
        ``KEYS``: a master that no longer owns it answers ``MOVED`` before running
        anything, and the call goes through the cluster client, which follows it.
        """
        pool = self._pinned_pool
        if pool is not None:
            return run_pinned(self.pinned, pool, script, args)
        if not self.cluster:
            return script(keys=[], args=args)
        home = args[0]
        slot = self.client.keyslot(home)
        local, pool = self._route(slot)
        try:
            return run_pinned(local, pool, script, args, (home,))
        except (MovedError, AskError):  # the slot moved: the client follows and re-reads the map
            self._routes.pop(slot, None)
            return script(keys=[home], args=args)
        except (RedisConnectionError, RedisTimeoutError):
            self._routes.pop(slot, None)  # the node may be gone: look it up again next time
            raise

    def command(self, key: str, *cmd: Any) -> Any:
        """One command about ``key`` (its first argument after the name): on a cluster on
        the pinned connection of the master owning the key's slot, like :meth:`run`."""
        if not self.cluster:
            return self.client.execute_command(*cmd)
        slot = self.client.keyslot(key)
        local, pool = self._route(slot)
        try:
            return command_pinned(local, pool, cmd)
        except (MovedError, AskError):
            self._routes.pop(slot, None)
            return self.client.execute_command(*cmd)
        except (RedisConnectionError, RedisTimeoutError):
            self._routes.pop(slot, None)
            raise

    def _route(self, slot: int) -> tuple[Pinned, Any]:
        """On a cluster: the pinned connections and the pool of the master owning ``slot``
        (as the client's slot map says; a ``MOVED`` reply corrects it)."""
        got = self._routes.get(slot)
        if got is None:
            node = self.client.nodes_manager.get_node_from_slot(slot)
            pool = self.client.get_redis_connection(node).connection_pool
            with self._wake_lock:
                local = self._node_pinned.setdefault(node.name, Pinned())
            got = self._routes[slot] = (local, pool)
        return got

    def now(self, now: int | None) -> int:
        """``now``, or the server's clock (the scripts' clock when ``now`` is omitted)."""
        if now is not None:
            return now
        if self.closed:
            raise StorageError("RedisStorage is closed")
        with translate_errors("time"):
            sec, usec = self.client.time()
        return int(sec) * 1000 + int(usec) // 1000

    def key(self, kind: str, name: str, home: str | None = None) -> str:
        """``P:<kind>:<name>`` (the layout of ``docs/backends/redis.md``) in ``home``
        (default: the storage's own)."""
        return f"{self.key_prefix if home is None else home}:{kind}:{name}"

    def wake_client(self) -> Any:
        """The client of blocking waits (built on first use: no socket timeout shorter
        than a wait, ``connect.WAKE_MAX_S``)."""
        with self._wake_lock:
            if self._wake is None and self.cluster:
                nodes = [ClusterNode(n.host, n.port) for n in self.client.get_nodes()]
                kw = dict(self.client.nodes_manager.connection_kwargs)
                kw["socket_timeout"] = connect.WAKE_MAX_S + 5
                kw.setdefault("client_name", connect.wake_name())
                self._wake = RedisCluster(startup_nodes=nodes, **kw)
            elif self._wake is None:
                kw = dict(self.client.connection_pool.connection_kwargs)
                kw["socket_timeout"] = connect.WAKE_MAX_S + 5
                kw.setdefault("client_name", connect.wake_name())
                pool = redis.ConnectionPool(
                    connection_class=self.client.connection_pool.connection_class, **kw
                )
                self._wake = redis.Redis(connection_pool=pool)
            return self._wake

    def unblock_waits(self) -> None:
        """``CLIENT UNBLOCK`` every connection of the wake-up client (found by its
        ``CLIENT SETNAME`` in ``CLIENT LIST``, on every master of a cluster): a blocked
        ``BLPOP`` returns as if timed out. Nothing when no wake-up client was built yet or
        it has no name (one the caller gave)."""
        with self._wake_lock:
            wake = self._wake
        if wake is None or self.closed:
            return
        if self.cluster:
            cluster = self.client.ready if isinstance(self.client, LazyCluster) else self.client
            if cluster is None:
                return
            name = wake.nodes_manager.connection_kwargs.get("client_name")
            nodes = [cluster.get_redis_connection(n) for n in cluster.get_primaries()]
        else:
            name = wake.connection_pool.connection_kwargs.get("client_name")
            nodes = [self.client]
        if not name:
            return
        for node in nodes:
            for entry in node.client_list():
                if entry.get("name") == name:
                    node.client_unblock(int(entry["id"]))

    def where(self) -> str:
        """The server, for ``repr``."""
        if isinstance(self.client, LazyCluster) and self.client.ready is None:
            return f"cluster {self.client.seed}"  # not connected yet: the URL's node
        if self.cluster:
            node = self.client.get_default_node()
            return f"cluster {node.host}:{node.port}" if node is not None else "cluster"
        kw = self.client.connection_pool.connection_kwargs
        return f"{kw.get('host', kw.get('path', '?'))}:{kw.get('port', '')}/{kw.get('db', 0)}"

    def close(self) -> None:
        """Close both clients. Idempotent."""
        if self.closed:
            return
        self.closed = True
        with translate_errors("close"):
            self.client.close()
            if self._wake is not None:
                self._wake.close()
