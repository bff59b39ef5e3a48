"""Unique jobs, rate limits and concurrency counts of the SQL backend.

The rules are :func:`queue_core.rules.limits.unique_holds` and
:func:`queue_core.rules.limits.rate_grant`; this module applies them in the transaction
of the enqueue or claim they guard:

* Unique keys: ``qc_unique`` holds the last job stored with each key. An enqueue locks its
  keys (SQLite: the write lock of ``BEGIN IMMEDIATE``; PostgreSQL: transaction advisory
  locks, keys in sorted order), reads each key's holder and its state, stores only the
  jobs whose key is free and makes them the holders -- one transaction.
* Rate limits: a rate-limited job carries ``qc_jobs.rate_key``; ``qc_rates`` holds the
  key's rate and its kept claim times. The single-statement claim leaves such jobs to
  the keyed claim (like concurrency-limited ones), which locks the key, asks
  :func:`~queue_core.rules.limits.rate_grant` and writes the kept times back in the
  claim's transaction (:class:`RateClaims`), judged by the claim's ``now``.
* Concurrency ``skip``: a job over its key's limit of active (queued + running) jobs is
  stored ``skipped`` (:meth:`Limits.skip_states`, counted under the keys' locks).
* Flow control at enqueue (SPEC §13): the same transaction stores a debounced call
  through :class:`~backends.sql.debounce.Debounces` (merged into its key's queued holder)
  and a ``cancel_in_progress`` / ``latest`` job through
  :class:`~backends.sql.supersede.Supersedes` (older jobs of its key ended first), job by
  job, so that an earlier job of a batch counts against later ones. What such a job
  carries beyond the plain insert's columns is written by :func:`mark`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from backends.sql.debounce import Debounces
from backends.sql.store import Store
from backends.sql.supersede import SUPERSEDING, Supersedes
from queue_core.records.jobs import Enqueued, JobState, NewJob, Reason
from queue_core.rules.limits import rate_grant, unique_holds

__all__ = ["Limits", "RateClaims", "limited", "mark"]


def limited(jobs: Sequence[NewJob]) -> bool:
    """Whether a batch holds a unique, rate-limited or flow-controlled job
    (:meth:`Limits.enqueue_unique`)."""
    return any(
        j.unique_key is not None
        or j.rate_key is not None
        or j.concurrency_behavior is not None
        or j.debounce_key is not None
        for j in jobs
    )


def _controlled(j: NewJob) -> bool:
    return j.debounce_key is not None or (
        j.concurrency_behavior in SUPERSEDING and j.concurrency_key is not None
    )


def mark(cur: Any, store: Store, job: NewJob) -> None:
    """Write what ``job`` (just inserted) carries beyond the plain insert's columns: its
    rate key, concurrency behaviour and group, debounce key and windows; a round-robin
    job's key joins its group's turns."""
    if job.rate_key is None and job.concurrency_behavior is None and job.debounce_key is None:
        return
    params = {"id": job.id, "rate_key": job.rate_key, "behavior": job.concurrency_behavior,
              "grp": job.concurrency_group, "debounce_key": job.debounce_key,
              "debounce_ms": job.debounce_ms, "debounce_max_ms": job.debounce_max_ms}  # fmt: skip
    cur.execute(store.q["job_mark"], params)
    group, key = job.concurrency_group, job.concurrency_key
    if job.concurrency_behavior == "round_robin" and group is not None and key is not None:
        params = {"grp": group, "queue": job.queue, "key": key}
        cur.execute(store.q["rr_join"], params)  # its key takes turns (backends/sql/roundrobin.py)


def _lock_names(jobs: Sequence[NewJob]) -> list[str]:
    names = {f"unique:{j.unique_key}" for j in jobs if j.unique_key is not None}
    names.update(f"debounce:{j.debounce_key}" for j in jobs if j.debounce_key is not None)
    names.update(f"sup:{j.concurrency_key}" for j in jobs if _controlled(j) and
                 j.debounce_key is None)  # fmt: skip
    return sorted(names)


class Limits:
    """:class:`~queue_core.storage.abilities.SupportsUniqueJobs`,
    :class:`~queue_core.storage.abilities.SupportsRateLimits` and the concurrency counts;
    every limited enqueue stores its jobs through ``debounce`` and ``supersede``
    (``enqueue_debounced`` and ``enqueue_superseding`` are :meth:`enqueue_unique`)."""

    def __init__(self, store: Store, debounce: Debounces, supersede: Supersedes) -> None:
        self.store = store
        self.debounce = debounce
        self.supersede = supersede

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """See :meth:`~queue_core.storage.abilities.SupportsUniqueJobs.enqueue_unique`. A
        batch is all-or-nothing."""
        if not jobs:
            return []
        store = self.store
        with store.tx() as cur:
            t = store.resolve_now(cur, now)
            store.lock_keys(cur, _lock_names(jobs))
            out: list[Enqueued | None] = []
            stored: list[NewJob] = []
            batch: dict[str, int] = {}  # key -> index in `stored` of this batch's holder
            for j in jobs:
                key = j.unique_key
                if key is not None and key in batch:
                    out.append(Enqueued(stored[batch[key]].id, JobState.QUEUED, existing=True))
                    continue
                held = self._unique_holder(cur, key, t) if key is not None else None
                if held is not None:
                    out.append(held)
                    continue
                if key is not None:
                    batch[key] = len(stored)
                stored.append(j)
                out.append(None)
            got = self._store_limited(cur, stored, t) if stored else []
        it = iter(got)
        return [e if e is not None else next(it) for e in out]

    def _unique_holder(self, cur: Any, key: str, t: int) -> Enqueued | None:
        row = cur.execute(self.store.q["unique_holder"], {"key": key}).fetchone()
        if row is None:
            return None
        state = row["state"] or JobState.SUCCEEDED.value  # pruned: it had finished
        if not unique_holds(state, int(row["enqueued_at"]), row["unique_for_ms"], t):
            return None
        return Enqueued(row["job_id"], JobState(state), existing=True)

    def _store_limited(self, cur: Any, jobs: list[NewJob], t: int) -> list[Enqueued]:
        """Store ``jobs`` at ``t`` (a debounced call may merge instead, a superseding job
        ends older ones first); record their unique keys, rate keys and marks."""
        q, d = self.store.q, self.store.dialect
        states, reasons = self.skip_states(cur, jobs)
        if not any(_controlled(j) for j in jobs):
            d.insert(cur, jobs, states, reasons, t)
            out = [Enqueued(j.id, s) for j, s in zip(jobs, states, strict=True)]
            stored = list(jobs)
        else:
            out, stored = [], []
            for j, state, reason in zip(jobs, states, reasons, strict=True):
                superseded: tuple[str, ...] = ()
                if j.debounce_key is not None:
                    merged = self.debounce.merge(cur, j, t)
                    if merged is not None:
                        out.append(merged)
                        continue
                elif _controlled(j):
                    superseded = self.supersede.end_older(cur, j, t)
                d.insert(cur, [j], [state], [reason], t)
                if j.debounce_key is not None:
                    self.debounce.hold(cur, j)
                out.append(Enqueued(j.id, state, superseded=superseded))
                stored.append(j)
        for j in stored:
            if j.unique_key is not None:
                params = {"key": j.unique_key, "job_id": j.id, "now": t,
                          "unique_for_ms": j.unique_for_ms}  # fmt: skip
                cur.execute(q["unique_set"], params)
            if j.rate_key is not None:
                params = {"key": j.rate_key, "rate_limit": j.rate_limit,
                          "window_ms": j.rate_window_ms}  # fmt: skip
                cur.execute(q["rate_define"], params)
            mark(cur, self.store, j)
        return out

    def skip_states(
        self, cur: Any, jobs: Sequence[NewJob]
    ) -> tuple[list[JobState], list[str | None]]:
        """The state and reason of each job of a batch: the active jobs of each ``skip``
        key are counted under the keys' locks; a job over its limit is stored ``skipped``."""
        keys = {
            j.concurrency_key
            for j in jobs
            if j.concurrency_skip and j.concurrency_key is not None
            and j.concurrency_limit is not None
        }  # fmt: skip
        states: list[JobState] = [JobState.QUEUED] * len(jobs)
        reasons: list[str | None] = [None] * len(jobs)
        if not keys:
            return states, reasons
        self.store.lock_keys(cur, list(keys))
        cur.execute(self.store.q["count_active"], {"keys": self.store.array(sorted(keys))})
        active = {r["key"]: int(r["n"]) for r in cur.fetchall()}
        for i, j in enumerate(jobs):
            key = j.concurrency_key
            if key is None:
                continue
            if (
                j.concurrency_skip
                and j.concurrency_limit is not None
                and active.get(key, 0) >= j.concurrency_limit
            ):
                states[i], reasons[i] = JobState.SKIPPED, Reason.CONCURRENCY_LIMIT.value
            else:
                active[key] = active.get(key, 0) + 1
        return states, reasons

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        """See :meth:`~queue_core.storage.abilities.SupportsRateLimits.rate_usage`."""
        with self.store.stmt() as cur:
            t = self.store.resolve_now(cur, now)
            row = cur.execute(self.store.q["rate_get"], {"key": rate_key}).fetchone()
        stamps: list[int] = json.loads(row["stamps"]) if row is not None else []
        return sum(1 for s in stamps if s > t - window_ms)


