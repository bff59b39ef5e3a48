"""Periodic ticks on DynamoDB (:class:`~queue_core.schedules.SupportsSchedules`).

One item per storage (``<prefix>SCHED``) holds the last tick of every schedule, one
attribute ``s#<name>`` each. ``enqueue_tick`` is one ``TransactWriteItems``: the
conditional update of that attribute (only to a later tick) with the put of the tick's
job (and its payload chunks and concurrency counter), so exactly one of any number of
racing schedulers stores the tick's job. The delivery hint follows, as for every
enqueue.
"""

from __future__ import annotations

from typing import Any

from backends.sqs.base import SEQ
from backends.sqs.codec import Item, new_item
from backends.sqs.dynamo import TxCancelled
from backends.sqs.errors import translate
from queue_core.errors import StorageError
from queue_core.model import JobState, NewJob, Reason

__all__ = ["SQSSchedules"]

_FAILED = "ConditionalCheckFailed"
_ATTR = "s#"


class SQSSchedules:
    """Mixed into :class:`~backends.sqs.SQSStorage` (whose table, keys, clock and
    delivery hints it uses)."""

    def _ticks_key(self) -> dict[str, Any]:
        me: Any = self
        return {"pk": {"S": f"{me.keys.p}SCHED"}, "sk": {"S": "S"}}

    def _tick_update(self, schedule: str, tick_ms: int) -> dict[str, Any]:
        me: Any = self
        return {
            "Update": {
                "TableName": me.db.name,
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
        """See :meth:`queue_core.schedules.SupportsSchedules.enqueue_tick`."""
        me: Any = self
        t = me._now(now)
        (seq,) = SEQ.take(1)
        item: Item = new_item(me.keys, job, t, seq)
        chunks = me.db.chunk_puts(item["pk"], job.payload) if item.get("plc") else []
        key = job.concurrency_key
        counter: list[dict[str, Any]] = []
        if key is not None and job.concurrency_skip:
            limit = {"limit_on": "act", "limit": job.concurrency_limit}
            counter = [{"Update": me.db.counter(me.keys.counter(key), act=1, **limit)}]
        elif key is not None:
            counter = [{"Update": me.db.counter(me.keys.counter(key), act=1)}]
        tick = self._tick_update(schedule, tick_ms)
        with translate("enqueue_tick"):
            try:
                me.db.transact([tick, me.db.put(item), *counter, *chunks])
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
            me._hint([item], t)
        return True

    def _store_skipped(
        self, tick: dict[str, Any], item: Item, chunks: list[dict[str, Any]], t: int
    ) -> None:
        """The tick's job is over its ``skip`` limit: store it ``skipped`` with the tick."""
        me: Any = self
        sets, removes = me._finished_fields(JobState.SKIPPED, t)
        skipped = {k: v for k, v in item.items() if k not in (*removes, "dp", "dx")}
        skipped.update(sets, rsn=Reason.CONCURRENCY_LIMIT.value)
        try:
            me.db.transact([tick, me.db.put(skipped), *chunks])
        except TxCancelled:
            raise StorageError("sqs backend: enqueue transaction conflicted") from None

    def schedule_ticks(self) -> dict[str, int]:
        """See :meth:`queue_core.schedules.SupportsSchedules.schedule_ticks`."""
        me: Any = self
        with translate("schedule_ticks"):
            found = me.db.get(self._ticks_key()) or {}
        return {k[len(_ATTR) :]: int(v) for k, v in found.items() if k.startswith(_ATTR)}
