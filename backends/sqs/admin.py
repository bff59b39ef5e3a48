"""Administration: dead letters (list, get, retry, purge), stats and prune."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from backends.sqs.blobs import side_keys
from backends.sqs.codec import new_item, spec_from_dead, vals
from backends.sqs.dynamo import TxCancelled
from backends.sqs.errors import translate
from backends.sqs.store import SEQ, Store
from backends.sqs.writes import Writes
from queue_core.records.errors import NotFound, StorageError
from queue_core.records.jobs import DeadJob, QueueStats
from queue_core.rules.outcomes import replay_job
from queue_core.rules.paging import check_page
from queue_core.storage.job_ids import new_job_id

if TYPE_CHECKING:
    from backends.sqs.flows import SQSFlows
    from backends.sqs.workflows import SQSWorkflows

__all__ = ["Admin"]


class Admin:
    """``prune``, ``stats`` and the dead-letter operations of the SQS storage.

    Args:
        store: the storage's store.
        writes: builds the writes storing a replayed job.
        flows: the flows part (built on first use, once the deployment has flows):
            ``prune`` removes finished executions too.
        workflows: the workflows part (built on first use): ``retry_dead`` of a flow
            step's entry resumes its execution; ``prune`` removes old events.
    """

    def __init__(
        self,
        store: Store,
        writes: Writes,
        flows: Callable[[], SQSFlows],
        workflows: Callable[[], SQSWorkflows],
    ) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys
        self.writes = writes
        self.flows = flows
        self.workflows = workflows

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.prune`. Queries the finished
        index by ``finished_at`` and deletes jobs and attempt records with BatchWriteItem;
        items it misses are removed by the table's TTL. Retention 0 prunes every job
        finished at or before ``now``."""
        cutoff = self.store.now(now) - self.store.retention_ms
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
                keys += side_keys(it)
            self.db.batch_delete(keys)
            pruned = len(done)
            if self.store.flows_exist():
                pruned += self.flows().prune(cutoff, limit)
                self.workflows().prune_events(cutoff, limit)
        return pruned

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """See :meth:`queue_core.storage.protocol.Storage.stats` (one paged Query of the
        ``all`` index, projecting queue, state and ready time)."""
        t = self.store.now(now)
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
                if name == "queued":  # a corrupt ready time counts as ready (claim ends it)
                    ra = it.get("ra")
                    name = "scheduled" if isinstance(ra, int) and ra > t else "ready"
                c[name] = c.get(name, 0) + 1
        return [QueueStats(queue=q, **counts[q]) for q in sorted(counts)]

    # ------------------------------------------------------------------ dead letters

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """See :meth:`queue_core.storage.protocol.Storage.list_dead`.

        Newest first from the ``dead`` (or ``deadtask``) index. DynamoDB has no offset:
        pages of ``Limit`` are read with ``ExclusiveStartKey`` and the first ``offset``
        entries skipped.
        """
        limit, offset = check_page(limit, offset)
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
            return [self.db.dead(d) for d in got[offset : offset + limit]]

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """See :meth:`queue_core.storage.protocol.Storage.get_dead` (one GetItem)."""
        with translate("get_dead"):
            item = self.db.get(self.keys.dead(dead_id))
            return self.db.dead(item) if item else None

    def retry_dead(self, dead_id: str, queue: str | None = None, *, now: int | None = None) -> str:
        """See :meth:`queue_core.storage.protocol.Storage.retry_dead`: one transaction
        deletes the entry (conditional on its existence) and puts the job that
        :func:`~queue_core.rules.outcomes.replay_job` rebuilds from the entry's spec."""
        t = self.store.now(now)
        with translate("retry_dead"):
            d = self.db.get(self.keys.dead(dead_id))
            if d is None:
                raise NotFound(f"no dead-letter entry with id {dead_id!r}")
            if d.get("spec", {}).get("xid") is not None:  # a flow step's: resume its execution
                return self.workflows().retry_dead_step(d, t)
            spec = replay_job(
                spec_from_dead(d, self.db.payload(d)),
                dead_id=dead_id,
                new_id=new_job_id(),
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
                *self.writes.put_new(item, spec.payload),
            ]
            actions += [{"Delete": {"TableName": self.db.name, "Key": k}} for k in side_keys(d)]
            try:
                self.db.transact(actions)
            except TxCancelled as exc:
                if exc.codes and exc.codes[0] == "ConditionalCheckFailed":
                    raise NotFound(f"no dead-letter entry with id {dead_id!r}") from None
                raise StorageError("sqs backend: retry_dead conflicted; try again") from None
            self.store.hint([item], t)
        return spec.id

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.purge_dead` (Query the dead
        index, then BatchWriteItem deletes)."""
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
                ProjectionExpression="id, pk, plc, atc",
            )
            keys: list[dict[str, Any]] = []
            for it in items:
                keys.append(self.keys.dead(it["id"]))
                keys += side_keys(it)
            self.db.batch_delete(keys)
        return len(items)
