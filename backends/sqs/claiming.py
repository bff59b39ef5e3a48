"""Claim: parked jobs promoted to the ready index, candidates read, attempts started."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backends.sqs.codec import Item, vals
from backends.sqs.dynamo import TX_MAX, TxCancelled
from backends.sqs.errors import translate
from backends.sqs.limits import rate_update
from backends.sqs.pauses import Pauses
from backends.sqs.store import Store
from backends.sqs.tables import DUE_TYPE, due_by
from queue_core.records.jobs import ClaimedJob, LeaseRef
from queue_core.rules.leases import step_deadline

if TYPE_CHECKING:
    from backends.sqs.flows import SQSFlows
    from backends.sqs.round_robin import GroupKey, RoundRobin, Turns

__all__ = ["CLAIM_ROUNDS", "Claiming"]

CLAIM_ROUNDS = 4
"""Ready-index reads per claim at most: a claim whose candidates were taken by other
workers reads the index again (without the ids it tried) to fill its batch."""
_CONFLICT_RETRIES = 5
_TURN_RETRIES = 50
"""Cancelled transactions of one group's turns per claim at most (claimers of one group
serialize on its item: each conflict lets one of them through)."""
_FAILED = "ConditionalCheckFailed"


@dataclass
class _ClaimRun:
    """One claim call's progress across its rounds."""

    limit: int
    fresh: bool = False
    """The claim runs on the storage's clock (``now`` not given): rate grants read it
    again right before their write (:meth:`Claiming._rated`)."""
    claimed: list[ClaimedJob] = field(default_factory=list)
    full: set[str] = field(default_factory=set)
    """Concurrency keys found at their limit."""
    tried: set[str] = field(default_factory=set)
    """Job ids already attempted (taken, lost or skipped)."""
    conflicts: int = 0
    rate_full: set[str] = field(default_factory=set)
    """Rate keys found at their rate."""

    @property
    def room(self) -> int:
        return self.limit - len(self.claimed)


