"""Unique jobs of the SQS + DynamoDB backend: a conditional put of the key's item.

``U#<key>`` items name the last job stored with a unique key (``jid``), its enqueue
time (``enq``) and ``unique_for`` (``uf``). An enqueue reads the key's item and the
holder's state and asks :func:`queue_core.policy.limits.unique_holds`; when the key is
free it takes it with a conditional put (the key's item must still name the holder it
read -- a finished holder never becomes active again, so the decision stays true) and
then stores the job. Two enqueues racing for one key: one conditional put wins, the
other reads again and finds the winner.

A key's item that names a job not stored (yet) counts as held for
:data:`PENDING_MS` after its enqueue time: the winner stores its job right after
taking the key. Older, it is a pruned job (or an enqueue that crashed in between).
A key's item expires (DynamoDB TTL) one retention period after its enqueue time plus
``unique_for``: a job still queued that long loses its key.
Rate limits are applied by the claim (:mod:`backends.sqs.rates`); :meth:`rate_usage`
reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from backends.sqs.claiming import Claiming
from backends.sqs.codec import Item, encode_item, vals
from backends.sqs.errors import error_code, translate
from backends.sqs.rates import rate_usage
from queue_core.errors import StorageError
from queue_core.model import Enqueued, JobState, NewJob
from queue_core.policy.limits import unique_holds

__all__ = ["PENDING_MS", "UniqueJobs"]

PENDING_MS = 60_000
"""How long a key's item naming a job not stored counts as held (an enqueue in
progress)."""
_RETRIES = 20


class UniqueJobs(Claiming):
    """:class:`~queue_core.storage.SupportsUniqueJobs` and
    :class:`~queue_core.storage.SupportsRateLimits` for
    :class:`~backends.sqs.storage.SQSStorage` (``enqueue`` honours unique keys too)."""

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        """See :meth:`queue_core.storage.SupportsRateLimits.rate_usage`."""
        with translate("rate usage"):
            return rate_usage(self.db, self.keys, rate_key, window_ms, self._now(now))

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.Storage.enqueue`."""
        if any(j.unique_key is not None for j in jobs):
            return [e.state for e in self.enqueue_unique(jobs, now=now)]
        return super().enqueue(jobs, now=now)

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """See :meth:`queue_core.storage.SupportsUniqueJobs.enqueue_unique`. Each job is
        stored (or not) on its own, in order; a job with a key takes it first."""
        t = self._now(now)
        if len({j.id for j in jobs}) != len(jobs):
            raise StorageError("sqs backend: duplicate job id within one enqueue batch")
        out: list[Enqueued] = []
        for j in jobs:
            if j.unique_key is None:
                out.append(Enqueued(j.id, super().enqueue([j], now=t)[0]))
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
            state = super().enqueue([job], now=t)[0]
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
            "ttl": self._ttl(t + (job.unique_for_ms or 0)),
        }
        op: dict[str, Any] = {"TableName": self.db.name, "Item": encode_item(item)}
        if current is None:
            op["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            op["ConditionExpression"] = "jid = :old"
            op["ExpressionAttributeValues"] = vals(old=current["jid"])
        return self._conditional(self.db.client.put_item, op)

    def _give_back(self, key: dict[str, Any], job_id: str) -> None:
        """Free the key taken for a job that could not be stored."""
        self._conditional(
            self.db.client.delete_item,
            {
                "TableName": self.db.name,
                "Key": key,
                "ConditionExpression": "jid = :me",
                "ExpressionAttributeValues": vals(me=job_id),
            },
        )

    @staticmethod
    def _conditional(call: Any, op: dict[str, Any]) -> bool:
        try:
            call(**op)
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True