class RateClaims:
    """The rate keys met by one keyed claim: locked, read once, written back once."""

    def __init__(self, store: Store, cur: Any) -> None:
        self._store, self._cur = store, cur
        self._keys: dict[str, tuple[int, int, list[int]] | None] = {}

    def take(self, rate_key: str | None, now: int) -> bool:
        """Take one claim of ``rate_key`` at ``now`` if its rate allows (``None``: yes)."""
        if rate_key is None:
            return True
        if rate_key not in self._keys:
            self._keys[rate_key] = self._load(rate_key)
        state = self._keys[rate_key]
        if state is None:  # another claim holds the key this round: full
            return False
        limit, window, stamps = state
        granted, kept = rate_grant(stamps, now, limit, window, 1)
        self._keys[rate_key] = (limit, window, kept)
        return granted == 1

    def _load(self, rate_key: str) -> tuple[int, int, list[int]] | None:
        if not self._store.lock_key(self._cur, f"rate:{rate_key}", wait=False):
            return None
        row = self._cur.execute(self._store.q["rate_get"], {"key": rate_key}).fetchone()
        if row is None:
            return None
        return int(row["rate_limit"]), int(row["window_ms"]), json.loads(row["stamps"])

    def save(self) -> None:
        """Write back the kept claim times of every key taken from."""
        for key, state in self._keys.items():
            if state is not None:
                params = {"key": key, "stamps": json.dumps(state[2])}
                self._cur.execute(self._store.q["rate_put"], params)
