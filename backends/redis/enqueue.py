"""Storing new jobs on Redis: ``enqueue``, ``enqueue_unique`` (SupportsUniqueJobs),
``enqueue_debounced`` (SupportsDebounce), ``enqueue_superseding`` (SupportsSupersede) and
``enqueue_template`` (SupportsTemplateEnqueue, ``Task.map`` and plain ``Task.delay``).

A batch whose jobs are all plain (no unique, rate or concurrency key, no replay,
heartbeat, schedule-to-start or per-call options: :func:`~backends.redis.records.is_plain`)
goes through ``enqueue_plain.lua`` (10 arguments per job instead of 25; measured in
docs/backends/redis.md), a single job through ``enqueue_one.lua`` (the same writes without
a prelude's closures). Any other batch goes through ``enqueue.lua``, which also judges
unique keys (:func:`queue_core.rules.limits.unique_holds`, mirrored in Lua), debounce keys
(a call merged into its key's queued holder,
:func:`queue_core.rules.control.debounce_ready_at`, mirrored in Lua), superseding keys
(:func:`queue_core.rules.control.supersede` and ``superseded_end``, mirrored in Lua) and
``skip`` concurrency limits in the same script as the store. A template's jobs differ only
in id, payload and lost delay, so its arguments are the template's shared values around
those three, with no :class:`~queue_core.records.jobs.NewJob` built per job.

On a Redis Cluster a batch is stored home by home (``backends/redis/homes.py``): the
jobs' ids are first entered in the job directory (the duplicate check across homes), then
each home's jobs go through one script there, atomic as above within the home.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.commands.core import Script

from backends.redis.errors import translate_errors
from backends.redis.records import enqueue_args, is_plain
from backends.redis.store import RedisStore
from queue_core.records.errors import StorageError
from queue_core.records.job_factory import expand_template
from queue_core.records.jobs import Enqueued, JobState, NewJob

__all__ = ["RedisEnqueue"]


class RedisEnqueue:
    """The enqueue operations of one store."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self._full = store.script("enqueue")
        self._plain: Script | None = None  # enqueue_plain.lua, registered on first use
        self._one: Script | None = None  # enqueue_one.lua (a batch of one), idem

    def enqueue(self, jobs: Sequence[NewJob], now: int | None) -> list[JobState]:
        """``Storage.enqueue``: plain jobs straight to the plain scripts (the single-enqueue
        hot path builds no :class:`Enqueued`), others through :meth:`enqueue_unique`."""
        if self.store.cluster:
            return [e.state for e in self._by_home(jobs, now)]
        if jobs and all(map(is_plain, jobs)):
            self._enqueue_plain(jobs, now)
            return [JobState.QUEUED] * len(jobs)
        return [e.state for e in self.enqueue_unique(jobs, now)]

    def enqueue_unique(self, jobs: Sequence[NewJob], now: int | None) -> list[Enqueued]:
        """``SupportsUniqueJobs.enqueue_unique``; a batch is all-or-nothing (on a cluster:
        within each home)."""
        if not jobs:
            return []
        if self.store.cluster:
            return self._by_home(jobs, now)
        if all(map(is_plain, jobs)):
            self._enqueue_plain(jobs, now)
            return [Enqueued(j.id, JobState.QUEUED) for j in jobs]
        return self._full_batch(jobs, now, None)

    def _full_batch(
        self, jobs: Sequence[NewJob], now: int | None, home: str | None
    ) -> list[Enqueued]:
        """``enqueue.lua`` for ``jobs`` in ``home`` (default: the storage's own)."""
        args = self.store.args(now, home)
        for j in jobs:
            args += enqueue_args(j)
        with translate_errors("enqueue"):
            res = self.store.run(self._full, args)
        if res and res[0] == b"dup":
            raise StorageError(f"job id {res[1].decode()!r} already exists")
        out: list[Enqueued] = []
        for j, x in zip(jobs, res, strict=True):
            if isinstance(x, list) and x[0] == 1:  # queued, having superseded x[1:]
                ended = tuple(i.decode() for i in x[1:])
                out.append(Enqueued(j.id, JobState.QUEUED, superseded=ended))
            elif isinstance(x, list):
                out.append(Enqueued(x[0].decode(), JobState(x[1].decode()), existing=True))
            else:
                out.append(Enqueued(j.id, JobState.QUEUED if x else JobState.SKIPPED))
        return out

    def _by_home(self, jobs: Sequence[NewJob], now: int | None) -> list[Enqueued]:
        """A batch on a Redis Cluster: the directory entries, then one script per home; the
        entries of jobs that were not stored (a held unique key, a failure) are dropped."""
        if not jobs:
            return []
        homes = self.store.homes
        pairs = [(j.id, homes.of_job(j)) for j in jobs]
        homes.prepare((h, j.queue) for (_, h), j in zip(pairs, jobs, strict=True))
        homes.reserve(pairs)
        by_home: dict[str, list[int]] = {}
        for k, (_, home) in enumerate(pairs):
            by_home.setdefault(home, []).append(k)
        out: list[Enqueued | None] = [None] * len(jobs)
        try:
            for home, idx in by_home.items():
                part = [jobs[k] for k in idx]
                if all(map(is_plain, part)):
                    self._enqueue_plain(part, now, home)
                    got = [Enqueued(j.id, JobState.QUEUED) for j in part]
                else:
                    got = self._full_batch(part, now, home)
                for k, e in zip(idx, got, strict=True):
                    out[k] = e
        finally:
            # not stored: a failed home, the homes after it, jobs whose unique key was held
            homes.drop([j.id for j, e in zip(jobs, out, strict=True) if e is None or e.existing])
        return [e for e in out if e is not None]

    def enqueue_debounced(self, jobs: Sequence[NewJob], now: int | None) -> list[Enqueued]:
        """``SupportsDebounce.enqueue_debounced``: :meth:`enqueue_unique` (``enqueue.lua``
        merges a debounced call into its key's queued holder: ``existing=True``)."""
        return self.enqueue_unique(jobs, now)

    def enqueue_superseding(self, jobs: Sequence[NewJob], now: int | None) -> list[Enqueued]:
        """``SupportsSupersede.enqueue_superseding``: :meth:`enqueue_unique` (``enqueue.lua``
        ends what a ``cancel_in_progress`` or ``latest`` job supersedes before storing it)."""
        return self.enqueue_unique(jobs, now)

    def enqueue_template(
        self, template: NewJob, jobs: Sequence[tuple[str, bytes, int]], now: int | None
    ) -> None:
        """``SupportsTemplateEnqueue.enqueue_template``: ``enqueue_plain.lua``'s 10
        arguments per job around the template's shared values (a template that is not
        plain goes through :meth:`enqueue` with the jobs it expands to)."""
        if not jobs:
            return
        if not is_plain(template):
            self.enqueue(expand_template(template, jobs), now)
            return
        t = template
        home = None
        if self.store.cluster:
            homes = self.store.homes
            home = homes.of_queue(t.queue)
            homes.prepare([(home, t.queue)])
            ids = homes.reserve([(job_id, home) for job_id, _, _ in jobs])
        head = (t.task_name, t.queue)
        mid = (t.priority, "" if t.run_at is None else t.run_at, t.delay_ms, t.max_attempts)
        tail = ("" if t.timeout_ms is None else t.timeout_ms,)
        args = self.store.args(now, home)
        for job_id, payload, lost in jobs:
            args += (job_id, *head, payload, *mid, lost, *tail)
        if home is None:
            self._run_plain(args, len(jobs))
            return
        try:
            self._run_plain(args, len(jobs))
        except BaseException:
            self.store.homes.drop(ids)
            raise

    def _enqueue_plain(
        self, jobs: Sequence[NewJob], now: int | None, home: str | None = None
    ) -> None:
        args = self.store.args(now, home)
        for j in jobs:
            run_at, timeout = j.run_at, j.timeout_ms
            args += (
                j.id,
                j.task_name,
                j.queue,
                j.payload,
                j.priority,
                "" if run_at is None else run_at,
                j.delay_ms,
                j.max_attempts,
                j.lost_delay_ms,
                "" if timeout is None else timeout,
            )
        self._run_plain(args, len(jobs))

    def _run_plain(self, args: list[Any], n: int) -> None:
        """Run ``enqueue_plain.lua`` (``enqueue_one.lua`` when ``n`` is 1) with ``args``."""
        script = self._plain if n > 1 else self._one
        if script is None:
            script = self.store.script("enqueue_plain" if n > 1 else "enqueue_one")
            if n > 1:
                self._plain = script
            else:
                self._one = script
        with translate_errors("enqueue"):
            res = self.store.run(script, args)
        if isinstance(res, list) and res and res[0] == b"dup":
            raise StorageError(f"job id {res[1].decode()!r} already exists")
