"""Enqueue, promotion of parked jobs, and claim: how jobs get in and get started."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.sqs.base import SEQ
from backends.sqs.codec import Item, claimed_job, decode_item, new_item, vals
from backends.sqs.dynamo import TX_MAX, TxCancelled
from backends.sqs.errors import translate
from backends.sqs.flow_apply import FlowApply
from backends.sqs.rates import rate_update
from queue_core.errors import StorageError
from queue_core.model import ClaimedJob, JobState, NewJob, Reason

__all__ = ["CLAIM_ROUNDS", "Claiming"]

CLAIM_ROUNDS = 4
"""Ready-index reads per claim at most: a claim whose candidates were taken by other
workers reads the index again (without the ids it tried) to fill its batch."""
_CONFLICT_RETRIES = 5
_FAILED = "ConditionalCheckFailed"


@dataclass
class _ClaimRun:
    """One claim call's progress across its rounds."""

    limit: int
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


class Claiming(FlowApply):
    """``enqueue`` and ``claim`` of :class:`~backends.sqs.storage.SQSStorage`."""

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.Storage.enqueue`.

        Jobs without a ``skip`` concurrency limit go in one ``TransactWriteItems`` per
        100 items (all or nothing: a duplicate id stores none of that chunk); each
        ``skip`` job is its own transaction with a guarded counter update, so earlier
        jobs of the batch count against later ones.
        """
        t = self._now(now)
        ids = [j.id for j in jobs]
        if len(set(ids)) != len(ids):
            raise StorageError("sqs backend: duplicate job id within one enqueue batch")
        items = [
            new_item(self.keys, spec, t, seq)
            for spec, seq in zip(jobs, SEQ.take(len(jobs)), strict=True)
        ]
        states = [JobState.QUEUED] * len(jobs)
        with translate("enqueue"):
            self._enqueue_unguarded(jobs, items)
            for i, (spec, item) in enumerate(zip(jobs, items, strict=True)):
                if spec.concurrency_key is not None and spec.concurrency_skip:
                    states[i], items[i] = self._enqueue_skip(spec, item, t)
            queued = [it for it, st in zip(items, states, strict=True) if st is JobState.QUEUED]
            self._hint(queued, t)
        return states

    def _enqueue_unguarded(self, jobs: Sequence[NewJob], items: list[Item]) -> None:
        """Store every job that is not ``skip``-limited: chunked ones one transaction
        each, the rest (with their counters' ``act``) 100 items per transaction."""
        plain: list[dict[str, Any]] = []
        keyed: dict[str, int] = {}
        for spec, item in zip(jobs, items, strict=True):
            if spec.concurrency_key is not None and spec.concurrency_skip:
                continue
            if item.get("plc"):
                big = [self.db.put(item), *self.db.chunk_puts(item["pk"], spec.payload)]
                if spec.concurrency_key is not None:
                    big.append({"Update": self._counter_act(spec.concurrency_key, 1)})
                self._tx_or_duplicate(big)
                continue
            plain.append(self.db.put(item))
            if spec.concurrency_key is not None:
                keyed[spec.concurrency_key] = keyed.get(spec.concurrency_key, 0) + 1
        # counters of queue-behaviour keys ride in the same transaction
        plain += [{"Update": self._counter_act(k, n)} for k, n in keyed.items()]
        for i in range(0, len(plain), TX_MAX):
            self._tx_or_duplicate(plain[i : i + TX_MAX])

    def _counter_act(self, key: str, n: int) -> dict[str, Any]:
        return self.db.counter(self.keys.counter(key), act=n)

    def _enqueue_skip(self, spec: NewJob, item: Item, t: int) -> tuple[JobState, Item]:
        """Store a ``skip``-limited job: queued when its counter's ``act`` is under the
        limit, else stored ``skipped`` (reason ``concurrency_limit``)."""
        assert spec.concurrency_key is not None
        counter = self.db.counter(
            self.keys.counter(spec.concurrency_key),
            act=1,
            limit_on="act",
            limit=spec.concurrency_limit,
        )
        chunks = self.db.chunk_puts(item["pk"], spec.payload) if item.get("plc") else []
        try:
            self.db.transact([self.db.put(item), {"Update": counter}, *chunks])
            return JobState.QUEUED, item
        except TxCancelled as exc:
            if exc.codes and exc.codes[0] == _FAILED:
                raise StorageError(f"job id {spec.id!r} already exists") from None
            if not (len(exc.codes) > 1 and exc.codes[1] == _FAILED):
                raise StorageError("sqs backend: enqueue transaction conflicted") from None
        sets, removes = self._finished_fields(JobState.SKIPPED, t)
        skipped = {k: v for k, v in item.items() if k not in (*removes, "dp", "dx")}
        skipped.update(sets, rsn=Reason.CONCURRENCY_LIMIT.value)
        try:
            self.db.transact([self.db.put(skipped), *chunks])
        except TxCancelled:
            raise StorageError(f"job id {spec.id!r} already exists") from None
        return JobState.SKIPPED, skipped

    def _tx_or_duplicate(self, actions: list[dict[str, Any]]) -> None:
        """Write ``actions`` all or nothing (a lone Put, one plain job, is one conditional
        PutItem: see :meth:`~backends.sqs.dynamo.Table.write`)."""
        try:
            self.db.write(actions)
        except TxCancelled as exc:
            for action, code in zip(actions, exc.codes, strict=False):
                if code == _FAILED and "Put" in action:
                    job_id = decode_item(action["Put"]["Item"])["id"]
                    raise StorageError(f"job id {job_id!r} already exists") from None
            raise StorageError("sqs backend: enqueue transaction conflicted") from None

    # ------------------------------------------------------------------ claim

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        """See :meth:`queue_core.storage.Storage.claim`.

        One Query of the parked index (promotion), one Query of the ready index per
        queue, then one ``TransactWriteItems`` that starts every chosen job (conditional
        on its version) and writes its attempt record. A cancelled transaction is
        retried without the items that lost; when other workers took candidates and the
        batch is not full, the ready index is read again (at most :data:`CLAIM_ROUNDS`
        reads), skipping the ids already tried.
        """
        t = self._now(now)
        if limit <= 0 or not queues:
            return []
        with translate("claim"):
            self._promote(t)
            run = _ClaimRun(limit)
            for _round in range(CLAIM_ROUNDS):
                cands = [it for it in self._ready(queues, limit, t) if it["id"] not in run.tried]
                run.tried.update(it["id"] for it in cands)
                raced = self._claim_from(run, cands, worker_id, lease_ms, t)
                if run.room <= 0 or not raced:
                    break
            self.delivery.bind_claimed(run.claimed)
            return run.claimed

    def _ready(self, queues: Sequence[str], limit: int, t: int) -> list[Item]:
        """Claim candidates of ``queues`` that are due at ``t``, in claim order."""
        cands: list[Item] = []
        for q in dict.fromkeys(queues):
            cands += self.db.query(
                IndexName="ready",
                KeyConditionExpression="rq = :rq",
                FilterExpression="ra <= :now AND (attribute_not_exists(dx) OR dx > :now)",
                ExpressionAttributeValues=vals(rq=self.keys.ready(q), now=t),
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
            batch, rates = self._rated(run, batch, t)
            if not batch:
                cands = rest
                continue
            actions, owners, starts = self._start_actions(batch, worker_id, lease_ms, t, rates)
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
            for tok, new in starts:
                run.claimed.append(claimed_job(new, tok, t, self.db.payload(new)))
                with self._lock:
                    self._claimed[(new["id"], new["att"], tok)] = new
            cands = rest
        return raced

    def _rated(
        self, run: _ClaimRun, batch: list[Item], t: int
    ) -> tuple[list[Item], list[dict[str, Any] | None]]:
        """``batch`` without the rate-limited jobs over their rate, and per job the
        update taking its rate claim (``None``: not rate limited)."""
        kept: list[Item] = []
        updates: list[dict[str, Any] | None] = []
        for it in batch:
            update = None
            if it.get("rtk") is not None:
                update = rate_update(self.db, self.keys, it, t)
                if update is None:
                    run.rate_full.add(it["rtk"])
                    continue
            kept.append(it)
            updates.append(update)
        return kept, updates

    def _start_actions(
        self,
        batch: list[Item],
        worker_id: str,
        lease_ms: int,
        t: int,
        rates: list[dict[str, Any] | None],
    ) -> tuple[list[dict[str, Any]], list[int], list[tuple[str, Item]]]:
        """The transaction starting every job of ``batch``: its actions, the batch index
        owning each action, and (lease token, job item after the start) per job."""
        actions: list[dict[str, Any]] = []
        owners: list[int] = []
        starts: list[tuple[str, Item]] = []
        steps: dict[str, tuple[int, dict[int, int]]] = {}  # flow claims by execution
        for bi, it in enumerate(batch):
            tok = uuid.uuid4().hex
            sets = self.keys.running_fields(it, worker_id, tok, t, lease_ms)
            n = sets["att"]
            # the attempt's record is the job item's att/wk/sa until the attempt ends
            mine: list[dict[str, Any]] = [
                {
                    "Update": self.db.update(
                        self.keys.job(it["id"]),
                        sets,
                        ["rq", "rk"],
                        cond="st = :q AND v = :ver",
                        cond_values={"q": "queued", "ver": it["v"]},
                    )
                },
            ]
            key = it.get("ck")
            if key is not None:
                mine.append(
                    {
                        "Update": self.db.counter(
                            self.keys.counter(key),
                            run=1,
                            limit_on=None if it.get("cs") else "run",
                            limit=it.get("cl"),
                        )
                    }
                )
            if rates[bi] is not None:
                mine.append({"Update": rates[bi]})
            actions += mine
            owners += [bi] * len(mine)
            new = {**it, **{k: v for k, v in sets.items() if v is not None}, "v": it["v"] + 1}
            starts.append((tok, new))
            if it.get("xid") is not None:
                steps.setdefault(it["xid"], (bi, {}))[1][int(it["id"].rsplit(".", 1)[1])] = n
        for eid, (bi, claims) in steps.items():
            actions.append(self._claim_exec_update(eid, claims, t))
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
