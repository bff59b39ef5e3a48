"""Jobs in and out: enqueue, cancel, and the reads of jobs and queues."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from backends.sqs.codec import (
    Item,
    all_index_query,
    attempt_record,
    decode_item,
    new_item,
    vals,
    with_current_attempt,
)
from backends.sqs.dynamo import TX_MAX, TxCancelled
from backends.sqs.errors import translate
from backends.sqs.pauses import Pauses
from backends.sqs.store import SEQ, Store
from backends.sqs.tables import DUE_TYPE, due_by
from backends.sqs.writes import Writes
from queue_core.records.errors import NotFound, StorageError
from queue_core.records.jobs import AttemptRecord, JobRecord, JobState, NewJob, Reason
from queue_core.rules.paging import check_page

if TYPE_CHECKING:
    from backends.sqs.flows import SQSFlows

__all__ = ["Jobs"]

_FAILED = "ConditionalCheckFailed"


def _newest_first(it: Any) -> tuple[int, int]:
    """A listed item's order (enqueued, sequence); a corrupt item's missing or mistyped
    value counts as 0, so the listing still shows it (salvaged) instead of failing."""
    enq, seq = it.get("enq"), it.get("seq")
    return (enq if isinstance(enq, int) else 0, seq if isinstance(seq, int) else 0)


class Jobs:
    """``enqueue``, ``cancel`` and the job reads of the SQS storage.

    Args:
        store: the storage's store.
        writes: builds the writes that end a job unrun (a cancel, a ``skip`` limit).
        pauses: the pauses (``count_pending`` leaves paused queued jobs out).
        flows: the flows part (built on first use): a cancelled queued step records its
            event in the same transaction, and its execution advances after it.
    """

    def __init__(
        self, store: Store, writes: Writes, pauses: Pauses, flows: Callable[[], SQSFlows]
    ) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys
        self.writes = writes
        self.pauses = pauses
        self.flows = flows

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.protocol.Storage.enqueue` (without unique keys:
        :class:`~backends.sqs.limits.Limits` takes those).

        Jobs without a ``skip`` concurrency limit go in one ``TransactWriteItems`` per
        100 items (all or nothing: a duplicate id stores none of that chunk); each
        ``skip`` job is its own transaction with a guarded counter update, so earlier
        jobs of the batch count against later ones.
        """
        t = self.store.now(now)
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
            self.store.hint(queued, t)
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
                self._tx_or_duplicate(self.writes.put_new(item, spec.payload))
                continue
            plain.append(self.db.put(item))
            if spec.concurrency_key is not None:
                keyed[spec.concurrency_key] = keyed.get(spec.concurrency_key, 0) + 1
        # counters of queue-behaviour keys ride in the same transaction
        plain += [
            {"Update": self.db.counter(self.keys.counter(k), act=n)} for k, n in keyed.items()
        ]
        for i in range(0, len(plain), TX_MAX):
            self._tx_or_duplicate(plain[i : i + TX_MAX])

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
        skipped = self.writes.skipped(item, t)
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

    # ------------------------------------------------------------------ cancel

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """See :meth:`queue_core.storage.protocol.Storage.cancel` (read, then a conditional
        write; a queued step's end records its event and advances its execution)."""
        t = self.store.now(now)
        with translate("cancel"):
            while True:
                job = self.db.get(self.keys.job(job_id))
                if job is None:
                    raise NotFound(f"no job with id {job_id!r}")
                state = JobState(job["st"])
                try:
                    if state is JobState.QUEUED:
                        self._cancel_queued(job, t)
                        return JobState.CANCELLED
                    if state is JobState.RUNNING:
                        update = self.db.update(
                            self.keys.job(job_id),
                            {"cxl": True},
                            cond="v = :ver",
                            cond_values={"ver": job["v"]},
                        )
                        self.db.transact([{"Update": update}])
                    return state
                except TxCancelled:
                    continue

    def _cancel_queued(self, job: Item, t: int) -> None:
        reason = Reason.CANCELLED.value
        actions = self.writes.end_queued(job, JobState.CANCELLED, reason, t)
        if job.get("xid") is None:
            self.db.transact(actions)
            return
        flows = self.flows()
        self.db.transact(
            actions + flows.step_event(job, JobState.CANCELLED, reason, t, queued=True)
        )
        flows.after_ends([job["xid"]], t)

    # ------------------------------------------------------------------ reads

    def get_job(self, job_id: str) -> JobRecord | None:
        """See :meth:`queue_core.storage.protocol.Storage.get_job` (one consistent GetItem)."""
        with translate("get_job"):
            item = self.db.get(self.keys.job(job_id))
            return self.db.record(item) if item else None

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """See :meth:`queue_core.storage.protocol.Storage.list_attempts` (one consistent
        Query of the job's attempt items and its job item, which holds a running attempt)."""
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
        """See :meth:`queue_core.storage.protocol.Storage.count_pending` (queued jobs a
        pause matches are left out).

        Reads only the sparse partitions a pending job is in: running jobs (``due``
        index, ``P R``), parked jobs due by the horizon (``P P``) and each queue's ready
        partition (a job moved aside for a pause is in none). It read the ``all`` index,
        which holds every kept finished job too: a burst worker's end check read the
        whole history (issue 30)."""
        by = self.store.now(now) + horizon_ms
        wanted = list(dict.fromkeys(queues))
        if not wanted:
            return 0
        names = {f":q{i}": {"S": q} for i, q in enumerate(wanted)}
        inq = ", ".join(names)
        with translate("count_pending"):
            unpaused, pause_values = self.pauses.pending_filter()
            queued = f"st = :qd AND {due_by('by')}{unpaused}"
            queued_values = {**vals(qd="queued", by=by, **pause_values), **DUE_TYPE}
            n = self.db.count(
                IndexName="due",
                KeyConditionExpression="dp = :dp",
                FilterExpression=f"q IN ({inq}) AND st = :run",
                ExpressionAttributeValues={**vals(dp=self.keys.running, run="running"), **names},
            )
            n += self.db.count(
                IndexName="due",
                KeyConditionExpression="dp = :dp AND dx <= :by",
                FilterExpression=f"q IN ({inq}) AND {queued}",
                ExpressionAttributeValues={**vals(dp=self.keys.parked), **queued_values, **names},
            )
            for q in wanted:
                n += self.db.count(
                    IndexName="ready",
                    KeyConditionExpression="rq = :rq",
                    FilterExpression=queued,
                    ExpressionAttributeValues={**vals(rq=self.keys.ready(q)), **queued_values},
                )
            return n

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """A page of jobs, newest (latest enqueued) first, optionally filtered
        (:class:`~queue_core.storage.abilities.SupportsJobScan`). Pages the ``all`` index;
        meant for dashboards and the CLI, not for hot paths."""
        limit, offset = check_page(limit, offset)
        kw = all_index_query(self.keys.p, st=None if state is None else state.value, q=queue)
        with translate("list_jobs"):
            items = self.db.query(**kw)
            items.sort(key=_newest_first, reverse=True)
            return [self.db.record(it) for it in items[offset : offset + max(0, limit)]]