class Claiming:
    """``claim`` of the SQS storage, and the job items it started (which spare ``finish``
    a read).

    Args:
        store: the storage's store.
        pauses: the pauses (read by the promotion Query; paused queues are not read,
            a paused task's or flow's job is moved aside).
        flows: the flows part (built on first use): a step's claim is recorded in its
            execution within the claim's transaction.
        round_robin: the ``round_robin`` groups (:mod:`backends.sqs.round_robin`): a
            group's jobs met by the claim are replaced by the group's turns.
    """

    def __init__(
        self,
        store: Store,
        pauses: Pauses,
        flows: Callable[[], SQSFlows],
        round_robin: RoundRobin | None = None,
    ) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys
        self.pauses = pauses
        self.flows = flows
        self.round_robin = round_robin
        self._lock = threading.Lock()
        self._claimed: dict[tuple[str, int, str], Item] = {}

    def take_claimed(self, ref: LeaseRef) -> Item | None:
        """The job item as this instance's claim of ``ref`` left it (``None`` if unknown)."""
        with self._lock:
            return self._claimed.pop((ref.job_id, ref.attempt, ref.lease_token), None)

    def promote(self, now: int, limit: int = 100) -> None:
        """Move parked jobs that are due by ``now`` into the ready index; the pause
        items, which sort first in the same partition, are the current pauses."""
        parked = self.db.query(
            IndexName="due",
            KeyConditionExpression="dp = :dp AND dx <= :now",
            ExpressionAttributeValues=vals(dp=self.keys.parked, now=now),
            Limit=limit,
        )
        for item in self.pauses.seen(parked):
            sets, removes = self.keys.queued_fields(item, item["ra"], now, item.get("po"))
            self.db.update_if(
                self.db.update(
                    self.keys.job(item["id"]),
                    sets,
                    removes,
                    cond="st = :q AND v = :v",
                    cond_values={"q": "queued", "v": item["v"]},
                )
            )

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        """See :meth:`queue_core.storage.protocol.Storage.claim`.

        One Query of the parked index (promotion), one Query of the ready index per
        queue, then one ``TransactWriteItems`` that starts every chosen job (conditional
        on its version) and writes its attempt record. A cancelled transaction is
        retried without the items that lost; when other workers took candidates and the
        batch is not full, the ready index is read again (at most :data:`CLAIM_ROUNDS`
        reads), skipping the ids already tried. Paused queues are not read; a job of a
        paused task or flow is moved aside (:mod:`backends.sqs.pauses`).
        """
        t = self.store.now(now)
        if limit <= 0 or not queues:
            return []
        with translate("claim"):
            self.promote(t)
            run = _ClaimRun(limit, fresh=now is None)
            queues = self.pauses.unpaused(queues)
            rr = self.round_robin
            turns = None if rr is None else rr.turns(t, limit, run.rate_full)
            for _round in range(CLAIM_ROUNDS if queues else 0):
                cands = [it for it in self._ready(queues, limit, t) if it["id"] not in run.tried]
                run.tried.update(it["id"] for it in cands)
                kept = self.pauses.hold(cands) if self.pauses.jobs_paused else cands
                raced = False
                for seg in [kept] if turns is None else turns.segments(kept):
                    if isinstance(seg, list):
                        raced |= self._claim_from(run, seg, worker_id, lease_ms, t)
                    elif run.room > 0 and turns is not None:
                        raced |= self._claim_turns(run, turns, seg, worker_id, lease_ms, t)
                if run.room <= 0 or not (raced or len(kept) < len(cands)):
                    break
            if turns is not None:
                turns.tidy()
            self.store.delivery.bind_claimed(run.claimed)
            return run.claimed

    def _ready(self, queues: Sequence[str], limit: int, t: int) -> list[Item]:
        """Claim candidates of ``queues`` that are due at ``t``, in claim order."""
        cands: list[Item] = []
        for q in dict.fromkeys(queues):
            cands += self.db.query(
                IndexName="ready",
                KeyConditionExpression="rq = :rq",
                FilterExpression=f"{due_by('now')} AND (attribute_not_exists(dx) OR dx > :now)",
                ExpressionAttributeValues={**vals(rq=self.keys.ready(q), now=t), **DUE_TYPE},
                Limit=max(limit * 4, 20),
            )
        cands.sort(key=lambda it: it["rk"])
        return cands

    def _claim_from(
        self, run: _ClaimRun, cands: list[Item], worker_id: str, lease_ms: int, t: int
    ) -> bool:
        """Start candidates in transactions until the batch is full or none is left.

        Returns whether another writer took a candidate first (a lost race)."""
        raced = False
        while cands and run.room > 0:
            batch, rest = _pick(run, cands)
            if not batch:
                break
            batch, rates, at = self._rated(run, batch, t)
            if not batch:
                cands = rest
                continue
            actions, owners, starts = self._start_actions(batch, worker_id, lease_ms, at, rates)
            try:
                self.db.write(actions)
            except TxCancelled as exc:
                drop, lost = _losers(run, batch, actions, owners, exc.codes)
                raced = raced or lost
                if not drop:  # a conflict naming no item: retry the batch a few times
                    run.conflicts += 1
                    if run.conflicts > _CONFLICT_RETRIES:
                        break
                    time.sleep(0.01)
                cands = [it for bi, it in enumerate(batch) if bi not in drop] + rest
                continue
            self._taken(run, starts, rates, at)
            cands = rest
        return raced

    def _taken(
        self,
        run: _ClaimRun,
        starts: list[tuple[str, Item]],
        rates: list[tuple[dict[str, Any], int] | None],
        t: int,
    ) -> None:
        """Record the jobs a written transaction started (returned, and kept for finish)."""
        for (tok, new), rate in zip(starts, rates, strict=True):
            start_by = None if rate is None else rate[1]
            run.claimed.append(claimed_job(new, tok, t, self.db.payload(new), start_by))
            with self._lock:
                self._claimed[(new["id"], new["att"], tok)] = new

    def _claim_turns(
        self, run: _ClaimRun, turns: Turns, gk: GroupKey, worker_id: str, lease_ms: int, t: int
    ) -> bool:
        """Claim round-robin group ``gk``'s next turns (:mod:`backends.sqs.round_robin`),
        one transaction per batch with the group item's new marks. Returns whether
        another writer took a job first."""
        raced = False
        failures = 0
        while run.room > 0 and failures <= _TURN_RETRIES:
            batch = turns.batch(gk, run.room)
            if not batch:
                break
            kept, rates, at = self._rated(run, batch, t)
            if len(kept) < len(batch):  # a spent rate: its key is passed over
                turns.failed(gk, [], {str(it["ck"]) for it in batch if it not in kept}, False)
                continue
            actions, owners, starts = self._start_actions(batch, worker_id, lease_ms, at, rates)
            actions.append(turns.write(gk, batch))
            try:
                self.db.write(actions)
            except TxCancelled as exc:
                failures += 1
                lost, full, group = _turn_losers(batch, actions, owners, exc.codes)
                raced = raced or bool(lost)
                if not (lost or full or group):
                    time.sleep(0.01)
                elif group:
                    time.sleep(random.uniform(0, 0.01))  # noqa: S311 - jitter, not security
                turns.failed(gk, lost, full, group)
                continue
            self._taken(run, starts, rates, at)
            turns.taken(gk, batch)
        return raced

    def _rated(
        self, run: _ClaimRun, batch: list[Item], t: int
    ) -> tuple[list[Item], list[tuple[dict[str, Any], int] | None], int]:
        """``batch`` without the rate-limited jobs over their rate, per job the update
        taking its rate claim and the claim's ``start_by`` (``None``: not rate limited),
        and the time the batch starts at. A batch holding a rate grant starts at the
        grant's time: an attempt's ``started_at`` is never before the grant that let it
        start, so the recorded starts keep the rate in every window too."""
        kept: list[Item] = []
        updates: list[tuple[dict[str, Any], int] | None] = []
        # On the storage's clock a grant counts from now, not from the claim's start: the
        # reads before it do not eat into the RATE_START_MS its body has to start.
        at = max(t, self.store.clock()) if run.fresh else t
        for it in batch:
            update = None
            if it.get("rtk") is not None:
                update = rate_update(self.db, self.keys, it, at)
                if update is None:
                    run.rate_full.add(it["rtk"])
                    continue
            kept.append(it)
            updates.append(update)
        return kept, updates, at if any(u is not None for u in updates) else t

    def _start_actions(
        self,
        batch: list[Item],
        worker_id: str,
        lease_ms: int,
        t: int,
        rates: list[tuple[dict[str, Any], int] | None],
    ) -> tuple[list[dict[str, Any]], list[int], list[tuple[str, Item]]]:
        """The transaction starting every job of ``batch``: its actions, the batch index
        owning each action, and (lease token, job item after the start) per job."""
        actions: list[dict[str, Any]] = []
        owners: list[int] = []
        starts: list[tuple[str, Item]] = []
        steps: dict[str, tuple[int, dict[str, int]]] = {}  # step claims by execution
        for bi, it in enumerate(batch):
            tok = uuid.uuid4().hex
            sets = self.keys.running_fields(it, worker_id, tok, t, lease_ms)
            # the attempt's record is the job item's att/wk/sa until the attempt ends
            mine: list[dict[str, Any]] = [
                {
                    "Update": self.db.update(
                        self.keys.job(it["id"]),
                        sets,
                        ["rq", "rk", "ltp", "lx"] if it.get("ltp") else ["rq", "rk"],
                        cond="st = :q AND v = :ver",
                        cond_values={"q": "queued", "ver": it["v"]},
                    )
                },
            ]
            key = it.get("ck")
            if key is not None:
                limit_on = None if it.get("cs") else "run"
                counter = self.db.counter(
                    self.keys.counter(key), run=1, limit_on=limit_on, limit=it.get("cl")
                )
                mine.append({"Update": counter})
            rate = rates[bi]
            if rate is not None:
                mine.append({"Update": rate[0]})
            actions += mine
            owners += [bi] * len(mine)
            new = {**it, **{k: v for k, v in sets.items() if v is not None}, "v": it["v"] + 1}
            starts.append((tok, new))
            if it.get("xid") is not None:
                steps.setdefault(it["xid"], (bi, {}))[1][it["id"]] = sets["att"]
        for eid, (bi, claims) in steps.items():
            actions.append(self.flows().claim_update(eid, claims, t))
            owners.append(bi)
        return actions, owners, starts


