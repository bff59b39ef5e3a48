"""Periodic ticks on DynamoDB (:class:`~queue_core.storage.abilities.SupportsSchedules`).

One item per storage (``<prefix>SCHED``) holds the last tick of every schedule, one
attribute ``s#<name>`` each. ``enqueue_tick`` is one ``TransactWriteItems``: the
conditional update of that attribute (only to a later tick) with the put of the tick's
job (and its payload chunks and concurrency counter), so exactly one of any number of
racing schedulers stores the tick's job. The delivery hint follows, as for every
enqueue.
"""

from __future__ import annotations

from typing import Any

from backends.sqs.codec import Item, new_item
from backends.sqs.dynamo import TxCancelled
from backends.sqs.errors import translate
from backends.sqs.store import SEQ, Store
from backends.sqs.writes import Writes
from queue_core.records.errors import StorageError
from queue_core.records.jobs import NewJob

__all__ = ["Schedules"]

_FAILED = "ConditionalCheckFailed"
_ATTR = "s#"


class Schedules:
    """The schedule ticks of the SQS storage (built on first use)."""

    def __init__(self, store: Store, writes: Writes) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys
        self.writes = writes

    def _ticks_key(self) -> dict[str, Any]:
        return {"pk": {"S": f"{self.keys.p}SCHED"}, "sk": {"S": "S"}}

    def _tick_update(self, schedule: str, tick_ms: int) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.db.name,
                "Key": self._ticks_key(),
                "UpdateExpression": "SET #n = :t",
                "ConditionExpression": "attribute_not_exists(#n) OR #n < :t",
                "ExpressionAttributeNames": {"#n": _ATTR + schedule},
                "ExpressionAttributeValues": {":t": {"N": str(tick_ms)}},
            }
        }

    def enqueue_tick(
        self, schedule: str, tick_ms: int, job: NewJob, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.storage.abilities.SupportsSchedules.enqueue_tick`."""
        t = self.store.now(now)
        (seq,) = SEQ.take(1)
        item: Item = new_item(self.keys, job, t, seq)
        chunks = self.db.chunk_puts(item["pk"], job.payload) if item.get("plc") else []
        key = job.concurrency_key
        counter: list[dict[str, Any]] = []
        if key is not None and job.concurrency_skip:
            limit: dict[str, Any] = {"limit_on": "act", "limit": job.concurrency_limit}
            counter = [{"Update": self.db.counter(self.keys.counter(key), act=1, **limit)}]
        elif key is not None:
            counter = [{"Update": self.db.counter(self.keys.counter(key), act=1)}]
        tick = self._tick_update(schedule, tick_ms)
        with translate("enqueue_tick"):
            try:
                self.db.transact([tick, self.db.put(item), *counter, *chunks])
            except TxCancelled as exc:
                codes = [*exc.codes, "", "", ""]
                if codes[0] == _FAILED:
                    return False
                if codes[1] == _FAILED:
                    raise StorageError(f"job id {job.id!r} already exists") from None
                if not (job.concurrency_skip and codes[2] == _FAILED):
                    raise StorageError("sqs backend: enqueue transaction conflicted") from None
                self._store_skipped(tick, item, chunks, t)
                return True
            self.store.hint([item], t)
        return True

    def _store_skipped(
        self, tick: dict[str, Any], item: Item, chunks: list[dict[str, Any]], t: int
    ) -> None:
        """The tick's job is over its ``skip`` limit: store it ``skipped`` with the tick."""
        try:
            self.db.transact([tick, self.db.put(self.writes.skipped(item, t)), *chunks])
        except TxCancelled:
            raise StorageError("sqs backend: enqueue transaction conflicted") from None

    def schedule_ticks(self) -> dict[str, int]:
        """See :meth:`queue_core.storage.abilities.SupportsSchedules.schedule_ticks`."""
        with translate("schedule_ticks"):
            found = self.db.get(self._ticks_key()) or {}
        return {k[len(_ATTR) :]: int(v) for k, v in found.items() if k.startswith(_ATTR)}
