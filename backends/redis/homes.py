"""Where a job's keys live on Redis: its home (docs/backends/redis.md, "Redis Cluster").

On a standalone server a storage has one home, its prefix ``P``: every key starts with it
(the layout table of the docs). On a Redis Cluster each queue has a home of its own, the
hash tag ``{P:<queue>}``, holding that queue's plain jobs with their ready sets, running
set, counts, dead letters and wake-up list; the storage's *shared* home ``{P}`` holds the
jobs whose keys span queues (a concurrency, rate or unique key, a flow step, a periodic
tick) with the flow executions (a workflow's memos, waits and events too), the limits,
the worker registry and the schedules. A home is a complete copy of the one-prefix
layout under its own tag, so every Lua script runs in one home and touches one slot, and
the queues spread over the cluster's masters.

:class:`Homes` routes: a new job to its home (:meth:`Homes.of_job`), a lease token or a
dead-letter id back to the home that issued it (both end in ``@<queue>`` when that home is
a queue's), a job id through the job directory ``P:i:<job id>`` (the job's home; none for
a job of the shared home, which is where a lookup falls back). It keeps the registries the
reads across homes need: ``{P}:hq``, the queues that have a home of their own, and in a
queue's home ``P:g:<queue>``, set once the queue has jobs in the shared home too (a claim
of the queue then asks both homes). On a standalone server every method is the identity or
does nothing: the layout is the one-prefix layout.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from backends.redis.errors import translate_errors
from queue_core.records.errors import StorageError
from queue_core.records.jobs import NewJob

__all__ = ["Homes"]

_SEP = "@"
"""Between a token or dead-letter id as its home stores it and the queue of that home."""


class _Store(Protocol):
    """What :class:`Homes` uses of its store (``RedisStore``, ``backends/redis/store.py``,
    which holds the homes: named here, not imported, so the two modules form no cycle)."""

    client: Any
    cluster: bool
    prefix: str
    key_prefix: str

    def command(self, key: str, *cmd: Any) -> Any:
        """One command about ``key``, sent to the master owning its slot."""
        ...


class Homes:
    """The homes of one store (see the module doc)."""

    def __init__(self, store: _Store) -> None:
        self.store = store
        self.cluster = store.cluster
        #: the storage's own home: the prefix, ``{P}`` on a cluster
        self.shared: str = store.key_prefix
        self._lock = threading.Lock()
        self._registered: set[str] = set()  # queues this process added to {P}:hq
        self._marked: set[str] = set()  # queues this process set P:g:<queue> of
        #: queues known to have jobs in the shared home (learned from claims, sticky)
        self.pinned: set[str] = set()
        self.adopted = False

    # ------------------------------------------------------------------ names

    def of_queue(self, queue: str) -> str:
        """The home of ``queue``'s plain jobs."""
        if not self.cluster:
            return self.shared
        return f"{{{self.store.prefix}:{queue}}}"

    def of_job(self, job: NewJob) -> str:
        """The home ``job`` is stored in: the shared one for a job whose keys span queues
        (a concurrency, rate, unique or debounce key; a superseding or ``round_robin``
        job has a concurrency key), else its queue's."""
        if not self.cluster or job.concurrency_key or job.rate_key or job.unique_key:
            return self.shared
        if job.debounce_key:
            return self.shared
        return self.of_queue(job.queue)

    def public(self, stored: str, home: str, queue: str) -> str:
        """A lease token or dead-letter id as callers see it: ``stored@<queue>`` when
        ``home`` is ``queue``'s own home on a cluster, else ``stored``."""
        if not self.cluster or home == self.shared:
            return stored
        return f"{stored}{_SEP}{queue}"

    def split(self, public: str) -> tuple[str, str]:
        """``(as stored, home)`` of a lease token or dead-letter id (:meth:`public`)."""
        if not self.cluster:
            return public, self.shared
        stored, sep, queue = public.partition(_SEP)
        return stored, (self.of_queue(queue) if sep else self.shared)

    def suffix(self, home: str, queue: str) -> str:
        """What :meth:`public` appends for ``home`` (``''`` or ``@<queue>``)."""
        return "" if not self.cluster or home == self.shared else _SEP + queue

    def key(self, home: str, kind: str, name: str) -> str:
        """``<home>:<kind>:<name>``."""
        return f"{home}:{kind}:{name}"

    def _registry(self) -> str:
        return f"{self.shared}:hq"

    def _directory(self, job_id: str) -> str:
        # no hash tag: the entries spread over the slots (a job id with braces is tagged by
        # them, which is just another slot)
        return f"{self.store.prefix}:i:{job_id}"

    # ------------------------------------------------------------------ which homes

    def all(self) -> list[str]:
        """Every home of the storage: the shared one first, then each registered queue's."""
        if not self.cluster:
            return [self.shared]
        with translate_errors("homes"):
            queues = sorted(q.decode() for q in self.store.client.smembers(self._registry()))
        return [self.shared, *dict.fromkeys(self.of_queue(q) for q in queues)]

    def groups(self, queues: Iterable[str]) -> dict[str, list[str]]:
        """The homes holding jobs of ``queues`` -> the queues to name there (a queue known to
        have jobs in the shared home is named in both)."""
        out: dict[str, list[str]] = {}
        for q in dict.fromkeys(queues):
            out.setdefault(self.of_queue(q), []).append(q)
            if self.cluster and q in self.pinned:
                out.setdefault(self.shared, []).append(q)
        return out

    def learn(self, queues: Iterable[bytes]) -> list[str]:
        """Note queues a claim reported to have jobs in the shared home; the new ones."""
        new = [q.decode() for q in queues if q.decode() not in self.pinned]
        self.pinned.update(new)
        return new

    # ------------------------------------------------------------------ registries

    def prepare(self, homes: Iterable[tuple[str, str]]) -> None:
        """Before jobs of ``(home, queue)`` pairs are stored on a cluster: register each
        queue home, and mark each queue with jobs in the shared home (``P:g:<queue>``, with
        a wake-up token the first time so that an idle worker of the queue claims again
        and learns of it). Each is written once per process."""
        if not self.cluster:
            return
        pairs = list(homes)
        with self._lock:
            register = {q for h, q in pairs if h != self.shared and q not in self._registered}
            mark = {q for h, q in pairs if h == self.shared and q not in self._marked}
        if register:
            with translate_errors("enqueue"):
                self.store.client.sadd(self._registry(), *sorted(register))
            self._registered |= register
        if mark:
            self.mark(mark)

    def mark(self, queues: Iterable[str]) -> None:
        """Set ``P:g:<queue>`` of ``queues`` (see :meth:`prepare`)."""
        names = sorted(set(queues))
        with translate_errors("enqueue"):
            pipe = self.store.client.pipeline(transaction=False)
            for q in names:
                pipe.set(self.key(self.of_queue(q), "g", q), "1", nx=True)
            fresh = [q for q, ok in zip(names, pipe.execute(), strict=True) if ok]
            if fresh:
                pipe = self.store.client.pipeline(transaction=False)
                for q in fresh:
                    pipe.lpush(self.key(self.of_queue(q), "w", q), "1")
                pipe.execute()
        self._marked.update(names)
        self.pinned.update(names)

    def adopt(self) -> None:
        """Once per process on a cluster: mark the queues that have jobs in the shared home
        (``{P}:queues``). A storage written before queues had homes of their own keeps every
        job there, so its queues are found and drained without a migration step."""
        if not self.cluster or self.adopted:
            return
        with translate_errors("reap"):
            queues = [q.decode() for q in self.store.client.smembers(f"{self.shared}:queues")]
        if queues:
            self.mark(queues)
        self.adopted = True

    # ------------------------------------------------------------------ the job directory

    def reserve(self, jobs: Sequence[tuple[str, str]]) -> list[str]:
        """Before ``(job id, home)`` pairs are stored on a cluster: point each id's
        directory entry at its home, the ids' cross-home duplicate check. A repeated id,
        or one whose entry names a home where the job exists, raises ``StorageError`` (and
        the entries made here are dropped); an entry naming a home without the job (left
        by a crash before the job was stored, or by a pruned job) is taken over. Returns
        the ids whose entries were made (for :meth:`drop` when the store fails)."""
        if not self.cluster or not jobs:
            return []
        ids = [i for i, _ in jobs]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise StorageError(f"job id {dup!r} already exists")
        client = self.store.client
        with translate_errors("enqueue"):
            if len(jobs) == 1:  # a delay(): one SET on the directory key's master
                key = self._directory(jobs[0][0])
                made = [self.store.command(key, "SET", key, jobs[0][1], "NX")]
            else:
                pipe = client.pipeline(transaction=False)
                for job_id, home in jobs:
                    pipe.set(self._directory(job_id), home, nx=True)
                made = pipe.execute()
            taken = [job_id for (job_id, _), ok in zip(jobs, made, strict=True) if not ok]
            mine = [job_id for (job_id, _), ok in zip(jobs, made, strict=True) if ok]
            if taken:
                held = self.find(taken)
                pipe = client.pipeline(transaction=False)
                for job_id, home in zip(taken, held, strict=True):
                    pipe.exists(self.key(home, "j", job_id))
                live = [job_id for job_id, n in zip(taken, pipe.execute(), strict=True) if n]
                if live:
                    self.drop(mine)
                    raise StorageError(f"job id {live[0]!r} already exists")
                home_of = dict(jobs)
                pipe = client.pipeline(transaction=False)
                for job_id in taken:
                    pipe.set(self._directory(job_id), home_of[job_id])
                pipe.execute()
        return ids

    def drop(self, ids: Sequence[str]) -> None:
        """Delete the directory entries of ``ids``."""
        if not self.cluster or not ids:
            return
        with translate_errors("enqueue"):
            pipe = self.store.client.pipeline(transaction=False)
            for job_id in ids:
                pipe.delete(self._directory(job_id))
            pipe.execute()

    def forget(self, ids: Sequence[str], home: str) -> None:
        """After ``prune`` deleted ``ids`` from ``home``: drop the entries still naming it."""
        if not self.cluster or not ids:
            return
        held = self.find(ids, fallback=None)
        self.drop([i for i, h in zip(ids, held, strict=True) if h == home])

    def find(self, ids: Sequence[str], fallback: Any = "") -> list[Any]:
        """The home of each job id: its directory entry, else ``fallback`` (by default the
        shared home, where jobs without an entry live: flow steps, jobs stored before the
        directory existed)."""
        if not self.cluster:
            return [self.shared] * len(ids)
        default = self.shared if fallback == "" else fallback
        with translate_errors("get_job"):
            pipe = self.store.client.pipeline(transaction=False)
            for job_id in ids:
                pipe.get(self._directory(job_id))
            got = pipe.execute() if ids else []
        return [default if h is None else h.decode() for h in got]
