"""Unique jobs and rate limits of the SQL backend (SQLite and PostgreSQL).

The rules are :func:`queue_core.policy.limits.unique_holds` and
:func:`queue_core.policy.limits.rate_grant`; this module applies them in the transaction
of the enqueue or claim they guard:

* Unique keys: ``qc_unique`` holds the last job stored with each key. An enqueue locks its
  keys (SQLite: the write lock of ``BEGIN IMMEDIATE``; PostgreSQL: transaction advisory
  locks, keys in sorted order), reads each key's holder and its state, stores only the
  jobs whose key is free and makes them the holders -- one transaction.
* Rate limits: a rate-limited job carries ``qc_jobs.rate_key``; ``qc_rates`` holds the
  key's rate and its kept claim times. The single-statement claim leaves such jobs to
  the keyed claim (like concurrency-limited ones), which locks the key, asks
  :func:`~queue_core.policy.limits.rate_grant` and writes the kept times back in the
  claim's transaction, judged by the claim's ``now`` (PostgreSQL: the server clock when
  the caller passes none). Jobs without a rate key never reach this code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from queue_core.model import Enqueued, JobState, NewJob
from queue_core.policy.limits import rate_grant, unique_holds

if TYPE_CHECKING:
    from backends.sql.base import SQLBase

    _Base = SQLBase
else:
    _Base = object

__all__ = ["RateClaims", "SQLLimits"]


def _limited(jobs: Sequence[NewJob]) -> bool:
    return any(j.unique_key is not None or j.rate_key is not None for j in jobs)


class SQLLimits(_Base):
    """:class:`~queue_core.storage.SupportsUniqueJobs` and
    :class:`~queue_core.storage.SupportsRateLimits` for :class:`~backends.sql.SQLStorage`."""

    if TYPE_CHECKING:

        def _skip_states(
            self, cur: Any, jobs: Sequence[NewJob]
        ) -> tuple[list[JobState], list[str | None]]: ...

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """See :meth:`queue_core.storage.SupportsUniqueJobs.enqueue_unique`. A batch is
        all-or-nothing."""
        if not jobs:
            return []
        with self._tx() as cur:
            t = self._resolve_now(cur, now)
            keys = sorted({j.unique_key for j in jobs if j.unique_key is not None})
            for k in keys:  # sorted: no lock-order deadlocks
                self._try_lock_key(cur, f"unique:{k}", wait=True)
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
            states = self._store_limited(cur, stored, t) if stored else []
            return _merge(out, stored, states)

    def _unique_holder(self, cur: Any, key: str, t: int) -> Enqueued | None:
        row = cur.execute(self._q["unique_holder"], {"key": key}).fetchone()
        if row is None:
            return None
        state = row["state"] or JobState.SUCCEEDED.value  # pruned: it had finished
        if not unique_holds(state, int(row["enqueued_at"]), row["unique_for_ms"], t):
            return None
        return Enqueued(row["job_id"], JobState(state), existing=True)

    def _store_limited(self, cur: Any, jobs: list[NewJob], t: int) -> list[JobState]:
        """Insert ``jobs`` at ``t``; record their unique keys and rate keys."""
        states, reasons = self._skip_states(cur, jobs)
        self._insert(cur, jobs, states, reasons, t)
        for j in jobs:
            if j.unique_key is not None:
                cur.execute(
                    self._q["unique_set"],
                    {
                        "key": j.unique_key,
                        "job_id": j.id,
                        "now": t,
                        "unique_for_ms": j.unique_for_ms,
                    },
                )
            if j.rate_key is not None:
                cur.execute(
                    self._q["rate_define"],
                    {"key": j.rate_key, "rate_limit": j.rate_limit, "window_ms": j.rate_window_ms},
                )
                cur.execute(self._q["rate_mark"], {"key": j.rate_key, "id": j.id})
        return states

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        """See :meth:`queue_core.storage.SupportsRateLimits.rate_usage`."""
        with self._stmt() as cur:
            t = self._resolve_now(cur, now)
            row = cur.execute(self._q["rate_get"], {"key": rate_key}).fetchone()
        stamps: list[int] = json.loads(row["stamps"]) if row is not None else []
        return sum(1 for s in stamps if s > t - window_ms)


def _merge(
    out: list[Enqueued | None], stored: list[NewJob], states: list[JobState]
) -> list[Enqueued]:
    """Fill the stored jobs' places in ``out`` (in order) with their states."""
    it = iter(zip(stored, states, strict=True))
    result = []
    for e in out:
        if e is None:
            j, state = next(it)
            e = Enqueued(j.id, state)
        result.append(e)
    return result


class RateClaims:
    """The rate keys met by one keyed claim: locked, read once, written back once."""

    def __init__(self, storage: SQLBase, cur: Any) -> None:
        self._storage, self._cur = storage, cur
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
        s, cur = self._storage, self._cur
        if not s._try_lock_key(cur, f"rate:{rate_key}", wait=False):
            return None
        row = cur.execute(s._q["rate_get"], {"key": rate_key}).fetchone()
        if row is None:
            return None
        return int(row["rate_limit"]), int(row["window_ms"]), json.loads(row["stamps"])

    def save(self) -> None:
        """Write back the kept claim times of every key taken from."""
        for key, state in self._keys.items():
            if state is not None:
                self._cur.execute(
                    self._storage._q["rate_put"], {"key": key, "stamps": json.dumps(state[2])}
                )
