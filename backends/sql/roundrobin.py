"""Round-robin claims of the SQL backend (``SupportsRoundRobin``): claims rotate over a
group's keys.

Round-robin jobs (``qc_jobs.concurrency_behavior = 'round_robin'``, schema version 11)
leave the single-statement claim for the keyed claim (:mod:`backends.sql.claiming`).
Whenever the keyed claim meets such a job, it asks this part for its group's next turn
(:meth:`Turns.take`), and claims that job in its place: the best ready job of the key
that comes first in :func:`queue_core.rules.control.round_robin_order` among the group's
keys below their limit.

``qc_rr`` holds a row per key of a group (and queue) with queued or running jobs: its
served mark (the group's claim counter at the key's last claim; ``0`` = never served;
the counter itself is the row with ``key = ''``). Storing a round-robin job adds its
key's row (:func:`backends.sql.limits.mark`). A claim reads the group's marks once, and
a key's best ready jobs (``ix_qc_jobs_rr``, as many as the claim may take) and running
count only when it considers the key: served marks differ, so apart from never-served
keys (compared by their best job) the least recently served key with a ready job below
its limit is the turn, whatever the backlog. The marks served are written back in the
claim's transaction (:meth:`Turns.save`); a key left without queued or running jobs
loses its row, which keeps ``qc_rr`` bounded.

Atomicity: every claim that takes turns holds the ``rr`` lock first (SQLite: the write
lock; PostgreSQL: a transaction advisory lock, waited for), so turns, counts and marks are
read and written by one claim at a time; a turn's row is locked ``SKIP LOCKED`` (a row
another claim holds is passed over), so no claim waits for a row while holding it.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from backends.sql.pauses import PauseSet
from backends.sql.records import Row
from backends.sql.store import Store
from queue_core.rules.control import round_robin_order

__all__ = ["ROUND_ROBIN", "RoundRobin", "Turns"]

ROUND_ROBIN = "round_robin"


def _order(r: Row) -> tuple[int, int, int]:
    return (-int(r["priority"]), int(r["run_at"]), int(r["seq"]))


class _Group:
    """One group's state in one queue, as one claim reads and changes it: each key's
    served mark (``0`` = never served), and, read when the key is first considered, its
    best ready jobs and running count."""

    def __init__(self, turns: Turns, queue: str, group: str, marks: dict[str, int]) -> None:
        self.turns, self.queue, self.group = turns, queue, group
        self.counter = marks.pop("", 0)
        self.served = marks
        self.jobs: dict[str, deque[Row]] = {}
        self.running: dict[str, int] = {}
        self.dirty: set[str] = set()
        self.gone: set[str] = set()

    def _open(self, key: str) -> bool:
        """Whether ``key`` has a ready job and is below its limit (read on first use)."""
        if key not in self.jobs:
            self.jobs[key] = deque(self.turns.ready(self.queue, self.group, key))
        rows = self.jobs[key]
        if not rows:
            self.gone.add(key)
            return False
        limit = rows[0]["concurrency_limit"]
        if limit is None:
            return True
        if key not in self.running:
            self.running[key] = self.turns.running(key)
        return bool(self.running[key] < limit)

    def next_key(self) -> str | None:
        """The key served next (:func:`~queue_core.rules.control.round_robin_order`):
        never-served keys first, by their best job; then the least recently served.
        Marks of served keys differ, so only never-served keys need their best job read."""
        fresh = [k for k, n in self.served.items() if n == 0 and self._open(k)]
        if fresh:
            heads = sorted(fresh, key=lambda k: _order(self.jobs[k][0]))
            return round_robin_order({k: (0, i) for i, k in enumerate(heads)})[0]
        served = sorted((n, k) for k, n in self.served.items() if n > 0)
        for _, key in served:
            if self._open(key):
                return key
        return None

    def serve(self, key: str) -> None:
        self.running[key] = self.running.get(key, 0) + 1
        self.counter += 1
        self.served[key] = self.counter
        self.dirty.add(key)


class Turns:
    """The round-robin turns of one keyed claim (in its transaction ``cur``)."""

    def __init__(self, store: Store, cur: Any, limit: int, paused: PauseSet | None) -> None:
        self._store, self._cur, self._limit, self._paused = store, cur, limit, paused
        self._groups: dict[tuple[str, str], _Group] = {}
        self._locked = False
        self._now = 0

    def take(self, met: Row) -> Row | None:
        """The next turn of ``met``'s group (a round-robin job the claim met), claimed (its
        row locked, its key served), or ``None`` when no key of the group can be served."""
        queue, group = met["queue"], met["concurrency_group"]
        self._now = int(met["now_ms"])
        g = self._groups.get((queue, group))
        if g is None:
            g = self._groups[(queue, group)] = self._load(queue, group)
        g.served.setdefault(met["concurrency_key"], 0)  # a key with no mark yet
        lock = self._store.q["rr_lock_row"]
        while True:
            key = g.next_key()
            if key is None:
                return None
            row = g.jobs[key].popleft()
            if self._cur.execute(lock, {"seq": row["seq"]}).fetchone() is not None:
                g.serve(key)
                return row

    def _load(self, queue: str, group: str) -> _Group:
        store, cur = self._store, self._cur
        if not self._locked:
            store.lock_key(cur, "round_robin:", wait=True)
            self._locked = True
        rows = cur.execute(store.q["rr_marks"], {"grp": group, "queue": queue}).fetchall()
        return _Group(self, queue, group, {r["key"]: int(r["served"]) for r in rows})

    def ready(self, queue: str, group: str, key: str) -> list[Row]:
        """The best ready jobs of one key (as many as the claim may take), claim order."""
        store = self._store
        where = "concurrency_key = :key"
        if store.dialect.name == "postgresql":
            where = "concurrency_key = %(key)s"
        params: dict[str, Any] = {"queue": queue, "grp": group, "key": key,
                                  "now": self._now, "n": self._limit}  # fmt: skip
        if self._paused is not None and self._paused.jobs:
            where += " AND " + store.q["unpaused_filter"]
            params.update(self._paused.params(store))
        rows: list[Row] = self._cur.execute(
            store.q["rr_ready"].replace("{queues}", where), params
        ).fetchall()
        return rows

    def running(self, key: str) -> int:
        """The running jobs of ``key``."""
        store = self._store
        self._cur.execute(store.q["count_running"], {"keys": store.array([key])})
        return sum(int(r["n"]) for r in self._cur.fetchall())

    def save(self) -> None:
        """Write the served marks and counters of the groups served; forget the marks of
        keys left without a queued or running job."""
        q, cur = self._store.q, self._cur
        for (queue, group), g in self._groups.items():
            marks = [{"grp": group, "queue": queue, "key": k, "served": g.served[k]}
                     for k in sorted(g.dirty)]  # fmt: skip
            if marks:
                marks.append({"grp": group, "queue": queue, "key": "", "served": g.counter})
                cur.executemany(q["rr_mark"], marks)
            forget = [{"grp": group, "queue": queue, "key": k} for k in sorted(g.dirty | g.gone)]
            if forget:
                cur.executemany(q["rr_forget"], forget)


class RoundRobin:
    """:class:`~queue_core.storage.control.SupportsRoundRobin` on ``store``, and the
    turns of each keyed claim (:meth:`turns`)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def turns(self, cur: Any, limit: int, paused: PauseSet | None) -> Turns:
        """The turns of a keyed claim of up to ``limit`` jobs in ``cur``'s transaction."""
        return Turns(self.store, cur, limit, paused)

    def round_robin_keys(self, group: str, *, now: int | None = None) -> list[str]:
        """See :meth:`queue_core.storage.control.SupportsRoundRobin.round_robin_keys`
        (over every queue: a key's earliest served mark and best job count)."""
        store = self.store
        with store.stmt() as cur:
            t = store.resolve_now(cur, now)
            heads = cur.execute(store.q["rr_heads"], {"grp": group, "now": t}).fetchall()
            keys = sorted({r["concurrency_key"] for r in heads})
            if not keys:
                return []
            cur.execute(store.q["count_running"], {"keys": store.array(keys)})
            running = {r["key"]: int(r["n"]) for r in cur.fetchall()}
            marks = cur.execute(store.q["rr_marks_of_group"], {"grp": group}).fetchall()
        served: dict[str, int] = {}
        for r in marks:
            served[r["key"]] = min(served.get(r["key"], int(r["served"])), int(r["served"]))
        best: dict[str, tuple[int, int, int]] = {}
        for r in heads:
            k, limit = r["concurrency_key"], r["concurrency_limit"]
            if limit is not None and running.get(k, 0) >= limit:
                continue
            if k not in best or _order(r) < best[k]:
                best[k] = _order(r)
        ranked = sorted(best, key=best.__getitem__)
        return round_robin_order({k: (served.get(k, 0), i) for i, k in enumerate(ranked)})
