"""Claiming on the SQL backend: one statement for the common case, a keyed claim for jobs
under a ``queue`` concurrency limit, a rate limit or a flow-control behaviour (a
round-robin group's job is replaced by its group's next turn, :mod:`.roundrobin`).

The dialect's ``claim`` starts the unkeyed jobs among the top ``limit`` ready ones (one
``UPDATE ... RETURNING`` on SQLite, one CTE with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL). When a keyed or rate-limited job is ready too, :meth:`Claiming._keyed`
claims it afterwards, counting the running jobs per key under the key's lock and taking
rate grants (:class:`~backends.sql.limits.RateClaims`), in one transaction. A claim
writes no attempt record: each is written once, when its attempt ends.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from backends.sql.limits import RateClaims
from backends.sql.pauses import Pauses, PauseSet
from backends.sql.queries import queues_filter
from backends.sql.records import Order, Row, claimed_from_row, order_of
from backends.sql.roundrobin import ROUND_ROBIN, RoundRobin, Turns
from backends.sql.store import CLAIMED_STEPS, Store
from queue_core.records.corrupt import split_claimed
from queue_core.records.jobs import AttemptEnd, ClaimedJob
from queue_core.rules.limits import RATE_START_MS

if TYPE_CHECKING:
    from backends.sql.flows import Flows

__all__ = ["Claiming"]

_ROUNDS = 16
"""Reads of the keyed claim before it gives up on blocked keys this time (a read that
met jobs of a paused task or flow, set aside then, does not count)."""

_HOLD_READ = 512
"""The most rows one read of the keyed claim takes while it meets jobs to set aside
(the read size doubles from the claim's limit after each such read)."""


class Claiming:
    """``claim`` on ``store``; what is paused comes from ``pauses``, a round-robin
    group's turns from ``round_robin``; a claimed row that does not read as its types (a
    poison row) is dead-lettered alone through ``finish`` (``Storage.finish``), reason
    ``corrupt_record`` (:func:`~queue_core.records.corrupt.split_claimed`); a workflow's
    function step claimed is told to ``flows()`` (built on first use)."""

    def __init__(
        self,
        store: Store,
        finish: Callable[[Sequence[AttemptEnd]], object],
        flows: Callable[[], Flows],
        pauses: Pauses,
        round_robin: RoundRobin,
    ) -> None:
        self.store = store
        self._finish = finish
        self.flows = flows
        self.pauses = pauses
        self.round_robin = round_robin

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
        ahead: bool = False,
    ) -> list[ClaimedJob]:
        """See :meth:`queue_core.storage.protocol.Storage.claim`; ``ahead``: held attempts
        (:meth:`queue_core.storage.abilities.SupportsPrefetch.claim_ahead`)."""
        if limit <= 0 or not queues:
            return []
        store, asked = self.store, list(dict.fromkeys(queues))
        t = store.dialect.clock(now)
        pairs = self._claim(worker_id, asked, limit, lease_ms, t, ahead)
        if not pairs and self.pauses.stale():  # a pause or resume since: claim again
            pairs = self._claim(worker_id, asked, limit, lease_ms, t, ahead)
        if len(pairs) > 1:
            pairs.sort(key=lambda p: p[0])
        jobs, corrupt = split_claimed([c for _, c in pairs])
        if corrupt:
            self._finish(corrupt)
        steps = store.claimed_steps
        for c in jobs:  # a plain worker never imports the workflow records
            if c.execution_id is not None and c.step_id is not None:
                if len(steps) >= CLAIMED_STEPS:
                    steps.clear()
                steps[c.id] = (c.execution_id, c.step_id)
                from queue_core.records.workflows import FUNCTION_STEP

                if c.step_id == FUNCTION_STEP:  # a workflow waiting is running again
                    self.flows().claimed(c.execution_id, c.step_id, t)
        return jobs

    def _claim(
        self,
        worker_id: str,
        asked: list[str],
        limit: int,
        lease_ms: int,
        t: int | None,
        ahead: bool,
    ) -> list[tuple[Order, ClaimedJob]]:
        """One claim with the cached pauses; it claims nothing if they changed since."""
        store, d = self.store, self.store.dialect
        paused, version = self.pauses.snapshot()
        qs = asked
        if paused is not None:  # a paused queue is never read
            qs = [q for q in qs if q not in paused.queues]
            if not qs:
                return []
        if paused is not None and paused.jobs:  # the keyed claim leaves paused jobs out
            return self._keyed(worker_id, qs, limit, lease_ms, t, paused, version, ahead)
        with store.tx() if d.claim_in_tx else store.hot() as cur:
            rows, keyed = d.claim(cur, worker_id, qs, limit, lease_ms, t, version, ahead)
        pairs = d.claimed(rows)
        if keyed and len(pairs) < limit:
            more = self._keyed(worker_id, qs, limit - len(pairs), lease_ms, t, None, version, ahead)
            pairs.extend(more)
        return pairs

    def _keyed(
        self,
        worker_id: str,
        qs: list[str],
        limit: int,
        lease_ms: int,
        now: int | None,
        paused: PauseSet | None,
        version: str | None,
        ahead: bool = False,
    ) -> list[tuple[Order, ClaimedJob]]:
        """Claim honouring ``queue`` concurrency limits and rate limits (and leaving out
        the jobs of ``paused`` tasks and flows); ``ahead``: held, without deadlines."""
        places: dict[int, Order] = {}  # a round-robin turn's place: the job met
        with self.store.tx() as cur:
            chosen = self._pick(cur, qs, limit, now, paused, version, places)
            if not chosen:
                return []
            t = int(chosen[0]["now_ms"])
            starts: list[dict[str, Any]] = []
            claimed: list[tuple[Order, ClaimedJob]] = []
            for r in chosen:
                timeout, hb = (None, None) if ahead else (r["timeout_ms"], r["heartbeat_ms"])
                start = {
                    "seq": r["seq"], "attempt": r["attempt"] + 1, "worker": worker_id,
                    "token": os.urandom(12).hex(), "lease": t + lease_ms,
                    "deadline": t + timeout if timeout is not None else None,
                    "hb": t + hb if hb is not None else None, "now": t, "ahead": ahead,
                }  # fmt: skip
                starts.append(start)
                row = {**dict(r), "attempt": start["attempt"], "lease_token": start["token"],
                       "lease_expires_at": start["lease"], "deadline": start["deadline"],
                       "started_at": t}  # fmt: skip
                # a rate grant counts until the body may start (rules.limits.rate_grant)
                start_by = t + RATE_START_MS if r["rate_key"] is not None else None
                claimed.append((places.get(r["seq"], order_of(r)), claimed_from_row(row, start_by)))
            cur.executemany(self.store.q["start_job"], starts)
            return claimed

    def _pick(
        self,
        cur: Any,
        qs: list[str],
        limit: int,
        now: int | None,
        paused: PauseSet | None,
        version: str | None,
        places: dict[int, Order],
    ) -> list[Row]:
        """The ready jobs to start: keyed ones only while their key has a free slot and
        rated ones only while their rate grants (a key locked by another claim is skipped
        this round); none that a task or flow pause matches: those met are set aside
        (:meth:`~backends.sql.pauses.Pauses.hold`) and the claim reads on."""
        store = self.store
        sql, params = self._ready(qs, now, paused, version)
        chosen: list[Row] = []
        taken: set[int] = set()  # the seqs of chosen round-robin turns
        excluded: list[int] = []
        running: dict[str, int] = {}
        rates = RateClaims(store, cur)
        turns: Turns | None = None
        rounds, size = 0, limit
        while rounds < _ROUNDS:
            params["excluded"] = store.array(excluded)
            params["limit"] = size
            rows = cur.execute(sql, params).fetchall()
            if not rows:
                break
            params["now"] = rows[0]["now_ms"]
            kept = self._aside(cur, rows, excluded)
            aside, rows = len(kept) < len(rows), kept
            size = min(2 * size, _HOLD_READ) if aside else size  # then no round counted
            rounds += 0 if aside else 1
            self._count_running(cur, rows, running)
            blocked = aside
            for r in rows:
                if len(chosen) >= limit:  # a read past jobs set aside may bring more
                    break
                key, cap = r["concurrency_key"], r["concurrency_limit"]
                excluded.append(r["seq"])  # our own row locks do not hide it next round
                if r["concurrency_behavior"] == ROUND_ROBIN:
                    if turns is None:
                        turns = self.round_robin.turns(cur, limit, paused)
                    blocked |= self._turns(r, turns, rates, chosen, taken, limit, places)
                    continue
                if r["seq"] in taken:
                    continue
                capped = key is not None and cap is not None and not r["concurrency_skip"]
                full = capped and running[key] >= cap  # then no rate grant is taken
                if full or not rates.take(r["rate_key"], int(r["now_ms"])):
                    blocked = True
                    continue
                if capped:
                    running[key] += 1
                chosen.append(r)
            if not blocked or len(chosen) >= limit:
                break
            size = max(size, limit - len(chosen)) if aside else limit - len(chosen)
        rates.save()
        if turns is not None:
            turns.save()
        return chosen

    def _ready(
        self, qs: list[str], now: int | None, paused: PauseSet | None, version: str | None
    ) -> tuple[str, dict[str, Any]]:
        """``select_ready`` for ``qs`` and its parameters but ``excluded`` and ``limit``:
        with the pause each job matches (``paused_field``) while a task or flow is paused."""
        store = self.store
        params: dict[str, Any] = {"queues": store.array(qs), "now": now, "pv": version}
        field = "NULL"
        if paused is not None and paused.jobs:
            field = store.q["paused_field"]
            params.update(paused.params(store))
        params.update((f"q{i}", q) for i, q in enumerate(qs))
        where = queues_filter(store.dialect.name, len(qs))
        return store.q["select_ready"].replace("{queues}", where).replace("{paused}", field), params

    def _aside(self, cur: Any, rows: list[Row], excluded: list[int]) -> list[Row]:
        """Set aside the jobs of a paused task or flow among ``rows``
        (:meth:`~backends.sql.pauses.Pauses.hold`; those of a pause resumed meanwhile join
        ``excluded``): the other rows."""
        met: dict[str, list[int]] = {}  # pause -> the seqs of its jobs met
        for r in rows:
            if r["paused"] is not None:
                met.setdefault(r["paused"], []).append(r["seq"])
        if not met:
            return rows
        excluded += self.pauses.hold(cur, met)
        return [r for r in rows if r["paused"] is None]

    def _turns(
        self,
        met: Row,
        turns: Turns,
        rates: RateClaims,
        chosen: list[Row],
        taken: set[int],
        limit: int,
        places: dict[int, Order],
    ) -> bool:
        """The claim met ``met``, a round-robin group's job: claim its group's next turns
        in its place until ``met`` itself is taken, the group has no key to serve or the
        claim is full (:mod:`backends.sql.roundrobin`). Whether ``met`` was left queued
        (then the next round reads further)."""
        if met["seq"] in taken:
            return True
        while len(chosen) < limit:
            turn = turns.take(met)
            if turn is None:
                return True
            if rates.take(turn["rate_key"], int(met["now_ms"])):
                chosen.append(turn)
                taken.add(turn["seq"])
                places[turn["seq"]] = order_of(met)  # claimed in the met job's place
            if turn["seq"] == met["seq"]:
                return False
        return True

    def _count_running(self, cur: Any, rows: list[Row], running: dict[str, int]) -> None:
        """Lock each new key of ``rows`` and count its running jobs; a key that another
        claim holds counts as full (``2**31``) this round."""
        keys = sorted(
            {
                r["concurrency_key"]
                for r in rows
                if r["concurrency_key"] is not None
                and r["concurrency_limit"] is not None
                and not r["concurrency_skip"]
                and r["concurrency_behavior"] != ROUND_ROBIN
                and r["concurrency_key"] not in running
            }
        )
        locked = [k for k in keys if self.store.lock_key(cur, k, wait=False)]
        for k in keys:
            running[k] = 0 if k in locked else 2**31
        if locked:
            cur.execute(self.store.q["count_running"], {"keys": self.store.array(locked)})
            for r in cur.fetchall():
                running[r["key"]] = int(r["n"])
