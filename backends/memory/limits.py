"""Unique jobs and rate limits of ``memory://`` (concurrency keys are the store's indexes).

The rules are :func:`queue_core.rules.limits.unique_holds` and
:func:`queue_core.rules.limits.rate_grant` (as :func:`~queue_core.rules.limits.rate_room`,
on stamps kept in order); this part keeps what they read (the holder
of each unique key, the recent claim times of each rate key) and applies them under the
store's lock, so each decision and its write are one atomic step.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from backends.memory.control import MemoryControl
from backends.memory.records import Job
from backends.memory.store import MemoryStore
from queue_core.records.errors import StorageError
from queue_core.records.jobs import Enqueued, JobState, NewJob
from queue_core.rules.limits import RATE_START_MS, RATE_UNITS, rate_room, unique_holds

__all__ = ["MemoryLimits"]


class MemoryLimits:
    """:class:`~queue_core.storage.abilities.SupportsUniqueJobs` and
    :class:`~queue_core.storage.abilities.SupportsRateLimits` (every enqueue goes through
    :meth:`enqueue_unique`, which stores each job through ``control``: also
    ``enqueue_superseding`` and ``enqueue_debounced``)."""

    def __init__(self, store: MemoryStore, control: MemoryControl) -> None:
        self.store = store
        self.control = control
        self.unique_holders: dict[str, str] = {}
        """Unique key -> the id of the last job stored with it."""
        self.rate_stamps: dict[str, list[int]] = {}
        """Rate key -> its kept claim times (at most its limit)."""

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """See :meth:`queue_core.storage.abilities.SupportsUniqueJobs.enqueue_unique`. A batch is
        all-or-nothing here."""
        store = self.store
        with store.cond:
            t = store.now(now)
            ids = [j.id for j in jobs]
            if len(set(ids)) != len(ids) or any(i in store.jobs for i in ids):
                dup = next(i for k, i in enumerate(ids) if i in store.jobs or i in ids[:k])
                raise StorageError(f"job id {dup!r} already exists")
            holders = self.unique_holders
            out: list[Enqueued] = []
            for spec in jobs:
                holder = self._holder(spec.unique_key, t)
                if holder is not None:
                    out.append(Enqueued(holder.spec.id, holder.state, existing=True))
                    continue
                got = self.control.store_job(spec, t)
                if spec.unique_key is not None and not got.existing:
                    holders[spec.unique_key] = spec.id
                out.append(got)
            if any(e.state is JobState.QUEUED for e in out):
                store.cond.notify_all()
            return out

    def _holder(self, key: str | None, t: int) -> Job | None:
        holders = self.unique_holders
        if key is None or key not in holders:
            return None
        job = self.store.jobs.get(holders[key])
        if job is None:  # pruned
            del holders[key]
            return None
        if unique_holds(job.state, job.enqueued_at, job.spec.unique_for_ms, t):
            return job
        return None

    def forget_unique(self, spec: NewJob) -> None:
        """A pruned job's unique key no longer names a stored job: drop it (lock held)."""
        key = spec.unique_key
        if key is not None and self.unique_holders.get(key) == spec.id:
            del self.unique_holders[key]

    def rate_take(self, spec: NewJob, t: int) -> int | None:
        """Take one claim of ``spec``'s rate key at ``t`` if the rate allows it: its
        ``start_by``, else ``None`` (lock held). The key's stamps are kept oldest first
        and changed in place (:func:`~queue_core.rules.limits.rate_room`)."""
        assert spec.rate_key is not None and spec.rate_limit and spec.rate_window_ms
        stamps = self.rate_stamps.setdefault(spec.rate_key, [])
        granted, expired = rate_room(stamps, t, spec.rate_limit, spec.rate_window_ms, 1)
        if expired:
            del stamps[:expired]
        if not granted:
            return None
        start_by = t + RATE_START_MS
        if stamps and stamps[-1] > start_by:  # an earlier `now` than the last claim's
            bisect.insort(stamps, start_by)
        else:
            stamps.append(start_by)
        return start_by

    def forget_rates(self, t: int) -> None:
        """Drop the keys whose every stamp is older than the longest window (an hour)
        before ``t``: keyed limits leave no key behind (lock held)."""
        cutoff = t - RATE_UNITS["h"]
        for key in [k for k, v in self.rate_stamps.items() if not v or v[-1] <= cutoff]:
            del self.rate_stamps[key]

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        """See :meth:`queue_core.storage.abilities.SupportsRateLimits.rate_usage`."""
        with self.store.cond:
            t = self.store.now(now)
            return sum(1 for s in self.rate_stamps.get(rate_key, ()) if s > t - window_ms)