def _pick(run: _ClaimRun, cands: list[Item]) -> tuple[list[Item], list[Item]]:
    """The next transaction's batch (one job per concurrency key, jobs of full keys
    left out) and the candidates left for later."""
    batch: list[Item] = []
    rest: list[Item] = []
    keys_in_batch: set[str] = set()
    room = min(run.room, TX_MAX // 3)
    size = 0  # items of the transaction (a flow step adds its execution's, once)
    for it in cands:
        key, rate, xid = it.get("ck"), it.get("rtk"), it.get("xid")
        if key is not None and key in run.full and not it.get("cs"):
            continue
        if rate is not None and rate in run.rate_full:
            continue
        cost = 1 + (key is not None) + (rate is not None)
        cost += xid is not None and f"X#{xid}" not in keys_in_batch
        fits = len(batch) < room and size + cost <= TX_MAX
        free = (key is None or key not in keys_in_batch) and rate not in keys_in_batch
        if fits and free:
            batch.append(it)
            size += cost
            keys_in_batch.update(k for k in (key, rate, xid and f"X#{xid}") if k)
        else:
            rest.append(it)
    return batch, rest


def _losers(
    run: _ClaimRun,
    batch: list[Item],
    actions: list[dict[str, Any]],
    owners: list[int],
    codes: list[str],
) -> tuple[set[int], bool]:
    """Batch indexes whose writes a cancelled transaction named, and whether one of them
    lost its job to another writer (rather than finding its concurrency key full)."""
    drop: set[int] = set()
    raced = False
    for action, owner, code in zip(actions, owners, codes, strict=False):
        if code in ("None", ""):
            continue
        drop.add(owner)
        if "Update" in action and action["Update"]["Key"]["sk"]["S"] == "X":
            xid = batch[owner].get("xid")  # the execution may start no step now
            drop.update(bi for bi, it in enumerate(batch) if it.get("xid") == xid)
        elif "Update" in action and action["Update"]["Key"]["sk"]["S"] == "C":
            if code == _FAILED:
                run.full.add(batch[owner].get("ck") or "")
        else:
            raced = True
    return drop, raced


def _turn_losers(
    batch: list[Item], actions: list[dict[str, Any]], owners: list[int], codes: list[str]
) -> tuple[list[Item], set[str], bool]:
    """What a cancelled transaction of round-robin turns named: the jobs lost to another
    writer, the keys found full, and whether the group item (the last action) changed."""
    lost: list[Item] = []
    full: set[str] = set()
    group = False
    for i, (action, code) in enumerate(zip(actions, codes, strict=False)):
        if code in ("None", ""):
            continue
        if i == len(owners):
            group = True
        elif action.get("Update", {}).get("Key", {}).get("sk") == {"S": "C"} and code == _FAILED:
            full.add(str(batch[owners[i]]["ck"]))
        else:
            lost.append(batch[owners[i]])
    return lost, full, group


def claimed_job(
    it: Item, token: str, now: int, payload: bytes, start_by: int | None = None
) -> ClaimedJob:
    """The claimed job of the job item ``it`` as its claim at ``now`` left it;
    ``start_by`` is a rate-limited claim's latest body start (``None``: not rate limited).
    A value of the wrong type, or a missing one, is kept as read (``None``) for
    :func:`~queue_core.records.corrupt.split_claimed`."""
    try:
        deadline = step_deadline(it.get("dl"), it.get("fdl"))
    except TypeError:
        deadline = it.get("dl")
    return ClaimedJob(
        id=it["id"],
        task_name=it.get("task"),  # type: ignore[arg-type]
        queue=it["q"],
        payload=payload,
        attempt=it["att"],
        lease_token=token,
        lease_expires_at=it["le"],
        deadline=deadline,
        max_attempts=it.get("ma"),  # type: ignore[arg-type]
        priority=it.get("pr"),  # type: ignore[arg-type]
        timeout_ms=it.get("to"),
        heartbeat_ms=it.get("hbms") or None,
        options=it.get("opt"),
        enqueued_at=it.get("enq"),  # type: ignore[arg-type]
        replay_of=it.get("rof"),
        started_at=now,
        run_at=it.get("ra"),
        execution_id=it.get("xid"),
        step_id=it.get("xs"),
        flow_deadline_at=it.get("fdl"),
        start_by=start_by,
    )
