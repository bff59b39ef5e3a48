"""Running attempts: lease renewal, heartbeats and finishing.

Fencing: renew, heartbeat and finish are conditional on ``st = running AND att = n AND
tok = token``. What an end does to the job is the core's rule
(:func:`~queue_core.rules.outcomes.end_state`); the conditional writes are the atomic step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from backends.sqs.blobs import TX_BYTES, written_bytes
from backends.sqs.claiming import Claiming
from backends.sqs.codec import Item, enc
from backends.sqs.dynamo import TX_MAX, TxCancelled
from backends.sqs.errors import translate
from backends.sqs.store import Store
from backends.sqs.writes import Writes
from queue_core.records.control import ProgressUpdate
from queue_core.records.errors import LeaseLost, StorageError
from queue_core.records.jobs import AttemptEnd, JobState, LeaseRef, RenewResult
from queue_core.rules.leases import REAP_MARGIN_MS, reap_due
from queue_core.rules.outcomes import end_state

if TYPE_CHECKING:
    from backends.sqs.flows import SQSFlows

__all__ = ["FENCE", "Finishing", "fence_values"]

FENCE = "st = :run AND att = :att AND tok = :tok"
_CONFLICT_RETRIES = 5

Pending = dict[int, tuple[list[dict[str, Any]], JobState, Item]]
"""End index -> (its writes, the job's new state, the job item's SET values)."""


def fence_values(ref: LeaseRef) -> Item:
    """The values of :data:`FENCE` for ``ref``."""
    return {"run": "running", "att": ref.attempt, "tok": ref.lease_token}


def progress_sets(update: ProgressUpdate, now: int) -> Item:
    """The job item's SET values storing progress ``update`` at ``now`` (``pg``)."""
    pg = {"f": repr(float(update.fraction)), "m": update.message, "at": now}
    return {"pg": {k: v for k, v in pg.items() if v is not None}}


def after(job: Item, sets: Item) -> Item:
    """The job item after ``sets`` (``None`` values are removals, left out here)."""
    return {**job, **{k: v for k, v in sets.items() if v is not None}}


