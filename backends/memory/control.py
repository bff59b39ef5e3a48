"""Enqueue-time flow control of ``memory://``: ``cancel_in_progress`` / ``latest``
(``SupportsSupersede``) and debounce (``SupportsDebounce``).

Every enqueue stores its jobs through :meth:`MemoryControl.store_job`, under the store's
lock, so the lookup of what a job supersedes (or merges into) and the store are one step.
The rules are :func:`queue_core.rules.control.supersede`,
:func:`~queue_core.rules.control.superseded_end` and
:func:`~queue_core.rules.control.debounce_ready_at`. This part keeps the active jobs of
each superseding key (in enqueue order) and the holder of each debounce key; entries of
jobs no longer active are dropped when the key is next used, and at prune.
"""

from __future__ import annotations

import dataclasses

from backends.memory.records import Job
from backends.memory.store import MemoryStore
from queue_core.records.jobs import Enqueued, JobState, NewJob, Outcome
from queue_core.rules.control import Active, debounce_ready_at, supersede, superseded_end

__all__ = ["MemoryControl"]

_SUPERSEDING = ("cancel_in_progress", "latest")
_ACTIVE = (JobState.QUEUED, JobState.RUNNING)


class MemoryControl:
    """How each new job is stored: plainly, superseding older ones, or merged into its
    debounce key's queued holder."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.keyed: dict[str, dict[str, None]] = {}
        """Superseding concurrency key -> ids of its jobs that may be active, oldest first."""
        self.debounce_holders: dict[str, str] = {}
        """Debounce key -> the id of the last job stored with it."""

    def store_job(self, spec: NewJob, t: int) -> Enqueued:
        """Store ``spec`` at ``t`` as its flow control says (lock held)."""
        store = self.store
        if spec.debounce_key is not None:
            holder = self._holder(spec.debounce_key)
            if holder is not None:
                self._merge(holder, spec, t)
                return Enqueued(holder.id, holder.state, existing=True)
            job = store.add(spec, t)
            self.debounce_holders[spec.debounce_key] = spec.id
            return Enqueued(spec.id, job.state)
        key = spec.concurrency_key
        if spec.concurrency_behavior not in _SUPERSEDING or key is None:
            return Enqueued(spec.id, store.add(spec, t).state)
        ids = self.keyed.setdefault(key, {})
        active = [Active(j.id, j.state, j.seq) for j in self._active(ids)]
        victims = supersede(spec.concurrency_behavior, active, spec.concurrency_limit or 1)
        for victim in victims:
            self._end(store.jobs[victim], spec.concurrency_behavior, t)
            ids.pop(victim, None)
        job = store.add(spec, t)
        ids[spec.id] = None
        return Enqueued(spec.id, job.state, superseded=tuple(victims))

    def _active(self, ids: dict[str, None]) -> list[Job]:
        jobs = self.store.jobs
        for stale in [i for i in ids if i not in jobs or jobs[i].state not in _ACTIVE]:
            del ids[stale]
        return [jobs[i] for i in ids]

    def _end(self, job: Job, behavior: str | None, t: int) -> None:
        """End a superseded job; a running one's attempt ends ``cancelled`` too (fenced:
        the lease token goes, so its worker's finish is refused and renew reports it lost)."""
        state, reason = superseded_end(behavior)
        if job.state is JobState.RUNNING:
            attempt = job.attempts[-1]
            attempt.outcome, attempt.reason, attempt.finished_at = Outcome.CANCELLED, reason, t
        self.store.end(job, state, reason, t)
        self.store.cond.notify_all()  # its place is free

    def _holder(self, key: str) -> Job | None:
        holder = self.store.jobs.get(self.debounce_holders.get(key, ""))
        if holder is None or holder.state is not JobState.QUEUED:
            return None
        return holder

    def _merge(self, holder: Job, spec: NewJob, t: int) -> None:
        """Last call wins: the holder takes ``spec``'s payload and a later run time."""
        assert spec.debounce_ms is not None and spec.debounce_max_ms is not None
        holder.spec = dataclasses.replace(holder.spec, payload=spec.payload)
        holder.ready_at = debounce_ready_at(
            holder.enqueued_at, t, spec.debounce_ms, spec.debounce_max_ms
        )
        self.store.enter(holder, JobState.QUEUED)  # re-indexed at its new ready time

    def forget(self, spec: NewJob) -> None:
        """A pruned job leaves the indexes (lock held)."""
        key = spec.debounce_key
        if key is not None and self.debounce_holders.get(key) == spec.id:
            del self.debounce_holders[key]
        ids = self.keyed.get(spec.concurrency_key or "")
        if ids is not None:
            ids.pop(spec.id, None)
            if not ids:
                del self.keyed[spec.concurrency_key or ""]
