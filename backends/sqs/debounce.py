"""Debounce of the SQS + DynamoDB backend (``SupportsDebounce``): many calls, one job.

A debounce key's item ``pk = P DB#<key>``, ``sk = DB`` names its holder, the last job
stored with the key (``jid``). A call reads the key's item and the holder's job item:

* holder ``queued``: one write conditional on the holder's version (``st = queued AND v
  = <read>``) gives it the call's payload and the ready time
  :func:`queue_core.rules.control.debounce_ready_at` says (its claim order among jobs of
  equal ready time kept: the sequence is unchanged), and a new delivery hint is sent for
  that time (a hint that arrives early is hopped as any). A claim is conditional on the
  version too, so a call racing a claim either changes the holder first (the claim,
  which read the older version, fails and reads again) or finds it claimed;
* otherwise one transaction stores the job and makes it the key's holder, conditional on
  the key's item still naming the holder read; a lost race reads again.

Jobs without a key are stored as :meth:`backends.sqs.supersede.Supersede.enqueue` stores
them.
A key's item expires (DynamoDB TTL) one retention period after its holder's
``debounce_max``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.sqs.blobs import chunk_count, side_keys
from backends.sqs.codec import Item, new_item, vals
from backends.sqs.dynamo import TxCancelled
from backends.sqs.errors import translate
from backends.sqs.store import SEQ, Store
from backends.sqs.supersede import Supersede
from backends.sqs.writes import Writes
from queue_core.records.errors import StorageError
from queue_core.records.jobs import Enqueued, JobState, NewJob
from queue_core.rules.control import debounce_ready_at

__all__ = ["Debounce"]

_RETRIES = 20
_FAILED = "ConditionalCheckFailed"


class Debounce:
    """:class:`~queue_core.storage.control.SupportsDebounce` of the SQS storage; its
    :meth:`enqueue` is the storage's (jobs without a debounce key go to ``supersede``)."""

    def __init__(self, store: Store, writes: Writes, supersede: Supersede) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys
        self.writes = writes
        self.supersede = supersede

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.protocol.Storage.enqueue` (debounce keys
        honoured)."""
        if any(j.debounce_key is not None for j in jobs):
            return [e.state for e in self.enqueue_debounced(jobs, now=now)]
        return self.supersede.enqueue(jobs, now=now)

    def enqueue_debounced(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        """See :meth:`queue_core.storage.control.SupportsDebounce.enqueue_debounced`. Each
        job in order, so an earlier one is the holder for later ones."""
        t = self.store.now(now)
        if len({j.id for j in jobs}) != len(jobs):
            raise StorageError("sqs backend: duplicate job id within one enqueue batch")
        out: list[Enqueued] = []
        for j in jobs:
            if j.debounce_key is None:
                out += self.supersede.enqueue_superseding([j], now=t)
            else:
                with translate("enqueue"):
                    out.append(self._call(j, j.debounce_key, t))
        return out

    def _call(self, job: NewJob, key: str, t: int) -> Enqueued:
        kkey = {"pk": {"S": f"{self.keys.p}DB#{key}"}, "sk": {"S": "DB"}}
        for _ in range(_RETRIES):
            current = self.db.get(kkey)
            holder = self.db.get(self.keys.job(current["jid"])) if current else None
            if holder is not None and holder["st"] == JobState.QUEUED.value:
                if self._merge(holder, job, t):
                    return Enqueued(holder["id"], JobState.QUEUED, existing=True)
                continue  # claimed or changed meanwhile: read again
            state = self._store(job, kkey, current, t)
            if state is not None:
                return Enqueued(job.id, state)
        raise StorageError(f"sqs backend: debounce key {key!r} kept changing")

    def _merge(self, holder: Item, job: NewJob, t: int) -> bool:
        """Give queued ``holder`` the call's payload and its new ready time; ``False``
        when the holder changed since it was read."""
        assert job.debounce_ms is not None and job.debounce_max_ms is not None
        ready = debounce_ready_at(holder["enq"], t, job.debounce_ms, job.debounce_max_ms)
        sets, removes = self.keys.queued_fields(holder, ready, t)
        removes.append("hd")  # moved aside by a pause: the next claim looks again
        chunks = chunk_count(job.payload)
        sets["pl"] = None if chunks else job.payload
        sets["plc"] = chunks
        extra = self.db.chunk_puts(holder["pk"], job.payload) if chunks else []
        extra += [
            {"Delete": {"TableName": self.db.name, "Key": k}}
            for k in side_keys(holder, ("plc",))[chunks or 0 :]
        ]
        update = self.db.update(
            self.keys.job(holder["id"]),
            sets,
            removes,
            cond="st = :q AND v = :ver",
            cond_values={"q": JobState.QUEUED.value, "ver": holder["v"]},
        )
        try:
            self.db.write([{"Update": update}, *extra])
        except TxCancelled:
            return False
        self.store.hint([{**holder, **sets}], t)
        return True

    def _store(
        self, job: NewJob, kkey: dict[str, Any], current: Item | None, t: int
    ) -> JobState | None:
        """Store ``job`` as the key's new holder; ``None`` when the key's item changed
        since it was read."""
        assert job.debounce_max_ms is not None
        item = new_item(self.keys, job, t, SEQ.take(1)[0])
        take: dict[str, Any] = {
            "TableName": self.db.name,
            "Item": {
                **kkey,
                "jid": {"S": job.id},
                "ttl": {"N": str(self.store.ttl(t + job.debounce_max_ms))},
            },
        }
        if current is None:
            take["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            take["ConditionExpression"] = "jid = :old"
            take["ExpressionAttributeValues"] = vals(old=current["jid"])
        actions = [{"Put": take}, *self.writes.put_new(item, job.payload)]
        try:
            self.db.transact(actions)
        except TxCancelled as exc:
            codes = exc.codes + ["None"] * 2
            if codes[1] == _FAILED:
                raise StorageError(f"job id {job.id!r} already exists") from None
            return None
        self.store.hint([item], t)
        return JobState.QUEUED
