"""Control and reads: cancel, prune, job and queue reads, dead letters."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from backends.sqs.base import SEQ
from backends.sqs.codec import (
    Item,
    all_index_query,
    attempt_record,
    dead_job,
    job_record,
    new_item,
    spec_from_dead,
    vals,
    with_current_attempt,
)
from backends.sqs.dynamo import TxCancelled
from backends.sqs.errors import translate
from backends.sqs.flow_apply import FlowApply
from queue_core.errors import NotFound, StorageError
from queue_core.model import AttemptRecord, DeadJob, JobRecord, JobState, QueueStats, Reason
from queue_core.policy.outcomes import replay_job

__all__ = ["Admin"]


class Admin(FlowApply):
    """``cancel``, ``prune``, the reads and the dead-letter operations."""

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """See :meth:`queue_core.storage.Storage.prune`. Queries the finished index by
        ``finished_at`` and deletes jobs and attempt records with BatchWriteItem; items
        it misses are removed by the table's TTL. Retention 0 prunes every job finished
        at or before ``now``."""
        cutoff = self._now(now) - self.retention_ms
        with translate("prune"):
            done = self.db.query(
                IndexName="due",
                KeyConditionExpression="dp = :p AND dx <= :cut",
                ExpressionAttributeValues=vals(p=self.keys.finished, cut=cutoff),
                Limit=limit,
            )[:limit]
            keys: list[dict[str, Any]] = []
            for it in done:
                keys.append(self.keys.job(it["id"]))
                keys += [self.keys.attempt(it["id"], n) for n in range(1, it.get("att", 0) + 1)]
                keys += self.keys.chunks(it["pk"], it.get("plc"))
            self.db.batch_delete(keys)
            self._prune_flows(cutoff, limit)
        return len(done)

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """See :meth:`queue_core.storage.Storage.cancel` (read, then a conditional write)."""
        t = self._now(now)
        with translate("cancel"):
            while True:
                job = self.db.get(self.keys.job(job_id))
                if job is None:
                    raise NotFound(f"no job with id {job_id!r}")
                state = JobState(job["st"])
                try:
                    if state is JobState.QUEUED:
                        self.db.transact(self._cancel_queued(job, t))
                        if job.get("xid") is not None:
                            self._after_ends([job["xid"]], t)
                        return JobState.CANCELLED
                    if state is JobState.RUNNING:
                        self.db.transact(
                            [
                                {
                                    "Update": self.db.update(
                                        self.keys.job(job_id),
                                        {"cxl": True},
                                        cond="v = :ver",
                                        cond_values={"ver": job["v"]},
                                    )
                                }
                            ]
                        )
                    return state
                except TxCancelled:
                    continue

    def _cancel_queued(self, job: Item, t: int) -> list[dict[str, Any]]:
        sets, removes = self._finished_fields(JobState.CANCELLED, t)
        sets["rsn"] = Reason.CANCELLED.value
        actions = [
            {
                "Update": self.db.update(
                    self.keys.job(job["id"]),
                    sets,
                    removes,
                    cond="v = :ver",
                    cond_values={"ver": job["v"]},
                )
            }
        ]
        if job.get("ck") is not None:
            actions.append({"Update": self.db.counter(self.keys.counter(job["ck"]), act=-1)})
        if job.get("xid") is not None:
            actions += self._step_event(job, JobState.CANCELLED, sets["rsn"], None, t, queued=True)
        return actions

    # ------------------------------------------------------------------ reads

    def get_job(self, job_id: str) -> JobRecord | None:
        """See :meth:`queue_core.storage.Storage.get_job` (one consistent GetItem)."""
        with translate("get_job"):
            item = self.db.get(self.keys.job(job_id))
            return job_record(item, self.db.payload(item)) if item else None

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """See :meth:`queue_core.storage.Storage.list_attempts` (one consistent Query of
        the job's attempt items and its job item, which holds a running attempt)."""
        with translate("list_attempts"):
            items = self.db.query(
                KeyConditionExpression="pk = :pk AND sk BETWEEN :a AND :j",
                ExpressionAttributeValues=vals(pk=self.keys.job_pk(job_id), a="A#", j="J"),
                ConsistentRead=True,
            )
        return [attempt_record(a) for a in with_current_attempt(items)]

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.Storage.count_pending`."""
        by = self._now(now) + horizon_ms
        wanted = list(dict.fromkeys(queues))
        if not wanted:
            return 0
        names = {f":q{i}": {"S": q} for i, q in enumerate(wanted)}
        inq = ", ".join(names)
        with translate("count_pending"):
            return self.db.count(
                IndexName="all",
                KeyConditionExpression="ap = :ap",
                FilterExpression=f"q IN ({inq}) AND (st = :run OR (st = :qd AND ra <= :by))",
                ExpressionAttributeValues={
                    **vals(ap=self.keys.p, run="running", qd="queued", by=by),
                    **names,
                },
            )

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """See :meth:`queue_core.storage.Storage.stats` (one paged Query of the ``all``
        index, projecting queue, state and ready time)."""
        t = self._now(now)
        counts: dict[str, dict[str, int]] = {}
        with translate("stats"):
            for it in self.db.query(
                IndexName="all",
                KeyConditionExpression="ap = :ap",
                ProjectionExpression="q, st, ra",
                ExpressionAttributeValues=vals(ap=self.keys.p),
            ):
                c = counts.setdefault(it["q"], {})
                name = it["st"]
                if name == "queued":
                    name = "ready" if it["ra"] <= t else "scheduled"
                c[name] = c.get(name, 0) + 1
        return [QueueStats(queue=q, **counts[q]) for q in sorted(counts)]

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """A page of jobs, newest (latest enqueued) first, optionally filtered
        (:class:`~queue_core.storage.SupportsJobScan`). Pages the ``all`` index; meant
        for dashboards and the CLI, not for hot paths."""
        kw = all_index_query(self.keys.p, st=None if state is None else state.value, q=queue)
        with translate("list_jobs"):
            items = self.db.query(**kw)
            items.sort(key=lambda it: (it["enq"], it["seq"]), reverse=True)
            return [
                job_record(it, self.db.payload(it)) for it in items[offset : offset + max(0, limit)]
            ]

    # ------------------------------------------------------------------ dead letters

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """See :meth:`queue_core.storage.Storage.list_dead`.

        Newest first from the ``dead`` (or ``deadtask``) index. DynamoDB has no offset:
        pages of ``Limit`` are read with ``ExclusiveStartKey`` and the first ``offset``
        entries skipped.
        """
        if limit <= 0:
            return []
        index, attr, part = self.keys.dead_partition(task_name)
        with translate("list_dead"):
            got = self.db.query_page(
                offset + limit,
                IndexName=index,
                KeyConditionExpression=f"{attr} = :p",
                ExpressionAttributeValues=vals(p=part),
                ScanIndexForward=False,
            )
            return [dead_job(d, self.db.payload(d)) for d in got[offset : offset + limit]]

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """See :meth:`queue_core.storage.Storage.get_dead` (one GetItem)."""
        with translate("get_dead"):
            item = self.db.get(self.keys.dead(dead_id))
            return dead_job(item, self.db.payload(item)) if item else None

    def retry_dead(self, dead_id: str, queue: str | None = None, *, now: int | None = None) -> str:
        """See :meth:`queue_core.storage.Storage.retry_dead`: one transaction deletes the
        entry (conditional on its existence) and puts the job that
        :func:`~queue_core.policy.outcomes.replay_job` rebuilds from the entry's spec."""
        t = self._now(now)
        with translate("retry_dead"):
            d = self.db.get(self.keys.dead(dead_id))
            if d is None:
                raise NotFound(f"no dead-letter entry with id {dead_id!r}")
            spec = replay_job(
                spec_from_dead(d, self.db.payload(d)),
                dead_id=dead_id,
                new_id=uuid.uuid4().hex,
                queue=queue,
                now=t,
            )
            item = new_item(self.keys, spec, t, SEQ.take(1)[0])
            actions: list[dict[str, Any]] = [
                {
                    "Delete": {
                        "TableName": self.db.name,
                        "Key": self.keys.dead(dead_id),
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
                self.db.put(item),
            ]
            if item.get("plc"):
                actions += self.db.chunk_puts(item["pk"], spec.payload)
            actions += [
                {"Delete": {"TableName": self.db.name, "Key": k}}
                for k in self.keys.chunks(d["pk"], d.get("plc"))
            ]
            if spec.concurrency_key is not None:
                actions.append(
                    {"Update": self.db.counter(self.keys.counter(spec.concurrency_key), act=1)}
                )
            try:
                self.db.transact(actions)
            except TxCancelled as exc:
                if exc.codes and exc.codes[0] == "ConditionalCheckFailed":
                    raise NotFound(f"no dead-letter entry with id {dead_id!r}") from None
                raise StorageError("sqs backend: retry_dead conflicted; try again") from None
            self._hint([item], t)
        return spec.id

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """See :meth:`queue_core.storage.Storage.purge_dead` (Query the dead index, then
        BatchWriteItem deletes)."""
        index, attr, part = self.keys.dead_partition(task_name)
        cond = f"{attr} = :p"
        values = vals(p=part)
        if before is not None:
            cond += " AND lx <= :b"
            values.update(vals(b=f"{before:016d}#~"))
        with translate("purge_dead"):
            items = self.db.query(
                IndexName=index,
                KeyConditionExpression=cond,
                ExpressionAttributeValues=values,
                ProjectionExpression="id, pk, plc",
            )
            keys: list[dict[str, Any]] = []
            for it in items:
                keys.append(self.keys.dead(it["id"]))
                keys += self.keys.chunks(it["pk"], it.get("plc"))
            self.db.batch_delete(keys)
        return len(items)
