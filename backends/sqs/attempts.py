"""Running attempts: lease renewal, heartbeats, finishing and reaping.

Fencing: renew, heartbeat and finish are conditional on ``st = running AND att = n AND
tok = token``; reap is conditional on the version it read. What an end or a reap does
to the job is the core's rule (:mod:`queue_core.policy.outcomes`); the conditional
writes are the atomic step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from backends.sqs.codec import Item, enc, vals
from backends.sqs.dynamo import TX_MAX, TxCancelled
from backends.sqs.errors import translate
from backends.sqs.flow_apply import FlowApply
from queue_core.errors import LeaseLost, StorageError
from queue_core.model import AttemptEnd, JobState, LeaseRef, ReapedJob, Reason, RenewResult
from queue_core.policy.outcomes import end_state, reap_verdict

__all__ = ["Attempts"]

_FENCE = "st = :run AND att = :att AND tok = :tok"
_CONFLICT_RETRIES = 5

Pending = dict[int, tuple[list[dict[str, Any]], JobState, Item]]
"""End index -> (its writes, the job's new state, the job item's SET values)."""


def _fence_values(ref: LeaseRef) -> Item:
    return {"run": "running", "att": ref.attempt, "tok": ref.lease_token}


def _after(job: Item, sets: Item) -> Item:
    """The job item after ``sets`` (``None`` values are removals, left out here)."""
    return {**job, **{k: v for k, v in sets.items() if v is not None}}


class Attempts(FlowApply):
    """``renew``, ``heartbeat``, ``finish`` and ``reap`` of the SQS storage."""

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.Storage.renew`. One conditional UpdateItem per ref,
        plus one ``ChangeMessageVisibilityBatch`` per queue for the receipts held."""
        t = self._now(now)
        result = RenewResult()
        with translate("renew"):
            for ref in refs:
                op = self.db.update(
                    self.keys.job(ref.job_id),
                    {"le": t + lease_ms, "dx": t + lease_ms},
                    cond=_FENCE,
                    cond_values=_fence_values(ref),
                )
                op["ReturnValues"] = "ALL_NEW"
                resp = self.db.update_if(op)
                if resp is None:
                    result.lost.append(ref)
                    self.delivery.forget(ref.job_id)
                elif resp.get("Attributes", {}).get("cxl", {}).get("BOOL"):
                    result.cancel_requested.append(ref)
            alive = {r.job_id for r in refs} - {r.job_id for r in result.lost}
            self.delivery.extend(alive, lease_ms)
        return result

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.Storage.heartbeat` (one conditional UpdateItem)."""
        t = self._now(now)
        with translate("heartbeat"):
            op = self.db.update(
                self.keys.job(ref.job_id), {}, cond=_FENCE, cond_values=_fence_values(ref)
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

    # ------------------------------------------------------------------ finish

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.Storage.finish`.

        The job items come from this instance's claim cache (else one BatchGetItem);
        every end is then one set of fenced writes, all ends in one
        ``TransactWriteItems`` (a DEAD end also Queries its attempt records). Ends whose
        fence fails are dropped and the rest retried. Held SQS receipts of taken ends
        are deleted in one ``DeleteMessageBatch`` per queue; retries send a new hint.
        """
        t = self._now(now)
        took = [False] * len(ends)
        with translate("finish"):
            jobs = self._jobs_of(ends)
            pending: Pending = {}
            for i, end in enumerate(ends):
                job = jobs.get(i)
                if job is None or job.get("att") != end.ref.attempt:
                    continue
                d = end.decision
                state, job_reason = end_state(d, end.reason)
                actions, sets = self._end_actions(
                    job,
                    end.outcome,
                    end.reason,
                    end.error,
                    end.mode,
                    t,
                    state=state,
                    job_reason=job_reason,
                    cond=_FENCE,
                    cond_values=_fence_values(end.ref),
                    ready_at=t + d.delay_ms,
                    result=end.result,
                    lost_delay_ms=d.lost_delay_ms,
                )
                pending[i] = (actions, state, sets)
            requeued: list[Item] = []
            steps: list[str] = []
            for i, state, sets in self._apply_ends(ends, jobs, pending):
                took[i] = True
                if state is JobState.QUEUED:
                    requeued.append(_after(jobs[i], sets))
                if jobs[i].get("xid") is not None:
                    steps.append(jobs[i]["xid"])
            with self._lock:
                for end in ends:
                    r = end.ref
                    self._claimed.pop((r.job_id, r.attempt, r.lease_token), None)
            self.delivery.release([e.ref.job_id for e, ok in zip(ends, took, strict=True) if ok])
            self._hint(requeued, t)
        self._after_ends(steps, t)
        return took

    def _jobs_of(self, ends: Sequence[AttemptEnd]) -> dict[int, Item]:
        """The job item of each end: from the claim cache, else one BatchGetItem."""
        jobs: dict[int, Item] = {}
        missing: list[str] = []
        with self._lock:
            for i, end in enumerate(ends):
                r = end.ref
                cached = self._claimed.get((r.job_id, r.attempt, r.lease_token))
                if cached is not None:
                    jobs[i] = cached
                else:
                    missing.append(r.job_id)
        if missing:
            fetched = self._read_jobs(missing)
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

    # ------------------------------------------------------------------ reap

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """See :meth:`queue_core.storage.Storage.reap`.

        Queries the running jobs by earliest lease expiry, attempt deadline and
        heartbeat deadline, and the due jobs by schedule-to-start deadline; each is ended
        by one transaction conditional on the version read, so concurrent reapers record
        it once. Which bound wins and what happens to the job is ``reap_verdict``'s.
        The flow Queries run only once the deployment has flows (:meth:`_flows_exist`).
        """
        t = self._now(now)
        with translate("reap"):
            self._promote(t)
            flows = self._flows_exist()
            flow_out = self._reap_flows_first(t, limit) if flows else []
            out, requeued = self._reap_running(t, limit)
            if len(out) < limit:
                out += self._reap_unstarted(t, limit - len(out))
            self._hint(requeued, t)
            out = flow_out + out + (self._reap_flows_after(t, limit) if flows else [])
        return out

    def _stale_running(self, t: int, limit: int) -> list[Item]:
        """Running jobs with a lease, deadline or heartbeat bound at or before ``t``."""
        stale: dict[str, Item] = {}
        for index, pkey, skey, part in (
            ("due", "dp", "dx", self.keys.running),
            ("timeout", "tp", "tx", f"{self.keys.p}T"),
            ("heartbeat", "hp", "hx", f"{self.keys.p}H"),
        ):
            for it in self.db.query(
                IndexName=index,
                KeyConditionExpression=f"{pkey} = :p AND {skey} <= :now",
                ExpressionAttributeValues=vals(p=part, now=t),
                Limit=limit,
            ):
                if it.get("st") == "running":
                    stale.setdefault(it["id"], it)
        return sorted(stale.values(), key=lambda x: (x.get("le", 0), x.get("seq", 0)))

    def _reap_running(self, t: int, limit: int) -> tuple[list[ReapedJob], list[Item]]:
        """Reap the stale running attempts: (what was reaped, jobs queued again)."""
        out: list[ReapedJob] = []
        requeued: list[Item] = []
        for it in self._stale_running(t, limit):
            if len(out) >= limit:
                break
            verdict = reap_verdict(
                t,
                lease_expires_at=it.get("le", 0),
                deadline=it.get("dl"),
                heartbeat_expires_at=it.get("hx") if it.get("hp") else None,
                cancel_requested=bool(it.get("cxl")),
                attempt=it["att"],
                max_attempts=it["ma"],
                lost_delay_ms=it.get("ld", 0),
                run_at=it.get("ra"),
                schedule_to_start_ms=it.get("s2s"),
            )
            if verdict is None:
                continue
            actions, sets = self._end_actions(
                it,
                verdict.outcome,
                verdict.reason.value,
                None,
                None,
                t,
                state=verdict.state,
                job_reason=verdict.job_reason,
                ready_at=verdict.ready_at,
                cond="st = :run AND v = :ver",
                cond_values={"run": "running", "ver": it["v"]},
            )
            try:
                self.db.transact(actions)
            except TxCancelled:
                continue  # another reaper (or the worker) changed it first
            if verdict.state is JobState.QUEUED:
                requeued.append(_after(it, sets))
            out.append(
                ReapedJob(
                    job_id=it["id"],
                    attempt=it["att"],
                    outcome=verdict.outcome,
                    reason=verdict.reason.value,
                    state=verdict.state,
                )
            )
        return out, requeued

    def _reap_unstarted(self, t: int, limit: int) -> list[ReapedJob]:
        """Dead-letter due jobs whose schedule-to-start bound passed unclaimed."""
        out: list[ReapedJob] = []
        reason = Reason.SCHEDULE_TO_START.value
        for it in self.db.query(
            IndexName="due",
            KeyConditionExpression="dp = :p AND dx <= :now",
            ExpressionAttributeValues=vals(p=self.keys.s2s, now=t),
            Limit=limit,
        ):
            if it.get("st") != "queued":
                continue
            sets, removes = self._finished_fields(JobState.DEAD, t)
            sets["rsn"] = reason
            sets["did"], puts = self._dead_puts(it, reason, None, self._attempt_items(it["id"]), t)
            actions = [
                {
                    "Update": self.db.update(
                        self.keys.job(it["id"]),
                        sets,
                        removes,
                        cond="st = :q AND v = :ver",
                        cond_values={"q": "queued", "ver": it["v"]},
                    )
                },
                *puts,
            ]
            if it.get("ck") is not None:
                actions.append({"Update": self.db.counter(self.keys.counter(it["ck"]), act=-1)})
            if it.get("xid") is not None:
                actions += self._step_event(it, JobState.DEAD, reason, None, t, queued=True)
            try:
                self.db.transact(actions)
            except TxCancelled:
                continue
            out.append(
                ReapedJob(
                    job_id=it["id"], attempt=0, outcome=None, reason=reason, state=JobState.DEAD
                )
            )
        return out


def _next_chunk(ends: Sequence[AttemptEnd], jobs: dict[int, Item], todo: Pending) -> list[int]:
    """Ends for one transaction: at most ``TX_MAX`` writes, each item touched once."""
    chunk: list[int] = []
    size = 0
    seen: set[str] = set()  # one transaction may touch an item only once
    for i in todo:
        if size + len(todo[i][0]) > TX_MAX:
            break
        job_id, key = ends[i].ref.job_id, jobs[i].get("ck")
        if job_id in seen or (key is not None and f"C#{key}" in seen):
            continue
        seen.add(job_id)
        if key is not None:
            seen.add(f"C#{key}")
        chunk.append(i)
        size += len(todo[i][0])
    return chunk
