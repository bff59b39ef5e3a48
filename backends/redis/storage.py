"""Redis storage: one job hash per job, sorted sets as indexes, one Lua script per step.

Every multi-key transition (enqueue, claim, renew, heartbeat, finish, reap, cancel,
retry_dead, purge_dead, prune) is a single Lua script from ``lua/`` run by SHA, so a crash
between two commands cannot leave a job half-moved, and concurrent callers serialize on
the server. The key layout is documented in ``docs/backends/redis.md``.

This module holds the class, its construction and call paths, control and reads; the
scripts' sources are in ``scripts.py``, an attempt's claim to reap in ``attempts.py``,
the decoding of stored records in ``records.py``, the optional abilities in the other
mixins of this package.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, cast

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script
from typing_extensions import Self

from backends.redis import connect
from backends.redis.attempts import RedisAttempts
from backends.redis.connect import DEFAULT_PREFIX, check_cluster_prefix, clients_from_url
from backends.redis.errors import translate_errors
from backends.redis.flow_records import step_replay_refused
from backends.redis.keys import Keys
from backends.redis.limits import RedisLimits
from backends.redis.pinned import Pinned, run_pinned
from backends.redis.records import (
    DEAD_FIELDS,
    STATES,
    attempt_from_json,
    dead_job,
    job_record,
    running_attempt,
)
from backends.redis.schedules import RedisSchedules
from backends.redis.scripts import SCRIPTS, load_script, opt, sources
from backends.redis.template import RedisTemplateEnqueue
from backends.redis.throughput import RedisThroughput
from backends.redis.waitclaim import RedisWaitClaim
from backends.redis.workers import RedisWorkers
from queue_core.errors import ConfigError, NotFound, StorageError
from queue_core.model import (
    AttemptRecord,
    DeadJob,
    JobRecord,
    JobState,
    NewJob,
    QueueStats,
)
from queue_core.policy.outcomes import DEFAULT_RETENTION_MS
from queue_core.storage import Storage

__all__ = ["DEFAULT_PREFIX", "DEFAULT_RETENTION_MS", "RedisStorage"]

_PURGE_BATCH = 1000
_load_script = load_script  # backends/redis/limits.py loads enqueue_plain.lua through it


class RedisStorage(
    RedisAttempts,
    RedisWaitClaim,
    RedisTemplateEnqueue,
    RedisLimits,
    RedisSchedules,
    RedisWorkers,
    RedisThroughput,
    Storage,
):
    """Storage on Redis >= 6.2 through redis-py (``redis://``, ``rediss://`` and, for a
    Redis Cluster, ``redis+cluster://`` and ``rediss+cluster://`` URLs).

    Args:
        client: a ``redis.Redis`` or a ``redis.cluster.RedisCluster``, built with
            ``decode_responses=False`` (the default). The storage uses it for every
            operation and closes it in :meth:`close`.
        prefix: the first part of every key (default ``"qc"``). Two storages with
            different prefixes share a server without seeing each other's jobs. On a
            cluster the storage wraps it in a hash tag itself (keys start with ``{qc}:``),
            so that every key of one storage lands in one slot, the one each Lua script
            runs on; ``{`` and ``}`` are then refused in the prefix.
        retention_ms: how long finished jobs are kept before :meth:`prune` deletes them
            (default 7 days). ``0`` keeps no finished job: the next :meth:`prune`
            deletes every job finished at or before its ``now``. Finished jobs also get a
            ``PEXPIRE`` of retention + 1 day as a backstop.
        wake_client: the client used for blocking waits in :meth:`wait_for_jobs`; it must
            have no socket timeout shorter than the waits (capped at ``WAKE_MAX_S``).

    Supports :class:`~queue_core.storage.SupportsWakeup` (enqueues and requeues push a
    token to a bounded per-queue list that idle workers ``BLPOP``), ``SupportsWaitClaim``
    (the ``BLPOP`` and the claim in one round trip, ``redis/waitclaim.py``), ``SupportsJobScan``,
    ``SupportsFlows`` (``redis/flows.py``) and ``SupportsSchedules`` (``redis/schedules.py``).
    """

    def __init__(
        self,
        client: redis.Redis[bytes] | RedisCluster[bytes],
        *,
        prefix: str = DEFAULT_PREFIX,
        retention_ms: int = DEFAULT_RETENTION_MS,
        wake_client: redis.Redis[bytes] | RedisCluster[bytes] | None = None,
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
        self._cluster = isinstance(client, RedisCluster)
        if self._cluster:
            check_cluster_prefix(prefix)
        self.prefix = prefix
        #: the first part of every key: ``prefix``, or ``{prefix}`` (a hash tag) on a cluster
        self.key_prefix = f"{{{prefix}}}" if self._cluster else prefix
        self.retention_ms = retention_ms
        self.keys = Keys(self.key_prefix)
        self._r: Any = cast(Any, client)
        self._wake: Any = wake_client
        self._wake_lock = threading.Lock()
        self._closed = False
        self._thread_conn = Pinned()  # backends/redis/pinned.py
        self._base = [self.key_prefix, "", str(retention_ms)]
        # The scripts derive their keys from ARGV[1]; on a cluster one key of the prefix's
        # slot goes in KEYS so that the client routes the call to the node owning it.
        self._route: list[str] = [self.keys.job("")] if self._cluster else []
        src = sources()
        s: dict[str, Script] = {name: self._r.register_script(src[name]) for name in SCRIPTS}
        self._enqueue = s["enqueue"]
        self._claim = s["claim"]
        self._renew = s["renew"]
        self._heartbeat = s["heartbeat"]
        self._finish = s["finish"]
        self._reap = s["reap"]
        self._cancel = s["cancel"]
        self._retry_dead = s["retry_dead"]
        self._purge_dead = s["purge_dead"]
        self._prune = s["prune"]
        self._list_dead = s["list_dead"]
        self._stats = s["stats"]
        self._count_pending = s["count_pending"]
        self._next_ready = s["next_ready"]
        self._list_jobs = s["list_jobs"]
        self._flow_start = s["flow_start"]
        self._flow_apply = s["flow_apply"]
        self._info_cache: dict[tuple[str, str | None, str], str] = {}

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Build from ``redis://[user:password@]host:port/db?prefix=qc&retention=7d``.

        ``rediss://`` uses TLS. ``redis+cluster://host:port/?prefix=qc`` (or
        ``rediss+cluster://``) connects to a Redis Cluster through any one of its nodes
        (redis-py's ``RedisCluster`` discovers the others); a cluster has only database 0.
        ``prefix`` and ``retention`` (read by
        :func:`~queue_core.policy.outcomes.parse_retention`: ``7d``, ``12h``, ``90s``,
        seconds, or ``0``) are this backend's options; every other query parameter goes
        to redis-py (e.g. ``socket_timeout``).

        Raises:
            ConfigError: ``invalid_url`` (not one of the four schemes, a bad port, a
                database other than 0 on a cluster, an option redis-py refuses) or
                ``invalid_option`` (a bad prefix or retention).
            StorageUnavailable: a cluster URL whose seed node cannot be reached (the
                cluster client reads the slot map when it is built).
        """
        c = clients_from_url(url)
        return cls(c.client, prefix=c.prefix, retention_ms=c.retention_ms, wake_client=c.wake)

    def __repr__(self) -> str:
        if self._cluster:
            node = self._r.get_default_node()
            where = f"cluster {node.host}:{node.port}" if node is not None else "cluster"
        else:
            kw = self._r.connection_pool.connection_kwargs
            where = f"{kw.get('host', kw.get('path', '?'))}:{kw.get('port', '')}/{kw.get('db', 0)}"
        return f"RedisStorage({where}, prefix={self.prefix!r}, retention_ms={self.retention_ms})"

    # ------------------------------------------------------------------ internals

    def _args(self, now: int | None) -> list[Any]:
        if self._closed:
            raise StorageError("RedisStorage is closed")
        if now is None:
            return list(self._base)
        return [self.key_prefix, now, self._base[2]]

    def _call(self, script: Script, args: list[Any]) -> Any:
        """Run ``script`` through the client (on a cluster, routed by ``self._route``)."""
        return script(keys=self._route, args=args)

    def _run(self, script: Script, args: list[Any]) -> Any:
        """Run ``script`` with ``args`` (no KEYS) through the lowest-overhead path.

        The hot paths call this instead of ``Script.__call__``: it sends one pre-packed
        EVALSHA on the calling thread's pinned connection (``redis/pinned.py``), keeping
        redis-py's retry policy (the connection's ``Retry``, disconnecting between tries)
        and NOSCRIPT reload, but skipping the per-call bookkeeping of
        ``Redis.execute_command``. A cluster or single-connection client goes through
        the ordinary path (the latter has its own lock).
        """
        r: Any = self._r
        if self._cluster or r.connection is not None:
            return self._call(script, args)
        return run_pinned(self._thread_conn, r.connection_pool, script, args)

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.Storage.enqueue`. A batch is all-or-nothing."""
        return self._enqueue_states(jobs, now)  # backends/redis/limits.py

    # ------------------------------------------------------------------ retention

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """See :meth:`queue_core.storage.Storage.prune`."""
        if limit <= 0:
            return 0
        args = self._args(now)
        args.append(limit)
        with translate_errors("prune"):
            return int(self._call(self._prune, args))

    # ------------------------------------------------------------------ control and reads

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """See :meth:`queue_core.storage.Storage.cancel`."""
        args = self._args(now)
        args.append(job_id)
        with translate_errors("cancel"):
            res = self._call(self._cancel, args)
        if res is None:
            raise NotFound(f"no job with id {job_id!r}")
        if res[1]:
            self._after_ends([res[1].decode()], now)
        return STATES[res[0]]

    def get_job(self, job_id: str) -> JobRecord | None:
        """See :meth:`queue_core.storage.Storage.get_job`."""
        self._args(None)
        found = self._read_jobs([job_id])
        return found[0] if found else None

    def _read_jobs(self, ids: Sequence[str]) -> list[JobRecord]:
        with translate_errors("get_job"):
            pipe = self._r.pipeline(transaction=True)
            for job_id in ids:
                pipe.hgetall(self.keys.job(job_id))
                pipe.lrange(self.keys.attempts(job_id), 0, -1)
            res = pipe.execute()
        out: list[JobRecord] = []
        for k, job_id in enumerate(ids):
            h, recs = res[2 * k], res[2 * k + 1]
            if h:
                out.append(job_record(job_id, h, recs))
        return out

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """See :meth:`queue_core.storage.Storage.list_attempts`."""
        self._args(None)
        with translate_errors("list_attempts"):
            pipe = self._r.pipeline(transaction=True)
            pipe.hmget(self.keys.job(job_id), ["st", "att", "wid", "sa"])
            pipe.lrange(self.keys.attempts(job_id), 0, -1)
            (st, att, wid, sa), recs = pipe.execute()
        out = [attempt_from_json(raw) for raw in recs]
        if st == b"running":
            out.append(running_attempt(att, wid, sa))
        return out

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.Storage.count_pending`."""
        if not queues:
            return 0
        args = self._args(now)
        args.append(horizon_ms)
        args += dict.fromkeys(queues)
        with translate_errors("count_pending"):
            return int(self._call(self._count_pending, args))

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """See :meth:`queue_core.storage.Storage.stats`."""
        args = self._args(now)
        with translate_errors("stats"):
            rows = self._call(self._stats, args)
        out: list[QueueStats] = []
        for row in rows:
            counts = {row[i].decode(): int(row[i + 1]) for i in range(2, len(row), 2)}
            queued = counts.pop("queued", 0)
            scheduled = int(row[1])
            out.append(
                QueueStats(
                    queue=row[0].decode(), ready=queued - scheduled, scheduled=scheduled, **counts
                )
            )
        out.sort(key=lambda s: s.queue)
        return out

    # ------------------------------------------------------------------ dead letters

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """See :meth:`queue_core.storage.Storage.list_dead`."""
        args = self._args(None)
        args += (max(offset, 0), limit, opt(task_name))
        with translate_errors("list_dead"):
            r = self._call(self._list_dead, args)
        return [dead_job(r[i].decode(), r[i + 1 : i + 11]) for i in range(0, len(r), 11)]

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """See :meth:`queue_core.storage.Storage.get_dead`."""
        self._args(None)
        with translate_errors("get_dead"):
            f = self._r.hmget(self.keys.dead(dead_id), DEAD_FIELDS)
        if f[0] is None:
            return None
        return dead_job(dead_id, f)

    def retry_dead(self, dead_id: str, queue: str | None = None, *, now: int | None = None) -> str:
        """See :meth:`queue_core.storage.Storage.retry_dead`."""
        new_id = os.urandom(16).hex()
        args = self._args(now)
        args += (dead_id, new_id, opt(queue))
        with translate_errors("retry_dead"):
            took = self._call(self._retry_dead, args)
        if took == -1:
            raise step_replay_refused(dead_id)
        if not took:
            raise NotFound(f"no dead-letter entry with id {dead_id!r}")
        return new_id

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """See :meth:`queue_core.storage.Storage.purge_dead`.

        Deletes in batches of 1,000 entries, each batch atomic.
        """
        args = self._args(None)
        args += (opt(task_name), opt(before), _PURGE_BATCH)
        total = 0
        with translate_errors("purge_dead"):
            while True:
                n = int(self._call(self._purge_dead, args))
                total += n
                if n < _PURGE_BATCH:
                    return total

    def close(self) -> None:
        """Close both connection pools. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with translate_errors("close"):
            self._r.close()
            if self._wake is not None:
                self._wake.close()

    # ------------------------------------------------------------------ optional abilities

    def _wake_client(self) -> Any:
        with self._wake_lock:
            if self._wake is None and self._cluster:
                nodes = [ClusterNode(n.host, n.port) for n in self._r.get_nodes()]
                kw = dict(self._r.nodes_manager.connection_kwargs)
                kw["socket_timeout"] = connect.WAKE_MAX_S + 5
                self._wake = RedisCluster(startup_nodes=nodes, **kw)
            elif self._wake is None:
                kw = dict(self._r.connection_pool.connection_kwargs)
                kw["socket_timeout"] = connect.WAKE_MAX_S + 5
                pool = redis.ConnectionPool(
                    connection_class=self._r.connection_pool.connection_class, **kw
                )
                self._wake = redis.Redis(connection_pool=pool)
            return self._wake

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a job may be ready in ``queues``.

        Returns ``True`` at once when a job is ready now; otherwise blocks with ``BLPOP``
        on the queues' wake-up lists (fed by enqueues, retries and released concurrency
        slots) until a token arrives, the earliest delayed job becomes due, or the timeout.
        Spurious wake-ups are possible.
        """
        if self._closed or not queues:
            return False
        names = list(dict.fromkeys(queues))
        args = self._args(None)
        args += names
        with translate_errors("wait_for_jobs"):
            due_ms = int(self._call(self._next_ready, args))
            if due_ms == 0:
                return True
            wait = min(timeout, connect.WAKE_MAX_S, timeout if due_ms < 0 else due_ms / 1000.0)
            if wait <= 0:
                return due_ms >= 0
            got = self._wake_client().blpop([self.keys.wake(q) for q in names], timeout=wait)
        return got is not None or (due_ms >= 0 and wait < timeout)

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """A page of jobs, newest (latest enqueued) first, optionally filtered.

        A filtered page scans jobs from the newest until the page is full: meant for
        dashboards and the CLI, not for hot paths.
        """
        args = self._args(None)
        args += ("" if state is None else state.value, opt(queue), max(offset, 0), limit)
        with translate_errors("list_jobs"):
            ids = self._call(self._list_jobs, args)
        return self._read_jobs([i.decode() for i in ids])
