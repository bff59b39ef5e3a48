"""Unique jobs and rate limits of the SQS + DynamoDB backend.

**Unique keys.** ``U#<key>`` items name the last job stored with a unique key (``jid``),
its enqueue time (``enq``) and ``unique_for`` (``uf``). An enqueue reads the key's item
and the holder's state and asks :func:`queue_core.rules.limits.unique_holds`; when the
key is free it takes it with a conditional put (the key's item must still name the
holder it read -- a finished holder never becomes active again, so the decision stays
true) and then stores the job. Two enqueues racing for one key: one conditional put
wins, the other reads again and finds the winner. A key's item that names a job not
stored (yet) counts as held for :data:`PENDING_MS` after its enqueue time: the winner
stores its job right after taking the key. Older, it is a pruned job (or an enqueue
that crashed in between). A key's item expires (DynamoDB TTL) one retention period
after its enqueue time plus ``unique_for``: a job still queued that long loses its key.

**Rate limits.** A rate-limited job item carries its rate as ``rtk`` (key), ``rtl``
(limit) and ``rtw`` (window ms). ``R#<key>`` items hold the key's kept times (``tj``, a
JSON list of epoch ms: each granted claim's ``start_by``, the latest time its body may
start) and the item version ``v``; an item expires (DynamoDB TTL) an hour after its
window. A claim that meets a rate-limited job reads the key's item, asks
:func:`queue_core.rules.limits.rate_grant` whether one more claim may start at the
claim's ``now`` and, when it may, adds to the claim's ``TransactWriteItems`` an update of
the item conditional on the version it read (:func:`rate_update`); the claimed job
carries the kept time as :attr:`~queue_core.records.jobs.ClaimedJob.start_by` (on the
storage's clock the grant's ``now`` is read before its rate reads and the write). Two
claimers racing for one key: one transaction wins, the other is cancelled and reads the
item again. So a window never holds more than the limit, across all workers.

Concurrency keys are counters on the job path (:mod:`backends.sqs.jobs`,
:mod:`backends.sqs.claiming`, :mod:`backends.sqs.writes`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from backends.sqs.codec import Item, Keys, encode_item, vals
from backends.sqs.dynamo import Table
from backends.sqs.errors import error_code, translate
from backends.sqs.jobs import Jobs
from backends.sqs.store import Store
from queue_core.records.errors import StorageError
from queue_core.records.jobs import Enqueued, JobState, NewJob
from queue_core.rules.limits import rate_grant, unique_holds

__all__ = ["PENDING_MS", "Limits", "rate_update"]

PENDING_MS = 60_000
"""How long a key's item naming a job not stored counts as held (an enqueue in
progress)."""
_RETRIES = 20


def _rate_key(keys: Keys, rate_key: str) -> dict[str, Any]:
    return {"pk": {"S": f"{keys.p}R#{rate_key}"}, "sk": {"S": "R"}}


def rate_update(db: Table, keys: Keys, job: Item, now: int) -> tuple[dict[str, Any], int] | None:
    """The transaction update taking one claim of ``job``'s rate key at ``now`` and the
    claim's ``start_by`` (the time it keeps: ``now + RATE_START_MS``), or ``None`` when
    the rate does not allow one now."""
    key = _rate_key(keys, job["rtk"])
    current = db.get(key)
    stamps: list[int] = json.loads(current["tj"]) if current is not None else []
    granted, kept = rate_grant(stamps, now, int(job["rtl"]), int(job["rtw"]), 1)
    if not granted:
        return None
    start_by = kept[-1]  # rate_grant appends the granted claim's time last
    sets = {"tj": json.dumps(kept), "ttl": (start_by + int(job["rtw"])) // 1000 + 3600}
    if current is None:
        return db.update(key, sets, cond="attribute_not_exists(pk)"), start_by
    update = db.update(key, sets, cond="#v = :ver", cond_values={"ver": current["v"]})
    return update, start_by


class Limits:
    """:class:`~queue_core.storage.abilities.SupportsUniqueJobs` and
    :class:`~queue_core.storage.abilities.SupportsRateLimits` of the SQS storage; its
    :meth:`enqueue` is the storage's (plain jobs go to ``jobs``)."""

    def __init__(self, store: Store, jobs: Jobs) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys
        self.jobs = jobs

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        """See :meth:`queue_core.storage.abilities.SupportsRateLimits.rate_usage`: claims
        of ``rate_key`` that started in ``(now - window_ms, now]``."""
        t = self.store.now(now)
        with translate("rate usage"):
            current = self.db.get(_rate_key(self.keys, rate_key))
        stamps: list[int] = json.loads(current["tj"]) if current is not None else []
        return sum(1 for s in stamps if s > t - window_ms)

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.protocol.Storage.enqueue`."""
        if any(j.unique_key is not None for j in jobs):
            return [e.state for e in self.enqueue_unique(jobs, now=now)]
        return self.jobs.enqueue(jobs, now=now)

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """See :meth:`queue_core.storage.abilities.SupportsUniqueJobs.enqueue_unique`. Each
        job is stored (or not) on its own, in order; a job with a key takes it first."""
        t = self.store.now(now)
        if len({j.id for j in jobs}) != len(jobs):
            raise StorageError("sqs backend: duplicate job id within one enqueue batch")
        out: list[Enqueued] = []
        for j in jobs:
            if j.unique_key is None:
                out.append(Enqueued(j.id, self.jobs.enqueue([j], now=t)[0]))
            else:
                out.append(self._enqueue_keyed(j, j.unique_key, t))
        return out

    def _enqueue_keyed(self, job: NewJob, unique_key: str, t: int) -> Enqueued:
        key = {"pk": {"S": f"{self.keys.p}U#{unique_key}"}, "sk": {"S": "U"}}
        with translate("enqueue"):
            for _ in range(_RETRIES):
                current = self.db.get(key)
                held = self._holder(current, t)
                if held is not None:
                    return held
                if self._take(key, current, job, t):
                    break
            else:
                raise StorageError(f"sqs backend: unique key {unique_key!r} kept changing")
        try:
            state = self.jobs.enqueue([job], now=t)[0]
        except BaseException:
            with translate("enqueue"):
                self._give_back(key, job.id)
            raise
        return Enqueued(job.id, state)

    def _holder(self, current: Item | None, t: int) -> Enqueued | None:
        """The job holding the key whose item is ``current``, or ``None``."""
        if current is None:
            return None
        job = self.db.get(self.keys.job(current["jid"]))
        if job is None:  # being stored (taken moments ago), or pruned long ago
            if t < int(current["enq"]) + PENDING_MS:
                return Enqueued(current["jid"], JobState.QUEUED, existing=True)
            return None
        if unique_holds(job["st"], int(current["enq"]), current.get("uf"), t):
            return Enqueued(current["jid"], JobState(job["st"]), existing=True)
        return None

    def _take(self, key: dict[str, Any], current: Item | None, job: NewJob, t: int) -> bool:
        """Make ``job`` the key's holder if the item still is ``current``."""
        item = {
            "pk": key["pk"]["S"],
            "sk": "U",
            "jid": job.id,
            "enq": t,
            "uf": job.unique_for_ms,
            "ttl": self.store.ttl(t + (job.unique_for_ms or 0)),
        }
        op: dict[str, Any] = {"TableName": self.db.name, "Item": encode_item(item)}
        if current is None:
            op["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            op["ConditionExpression"] = "jid = :old"
            op["ExpressionAttributeValues"] = vals(old=current["jid"])
        return _conditional(self.db.client.put_item, op)

    def _give_back(self, key: dict[str, Any], job_id: str) -> None:
        """Free the key taken for a job that could not be stored."""
        _conditional(
            self.db.client.delete_item,
            {
                "TableName": self.db.name,
                "Key": key,
                "ConditionExpression": "jid = :me",
                "ExpressionAttributeValues": vals(me=job_id),
            },
        )


def _conditional(call: Any, op: dict[str, Any]) -> bool:
    try:
        call(**op)
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False
        raise
    return True
