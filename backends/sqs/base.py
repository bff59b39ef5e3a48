"""State shared by the SQS backend's operations, and the writes that end an attempt.

:class:`~backends.sqs.storage.SQSStorage` is assembled from mixins by concern
(``claiming``: enqueue and claim; ``attempts``: renew, heartbeat, finish, reap;
``admin``: cancel, prune, reads, dead letters), all on this base.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from backends.sqs.codec import (
    Item,
    Keys,
    current_attempt,
    dead_entry,
    encode_item,
    error_map,
    vals,
)
from backends.sqs.delivery import Delivery
from backends.sqs.dynamo import Table
from backends.sqs.flow_items import event_sk
from queue_core.model import ErrorInfo, JobState, Outcome

__all__ = ["SEQ", "StorageBase"]


class _Seq:
    """Process-wide strictly increasing enqueue sequence (microseconds of wall time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def take(self, n: int) -> list[int]:
        with self._lock:
            base = max(self._last + 1, time.time_ns() // 1000)
            self._last = base + n - 1
            return list(range(base, base + n))


SEQ = _Seq()


def _attempt_sets(
    outcome: Outcome, reason: str | None, error: ErrorInfo | None, mode: str | None, now: int
) -> Item:
    """SET values of an attempt item as the attempt ends."""
    sets: Item = {"oc": outcome.value, "rsn": reason, "fa": now, "mode": mode}
    if error is not None:
        sets.update(
            ec=error.error_class, et=error.error_type, msg=error.message, tb=error.traceback
        )
    return sets


class StorageBase:
    """What every operation of the SQS storage uses."""

    db: Table
    keys: Keys
    delivery: Delivery
    retention_ms: int
    _clock: Callable[[], int]
    _lock: threading.Lock
    # claimed job items by (job id, attempt, token): spares a read at finish
    _claimed: dict[tuple[str, int, str], Item]

    def _now(self, now: int | None) -> int:
        return self._clock() if now is None else now

    def _ttl(self, finished_at: int) -> int:
        # never earlier than retention after the real write time, whatever `now` said
        return (max(finished_at, self._clock()) + self.retention_ms) // 1000 + 3600

    def _finished_fields(self, state: JobState, now: int) -> tuple[Item, list[str]]:
        return self.keys.finished_fields(state, now, self._ttl(now))

    def _read_jobs(self, job_ids: Sequence[str]) -> dict[str, Item]:
        """Job items by id (consistent BatchGetItem); missing ids are left out."""
        keys = [self.keys.job(j) for j in dict.fromkeys(job_ids)]
        return {it["id"]: it for it in self.db.batch_get(keys)}

    def _attempt_items(self, job_id: str) -> list[Item]:
        return self.db.attempts(self.keys.job_pk(job_id))

    def _dead_puts(
        self, job: Item, reason: str, error: ErrorInfo | None, attempts: list[Item], now: int
    ) -> tuple[str, list[dict[str, Any]]]:
        """A new dead-letter entry for ``job``: its id and the Put actions storing it."""
        dead_id = uuid.uuid4().hex
        payload = self.db.payload(job)
        entry = dead_entry(
            self.keys,
            job,
            payload,
            dead_id=dead_id,
            reason=reason,
            error=error,
            attempts=attempts,
            now=now,
        )
        puts = [self.db.put(entry)]
        if entry.get("plc"):
            puts += self.db.chunk_puts(entry["pk"], payload)
        return dead_id, puts

    def _end_actions(
        self,
        job: Item,
        outcome: Outcome,
        attempt_reason: str | None,
        error: ErrorInfo | None,
        mode: str | None,
        now: int,
        *,
        state: JobState,
        job_reason: str | None,
        cond: str,
        cond_values: Item,
        ready_at: int | None = None,
        result: bytes | None = None,
        lost_delay_ms: int | None = None,
        event: bool = True,
    ) -> tuple[list[dict[str, Any]], Item]:
        """The writes that end the current attempt of ``job`` and put the job in ``state``
        with ``job_reason`` (``queued`` ones ready at ``ready_at``), as decided by
        :func:`~queue_core.policy.outcomes.end_state` or ``reap_verdict``; and the SET
        values of the job item. A flow step's end also records its step-end event
        (unless ``event`` is false: the flow's own deadline ending it)."""
        att_sets = _attempt_sets(outcome, attempt_reason, error, mode, now)
        inline = state is JobState.SUCCEEDED and error is None
        inline = inline and job.get("ck") is None and job.get("xid") is None
        actions: list[dict[str, Any]] = [] if inline else [self._attempt_put(job, att_sets)]
        if state is JobState.QUEUED:
            sets, removes = self.keys.queued_fields(job, now if ready_at is None else ready_at, now)
            sets["rsn"] = None
            if lost_delay_ms is not None:
                sets["ld"] = lost_delay_ms
        else:
            sets, removes = self._finished_fields(state, now)
            sets["rsn"] = job_reason
            if state is JobState.SUCCEEDED:
                sets["res"] = result
            if inline:  # the job item keeps the ended attempt: see current_attempt
                sets.update(ao=outcome.value, ar=attempt_reason, am=mode)
            if state is JobState.DEAD:
                sets["did"], puts = self._dead_after(job, att_sets, job_reason, error, now)
                actions += puts
        if error is not None:
            sets["err"] = error_map(error)
        job_update = self.db.update(
            self.keys.job(job["id"]), sets, removes, cond=cond, cond_values=cond_values
        )
        actions.insert(0, {"Update": job_update})
        if job.get("ck") is not None:
            dec_act = 0 if state is JobState.QUEUED else -1
            counter = self.db.counter(self.keys.counter(job["ck"]), run=-1, act=dec_act)
            actions.append({"Update": counter})
        if event and job.get("xid") is not None:
            actions += self._step_event(job, state, job_reason, result, now)
        return actions, sets

    def _attempt_put(self, job: Item, att_sets: Item) -> dict[str, Any]:
        """The Put storing the record of ``job``'s current attempt as it ends.

        A running attempt's record lives on the job item (``att``, ``wk``, ``sa``, written
        by the claim); it becomes its own item in the transaction that ends the attempt
        (fenced by the job item's condition). Unconditional: an attempt item written at
        claim by an earlier version holds the same start fields and is overwritten."""
        record = current_attempt(job)
        record.update({k: v for k, v in att_sets.items() if v is not None})
        return {"Put": {"TableName": self.db.name, "Item": encode_item(record)}}

    def _step_event(
        self,
        job: Item,
        state: JobState,
        reason: str | None,
        result: bytes | None,
        now: int,
        *,
        queued: bool = False,
    ) -> list[dict[str, Any]]:
        """Puts recording the end of step job ``job`` (new ``state``) in its execution:
        the event, and for a success the result (kept for ``get_step_inputs``)."""
        eid, idx = job["xid"], int(job["id"].rsplit(".", 1)[1])
        pk = f"{self.keys.p}X#{eid}"
        ev = {
            "pk": pk,
            "sk": event_sk(idx, int(job.get("att", 0)), queued),
            "i": idx,
            "n": int(job.get("att", 0)),
            "st": state.value,
            "rsn": reason,
            "dp": f"{self.keys.p}XA",
            "dx": now,
        }
        out = [{"Put": {"TableName": self.db.name, "Item": encode_item(ev)}}]
        if state is JobState.SUCCEEDED:
            res = {"pk": pk, "sk": f"O#{idx:06d}", "d": result or b""}
            out.append({"Put": {"TableName": self.db.name, "Item": encode_item(res)}})
        return out

    def _dead_after(
        self, job: Item, att_sets: Item, reason: str | None, error: ErrorInfo | None, now: int
    ) -> tuple[str, list[dict[str, Any]]]:
        """The dead-letter entry of ``job`` whose current attempt ends with ``att_sets``:
        every attempt record, the current one as it ends."""
        n = job["att"]
        prior = [a for a in self._attempt_items(job["id"]) if a["n"] != n]
        current = {**current_attempt(job), **att_sets}
        current = {k: v for k, v in current.items() if v is not None}
        atts = sorted([*prior, current], key=lambda a: a["n"])
        return self._dead_puts(job, reason or "", error, atts, now)

    def _promote(self, now: int, limit: int = 100) -> None:
        """Move parked jobs that are due by ``now`` into the ready index."""
        parked = self.db.query(
            IndexName="due",
            KeyConditionExpression="dp = :dp AND dx <= :now",
            ExpressionAttributeValues=vals(dp=self.keys.parked, now=now),
            Limit=limit,
        )
        for item in parked:
            sets, removes = self.keys.queued_fields(item, item["ra"], now)
            self.db.update_if(
                self.db.update(
                    self.keys.job(item["id"]),
                    sets,
                    removes,
                    cond="st = :q AND v = :v",
                    cond_values={"q": "queued", "v": item["v"]},
                )
            )

    def _hint(self, items: Sequence[Item], now: int) -> None:
        self.delivery.hint(items, now)