class Finishing:
    """``renew``, ``heartbeat`` and ``finish`` of the SQS storage.

    Args:
        store: the storage's store.
        claiming: the claim part (its cache of claimed job items spares a read).
        writes: builds the writes that end an attempt.
        flows: the flows part (built on first use): a step's end records its event in
            the finishing transaction, and its execution advances after it.
    """

    def __init__(
        self, store: Store, claiming: Claiming, writes: Writes, flows: Callable[[], SQSFlows]
    ) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys
        self.claiming = claiming
        self.writes = writes
        self.flows = flows

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.protocol.Storage.renew`. One conditional UpdateItem
        per ref, plus one ``ChangeMessageVisibilityBatch`` per queue for the receipts
        held. The ``due`` index's time ``dx`` is :func:`reap_due`: the new lease's expiry
        while the attempt's deadline comes after it, else (a second write, near the
        deadline) the deadline plus the reaper's margin."""
        t = self.store.now(now)
        flags: list[bool | None] = []
        with translate("renew"):
            for ref in refs:
                resp = self._renew(ref, t + lease_ms, None)
                if resp is None:  # lost, or its deadline comes before the new lease ends
                    job = self.db.get(self.keys.job(ref.job_id))
                    dl = None if job is None else job.get("dl")
                    if isinstance(dl, int) and reap_due(t + lease_ms, dl) < t + lease_ms:
                        resp = self._renew(ref, t + lease_ms, dl)
                if resp is None:
                    self.store.delivery.forget(ref.job_id)
                flags.append(
                    None if resp is None else bool(resp["Attributes"].get("cxl", {}).get("BOOL"))
                )
            result = RenewResult.of(refs, flags)
            alive = {r.job_id for r in refs} - {r.job_id for r in result.lost}
            self.store.delivery.extend(alive, lease_ms)
        return result

    def _renew(self, ref: LeaseRef, expires: int, deadline: int | None) -> dict[str, Any] | None:
        """The fenced renewal of ``ref`` to ``expires`` (the item after it; ``None`` when
        the condition failed). ``deadline``: the attempt's, which comes first; without it
        the write is also conditional on a deadline, if any, that does not."""
        dx = reap_due(expires, deadline)
        cond, values = FENCE, fence_values(ref)
        if deadline is None:
            cond += " AND (attribute_not_exists(dl) OR dl >= :cap)"
            values["cap"] = expires - REAP_MARGIN_MS
        op = self.db.update(
            self.keys.job(ref.job_id), {"le": expires, "dx": dx}, cond=cond, cond_values=values
        )
        op["ReturnValues"] = "ALL_NEW"
        return self.db.update_if(op)

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.protocol.Storage.heartbeat` (one conditional
        UpdateItem)."""
        t = self.store.now(now)
        with translate("heartbeat"):
            op = self.db.update(
                self.keys.job(ref.job_id), {}, cond=FENCE, cond_values=fence_values(ref)
            )
            op["UpdateExpression"] = op["UpdateExpression"].replace(
                "SET ", "SET #hx = #hbms + :now, ", 1
            )
            op["ExpressionAttributeNames"].update({"#hx": "hx", "#hbms": "hbms"})
            op["ExpressionAttributeValues"][":now"] = enc(t)
            op["ReturnValues"] = "ALL_NEW"
            resp = self.db.update_if(op)
            if resp is None:
                raise LeaseLost(f"attempt {ref.attempt} of job {ref.job_id} is not current")
            return bool(resp.get("Attributes", {}).get("cxl", {}).get("BOOL"))

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.protocol.Storage.finish`.

        The job items come from this instance's claim cache (else one BatchGetItem);
        every end is then one set of fenced writes, all ends in one
        ``TransactWriteItems`` (a DEAD end also Queries its attempt records). Ends whose
        fence fails are dropped and the rest retried. Held SQS receipts of taken ends
        are deleted in one ``DeleteMessageBatch`` per queue; retries send a new hint.
        A flow step's end puts its step-end event in the same transaction, and its
        execution advances after it. An end's progress is set in its fenced job update.
        """
        t = self.store.now(now)
        took = [False] * len(ends)
        with translate("finish"):
            jobs = self._jobs_of(ends)
            pending: Pending = {}
            for i, end in enumerate(ends):
                job = jobs.get(i)
                if job is not None and job.get("att") == end.ref.attempt:
                    pending[i] = self._end(job, end, t)
            requeued: list[Item] = []
            steps: list[str] = []
            for i, state, sets in self._apply_ends(ends, jobs, pending):
                took[i] = True
                if state is JobState.QUEUED:
                    requeued.append(after(jobs[i], sets))
                if jobs[i].get("xid") is not None:
                    steps.append(jobs[i]["xid"])
            self.store.delivery.release(
                [e.ref.job_id for e, ok in zip(ends, took, strict=True) if ok]
            )
            self.store.hint(requeued, t)
        if steps:
            self.flows().after_ends(steps, t)
        return took

    def _end(
        self, job: Item, end: AttemptEnd, t: int
    ) -> tuple[list[dict[str, Any]], JobState, Item]:
        """The writes of one end: its job's end, and a flow step's event."""
        d = end.decision
        state, job_reason = end_state(d, end.reason)
        actions, sets = self.writes.end_attempt(
            job,
            end.outcome,
            end.reason,
            end.error,
            end.mode,
            t,
            state=state,
            job_reason=job_reason,
            cond=FENCE,
            cond_values=fence_values(end.ref),
            ready_at=t + d.delay_ms,
            result=end.result,
            lost_delay_ms=d.lost_delay_ms,
            refund=not d.spends_attempt,
            also=None if end.progress is None else progress_sets(end.progress, t),
        )
        if job.get("xid") is not None:
            actions += self.flows().step_event(job, state, job_reason, t, result=end.result)
        return actions, state, sets

    def _jobs_of(self, ends: Sequence[AttemptEnd]) -> dict[int, Item]:
        """The job item of each end: from the claim cache, else one BatchGetItem."""
        jobs: dict[int, Item] = {}
        for i, end in enumerate(ends):
            cached = self.claiming.take_claimed(end.ref)
            if cached is not None:
                jobs[i] = cached
        missing = [e.ref.job_id for i, e in enumerate(ends) if i not in jobs]
        if missing:
            fetched = self.store.read_jobs(missing)
            for i, end in enumerate(ends):
                if i not in jobs and end.ref.job_id in fetched:
                    jobs[i] = fetched[end.ref.job_id]
        return jobs

    def _apply_ends(
        self, ends: Sequence[AttemptEnd], jobs: dict[int, Item], pending: Pending
    ) -> list[tuple[int, JobState, Item]]:
        """Write the pending ends in as few transactions as fit; an end whose write a
        cancelled transaction names is dropped from ``pending`` and the rest retried.

        Returns (end index, new state, SET values) of every end that took."""
        done: list[tuple[int, JobState, Item]] = []
        todo = dict(pending)
        conflicts = 0
        while todo:
            chunk = _next_chunk(ends, jobs, todo)
            actions = [a for i in chunk for a in todo[i][0]]
            owners = [i for i in chunk for _ in todo[i][0]]
            try:
                self.db.write(actions)
            except TxCancelled as exc:
                codes = zip(owners, exc.codes, strict=False)
                failed = {o for o, c in codes if c not in ("None", "")}
                if not failed:
                    conflicts += 1
                    if conflicts > _CONFLICT_RETRIES:
                        raise StorageError("sqs backend: finish kept conflicting") from None
                    time.sleep(0.01)
                for i in failed:
                    del todo[i]
                continue
            for i in chunk:
                _, state, sets = todo.pop(i)
                done.append((i, state, sets))
        return done


def _next_chunk(ends: Sequence[AttemptEnd], jobs: dict[int, Item], todo: Pending) -> list[int]:
    """Ends for one transaction: at most ``TX_MAX`` writes and about ``TX_BYTES`` written
    (large results, dead-letter entries) unless it is one end, each item touched once."""
    chunk: list[int] = []
    size = nbytes = 0
    seen: set[str] = set()  # one transaction may touch an item only once
    for i in todo:
        more = written_bytes(todo[i][0])
        if size + len(todo[i][0]) > TX_MAX or (chunk and nbytes + more > TX_BYTES):
            break
        job_id, key = ends[i].ref.job_id, jobs[i].get("ck")
        if job_id in seen or (key is not None and f"C#{key}" in seen):
            continue
        seen.add(job_id)
        if key is not None:
            seen.add(f"C#{key}")
        chunk.append(i)
        size += len(todo[i][0])
        nbytes += more
    return chunk
