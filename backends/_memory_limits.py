"""Unique jobs and rate limits of ``memory://`` (:mod:`backends.memory`).

The rules are :func:`queue_core.policy.limits.unique_holds` and
:func:`queue_core.policy.limits.rate_grant`; this mixin keeps what they read (the holder
of each unique key, the recent claim times of each rate key) and applies them under the
storage's lock, so each decision and its write are one atomic step.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from queue_core.errors import StorageError
from queue_core.model import Enqueued, JobState, NewJob
from queue_core.policy.limits import rate_grant, unique_holds

if TYPE_CHECKING:
    from backends._memory_records import _Job

__all__ = ["MemoryLimits"]


class MemoryLimits:
    """:class:`~queue_core.storage.SupportsUniqueJobs` and
    :class:`~queue_core.storage.SupportsRateLimits` for the in-process storage."""

    _cond: threading.Condition
    _jobs: dict[str, _Job]

    def __init__(self) -> None:
        self._unique_holders: dict[str, str] = {}
        """Unique key -> the id of the last job stored with it."""
        self._rate_stamps: dict[str, list[int]] = {}
        """Rate key -> its kept claim times (at most its limit)."""

    if TYPE_CHECKING:  # provided by MemoryIndex / MemoryStorage

        def _now(self, now: int | None) -> int: ...

        def _add_job(self, spec: NewJob, t: int) -> _Job: ...

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """See :meth:`queue_core.storage.SupportsUniqueJobs.enqueue_unique`. A batch is
        all-or-nothing here."""
        with self._cond:
            t = self._now(now)
            ids = [j.id for j in jobs]
            if len(set(ids)) != len(ids) or any(i in self._jobs for i in ids):
                dup = next(i for k, i in enumerate(ids) if i in self._jobs or i in ids[:k])
                raise StorageError(f"job id {dup!r} already exists")
            holders = self._unique_holders
            out: list[Enqueued] = []
            for spec in jobs:
                holder = self._unique_holder(holders, spec.unique_key, t)
                if holder is not None:
                    out.append(Enqueued(holder.spec.id, holder.state, existing=True))
                    continue
                job = self._add_job(spec, t)
                if spec.unique_key is not None:
                    holders[spec.unique_key] = spec.id
                out.append(Enqueued(spec.id, job.state))
            if any(e.state is JobState.QUEUED and not e.existing for e in out):
                self._cond.notify_all()
            return out

    def _unique_holder(self, holders: dict[str, str], key: str | None, t: int) -> _Job | None:
        if key is None or key not in holders:
            return None
        job = self._jobs.get(holders[key])
        if job is None:  # pruned
            del holders[key]
            return None
        if unique_holds(job.state, job.enqueued_at, job.spec.unique_for_ms, t):
            return job
        return None

    def _forget_unique(self, spec: NewJob) -> None:
        """A pruned job's unique key no longer names a stored job: drop it."""
        key = spec.unique_key
        if key is not None and self._unique_holders.get(key) == spec.id:
            del self._unique_holders[key]

    def _rate_take(self, spec: NewJob, t: int) -> bool:
        """Take one claim of ``spec``'s rate key at ``t`` if the rate allows it."""
        assert spec.rate_key is not None and spec.rate_limit and spec.rate_window_ms
        stamps = self._rate_stamps
        granted, kept = rate_grant(
            stamps.get(spec.rate_key, ()), t, spec.rate_limit, spec.rate_window_ms, 1
        )
        stamps[spec.rate_key] = kept
        return granted == 1

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        """See :meth:`queue_core.storage.SupportsRateLimits.rate_usage`."""
        with self._cond:
            t = self._now(now)
            return sum(1 for s in self._rate_stamps.get(rate_key, ()) if s > t - window_ms)
