"""Durable workflows on SQS + DynamoDB (``SupportsWorkflows``, SPEC §12): this part reads,
the core decides (:mod:`queue_core.rules.flows.workflow`, :mod:`~queue_core.rules.flows.plan`)
and the flows part's one interpreter (:meth:`SQSFlows._commit
<backends.sqs.flows.SQSFlows._commit>`) writes, in one ``TransactWriteItems`` conditional
on the execution's version (read again on a conflict).

What must hold at the write rides in the same transaction: the attempt's fence (a
``ConditionCheck`` of the job item for ``put_memo`` and ``start_child_execution``; the
suspended attempt's own end for a suspension), the event counter of a suspension's wait
(no event stored since its read), a resume's concurrency key version. The items are
:mod:`backends.sqs.wf_items`'; what is not one atomic step is listed in
``docs/backends/sqs.md`` ("Durable workflows").
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from backends.sqs.blobs import side_keys
from backends.sqs.claiming import Claiming
from backends.sqs.codec import Item, vals
from backends.sqs.dynamo import TxCancelled
from backends.sqs.errors import translate
from backends.sqs.finishing import FENCE, fence_values
from backends.sqs.flow_items import Exec, slots
from backends.sqs.flows import SQSFlows
from backends.sqs.store import Store
from backends.sqs.wf_items import event_item, stored_event, wait_of
from backends.sqs.writes import Writes
from queue_core.records.errors import ConfigError, LeaseLost, NotFound, StorageError
from queue_core.records.flows import ExecutionState
from queue_core.records.jobs import AttemptEnd, JobState, LeaseRef
from queue_core.records.workflows import (
    PARKED_AT,
    EventWait,
    MemoRecord,
    StoredEvent,
    SuspendedEnd,
)
from queue_core.rules.flows import decide, plan, workflow
from queue_core.rules.flows.decide import ExecutionView
from queue_core.rules.flows.spec import ConcurrencySpec
from queue_core.rules.outcomes import end_state
from queue_core.storage.flows import NewExecution
from queue_core.storage.workflows import WorkflowState, sub_execution_id

__all__ = ["SQSWorkflows"]

_TRIES = 100
Actions = list[dict[str, Any]]
Build = Callable[[Exec, ExecutionView], tuple[list[plan.Op], Actions, Actions]]
"""A workflow's change from the execution as read (and folded): its operations, the
fences (a failed one: :class:`LeaseLost`) and the guards (a failed one: read again)."""


def _merge_function_end(
    ops: list[plan.Op], end: AttemptEnd, now: int
) -> tuple[list[plan.Op], JobState, str | None, int]:
    """A suspension's plan without its operations on the function step's job, and what
    they make of the attempt's end (DynamoDB writes an item once per transaction): its
    job's state, reason and ready time (``SetReady``, ``Wake``, a ``not_run`` ``EndJob``)."""
    state, reason = end_state(end.decision, end.reason)
    ready, kept = now + end.decision.delay_ms, list[plan.Op]()
    for op in ops:
        if isinstance(op, plan.SetReady) and op.idx == 0:
            ready = op.at
        elif isinstance(op, plan.Wake) and op.idx == 0:
            ready = now
        elif isinstance(op, plan.EndJob) and op.idx == 0 and op.when is JobState.QUEUED:
            state, reason = op.state, op.reason
        else:
            kept.append(op)
    return kept, state, reason, ready


class SQSWorkflows:
    """The workflow operations of the SQS storage (built on first use).

    Args:
        store: the storage's store.
        writes: the job writes (a suspended attempt's end).
        claiming: the claim part (its cache of claimed job items spares a read).
        flows: the flows part: the interpreter.
    """

    def __init__(
        self, store: Store, writes: Writes, claiming: Claiming, flows: Callable[[], SQSFlows]
    ) -> None:
        self.store, self.db, self.keys, self.p = store, store.db, store.keys, store.keys.p
        self.writes, self.claiming, self._flows = writes, claiming, flows

    @property
    def flows(self) -> SQSFlows:
        return self._flows()

    # ------------------------------------------------------------------ the update loop

    def _update(
        self, eid: str, now: int, build: Build, *, fold: bool = True
    ) -> tuple[ExecutionState, bool] | None:
        """Read ``eid``, fold its claims and events (``fold``), add ``build``'s operations
        and commit them with its fences and guards; again on a conflict. The state after
        and whether anything was written; ``None`` when the execution is gone.

        Raises:
            LeaseLost: a fence failed (nothing written).
        """
        flows = self.flows
        for _ in range(_TRIES):
            x = flows._read(eid)
            if x is None:
                return None
            if x.item.get("td"):
                flows._drain(eid, now)
                continue
            if fold:
                f, dels, n = flows.folded(x, now)
                view, ops = f.view, list(f.ops)
            else:
                view, ops, dels, n = x.view(), [], [], 0
            more, fences, guards = build(x, view)
            ops += more
            if not (ops or n or (fold and x.claims)):
                return x.state, False
            try:
                sets: Item | None = {"r": {}} if fold else None
                state, _ = flows._commit(x, ops, [*fences, *guards, *dels], now, sets=sets)
                return state, True
            except TxCancelled as exc:
                codes = exc.codes[1 : 1 + len(fences)]
                if any(c == "ConditionalCheckFailed" for c in codes):
                    raise LeaseLost(
                        f"the attempt is not a current one of execution {eid}"
                    ) from None
                time.sleep(0.002)
        raise StorageError(f"sqs backend: workflow {eid}: too much contention")

    def _fence(self, ref: LeaseRef, eid: str) -> dict[str, Any]:
        """A ``ConditionCheck``: ``ref`` is the current attempt of a step job of ``eid``."""
        check = {
            "TableName": self.db.name,
            "Key": self.keys.job(ref.job_id),
            "ConditionExpression": f"{FENCE} AND xid = :x",
            "ExpressionAttributeValues": vals(**fence_values(ref), x=eid),
        }
        return {"ConditionCheck": check}

    # ------------------------------------------------------------------ SupportsWorkflows

    def workflow_state(self, execution_id: str) -> WorkflowState | None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.workflow_state`."""
        with translate("workflow_state"):
            x = self.flows._read(execution_id)
            if x is None:
                return None
            record = x.record(self.flows.specs.spec_json(x.item["sh"]))
            steps = x.step_records()
            memos = self._memos(x)
            found = self.store.read_jobs([s.job_id for s in steps if s.job_id is not None])
            jobs = {s.idx: self.db.record(found[s.job_id]) for s in steps if s.job_id in found}
        return WorkflowState(execution=record, steps=steps, memos=memos, jobs=jobs)

    def _memos(self, x: Exec) -> dict[str, MemoRecord]:
        """The memos ``x`` names (one Query of its ``M#`` items)."""
        if not x.memos:
            return {}
        items = self.db.find("pk = :pk AND begins_with(sk, :m)", pk=x.item["pk"], m="M#")
        by_sk = {it["sk"]: it for it in items}
        out: dict[str, MemoRecord] = {}
        for key, (seq, wno, at) in x.memos.items():
            sk = f"M#{wno:08d}"
            it = by_sk.get(sk)
            if it is not None:  # a large value's chunk items are beside it (``dc``)
                parts = [by_sk[f"{sk}#{i:04d}"]["d"] for i in range(int(it.get("dc") or 0))]
                value = b"".join(parts) if parts else bytes(it["d"])
                out[key] = MemoRecord(key=key, value=value, seq=seq, at=at)
        return out

    def put_memo(
        self, ref: LeaseRef, execution_id: str, key: str, value: bytes, *, now: int | None = None
    ) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.put_memo`: the memo and
        the execution item in one transaction with the attempt's fence."""
        t = self.store.now(now)
        fence = self._fence(ref, execution_id)
        with translate("put_memo"):
            got = self._update(
                execution_id, t, lambda x, v: ([plan.PutMemo(key, value)], [fence], []), fold=False
            )
        if got is None:
            raise LeaseLost(f"job {ref.job_id}: execution {execution_id} is gone")

    def send_event(
        self, name: str, key: str | None = None, data: bytes = b"null", *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.send_event`: the event
        and its counter in one transaction; then each wait of ``name`` it reaches
        (:func:`~queue_core.rules.flows.workflow.delivers`) gets
        :func:`~queue_core.rules.flows.workflow.deliver_ops` in its execution's
        transaction, once (the wait is read in the execution item it is dropped from)."""
        t = self.store.now(now)
        with translate("send_event"):
            ev = {**event_item(self.p, name, key, data, t, uuid.uuid4().hex), "tx": t}
            bump = self.db.update(self._counter(name), {}, add={"n": 1})
            self.db.transact([self.flows._put(ev), {"Update": bump}])
            waiters = self.db.find("pk = :pk", pk=f"{self.p}W#{name}")
            woken = 0
            for it in waiters:
                w = wait_of(name, it)
                if not workflow.delivers(w, key, t):
                    continue

                got = self._update(str(it["x"]), t, self._delivery(w, data), fold=False)
                woken += got is not None and got[1]
        return woken

    @staticmethod
    def _delivery(w: EventWait, data: bytes) -> Build:
        """The change delivering ``data`` to wait ``w`` (none once it is delivered)."""

        def build(x: Exec, view: ExecutionView) -> tuple[list[plan.Op], Actions, Actions]:
            if x.waits.get(w.memo_key) != w.name:
                return [], [], []
            return workflow.deliver_ops(w, data), [], []

        return build

    def _counter(self, name: str) -> dict[str, Any]:
        return {"pk": {"S": f"{self.p}EVN#{name}"}, "sk": {"S": "EVN"}}

    def _events(self, name: str, since: int, now: int) -> tuple[Actions, list[StoredEvent]]:
        """The guard that no event of ``name`` is stored after this read, and the stored
        events sent in ``since..now``, earliest first."""
        counter = self.db.get(self._counter(name))
        items = self.db.find(
            "pk = :pk AND sk BETWEEN :a AND :b",
            pk=f"{self.p}EV#{name}",
            a=f"{max(since, 0):016d}",
            b=f"{now:016d}~",
        )
        body: dict[str, Any] = {"TableName": self.db.name, "Key": self._counter(name)}
        if counter is None:
            body["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            body["ConditionExpression"] = "n = :n"
            body["ExpressionAttributeValues"] = {":n": {"N": str(counter.get("n", 0))}}
        return [{"ConditionCheck": body}], [stored_event(name, it) for it in items]

    def start_child_execution(
        self,
        ref: LeaseRef,
        new: NewExecution,
        step_id: str,
        memo_key: str,
        *,
        now: int | None = None,
    ) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.start_child_execution`:
        the fence and the index checked, the sub-execution started (or taken, when an
        earlier call started it and lost its lease before the parent's write), then the
        parent's step and memo written under the fence (two transactions: see the docs)."""
        t = self.store.now(now)
        parent, idx = new.parent_id, new.parent_idx
        if parent is None or idx is None:
            raise StorageError(f"execution {new.id} has no parent link")
        with translate("start_child_execution"):
            job = self.db.get(self.keys.job(ref.job_id))
            have = None if job is None else (job.get("st"), job.get("att"), job.get("tok"))
            want = ("running", ref.attempt, ref.lease_token)
            if have != want or job is None or job.get("xid") != parent:
                raise LeaseLost(
                    f"attempt {ref.attempt} of job {ref.job_id} is not a current attempt of "
                    f"execution {parent}"
                )
            x = self.flows._read(parent)
            n = -1 if x is None else len(x.steps)
            if idx != n or new.id != sub_execution_id(parent, idx):
                raise StorageError(
                    f"sub-execution {new.id}: step index {idx} is not the next one of "
                    f"execution {parent} ({n})"
                )
        state = self._start_sub(new, t)
        ops = workflow.child_flow_ops(idx, step_id, memo_key, state)
        fence = self._fence(ref, parent)
        with translate("start_child_execution"):
            self._update(parent, t, lambda x, v: (ops, [fence], []), fold=False)
            self.flows.after_ends([parent], t)  # a sub's end stored before its step was
        return state

    def _start_sub(self, new: NewExecution, t: int) -> ExecutionState:
        """Start sub-execution ``new``; one already started for the same parent step (by
        a call whose lease was lost before the parent's write) is taken as it is."""
        try:
            return self.flows.start_execution(new, now=t)
        except StorageError:
            rec = self.flows.get_execution(new.id)
            if rec is None or (rec.parent_id, rec.parent_idx) != (new.parent_id, new.parent_idx):
                raise
            return rec.state

    def resume_execution(
        self, execution_id: str, from_step: str | None = None, *, now: int | None = None
    ) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.resume_execution`: the
        plan with the concurrency key's entry, conditional on the key's version."""
        t = self.store.now(now)

        def build(x: Exec, view: ExecutionView) -> tuple[list[plan.Op], Actions, Actions]:
            memos = self._memos(x)
            workflow.check_resume(execution_id, view, from_step, memos)
            admission, guards = decide.Admission(ExecutionState.RUNNING), list[dict[str, Any]]()
            ck = x.item.get("ck")
            if ck is not None:
                spec = ConcurrencySpec(int(x.item["cl"]), x.item["cb"])
                key = self.db.get(self.flows._key("XK", ck))
                others = [s for s in (slots(key) if key else []) if s.id != execution_id]
                admission = decide.admit(spec, others)
                cell = f"{admission.state.value}|{x.item['ca']}"
                kv = None if key is None else int(key["v"])
                guards.append(self.flows._key_set(ck, x.id, cell, kv, None if key else spec))
            index = plan.index_of(view.steps)
            ops = workflow.resume_ops(view, index, admission, t, from_step=from_step, memos=memos)
            return ops, [], guards

        with translate("resume_execution"):
            got = self._update(execution_id, t, build)
        if got is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        return got[0]

    # ------------------------------------------------------------------ the other parts' calls

    def finish(
        self,
        ends: Sequence[AttemptEnd],
        plain: Callable[..., list[bool]],
        now: int | None,
    ) -> list[bool]:
        """``finish`` of a batch holding suspended ends: each of those with its plan
        (:meth:`_suspend`), the others by ``plain`` (the finishing part's)."""
        t = self.store.now(now)
        others = [e for e in ends if not isinstance(e, SuspendedEnd)]
        took = iter(plain(others, now=now) if others else [])
        return [self._suspend(e, t) if isinstance(e, SuspendedEnd) else next(took) for e in ends]

    def _suspend(self, end: SuspendedEnd, t: int) -> bool:
        """A function step's attempt that ended suspended: its end (a retry that spends no
        attempt, ready as the plan says) and :func:`~queue_core.rules.flows.workflow.suspend_ops`
        with the first stored event its wait receives, in one transaction."""
        ref, wait = end.ref, end.suspension.wait
        with translate("finish"):
            job = self.claiming.take_claimed(ref) or self.store.read_jobs([ref.job_id]).get(
                ref.job_id
            )
        if job is None or job.get("att") != ref.attempt or job.get("xid") is None:
            return False
        after: list[Item] = []

        def build(x: Exec, view: ExecutionView) -> tuple[list[plan.Op], Actions, Actions]:
            guards: Actions = []
            event = None
            if wait is not None:
                guards, events = self._events(wait.name, wait.since, t)
                event = workflow.first_delivery(wait, events, t)
            index = plan.index_of(view.steps)
            ops = workflow.suspend_ops(view, index, end.suspension, t, event)
            ops, state, reason, ready = _merge_function_end(ops, end, t)
            acts, sets = self.writes.end_attempt(
                job, end.outcome, end.reason, end.error, end.mode, t, state=state,
                job_reason=reason, cond=FENCE, cond_values=fence_values(ref), ready_at=ready,
                refund=not end.decision.spends_attempt,
            )  # fmt: skip
            woken = state is JobState.QUEUED and ready < PARKED_AT  # a delayed hint at a wake time
            after[:] = [{**job, **sets}] if woken else []
            return ops, acts, guards

        try:
            with translate("finish"):
                got = self._update(str(job["xid"]), t, build)
        except LeaseLost:
            return False
        if got is None:
            return False
        self.store.delivery.release([ref.job_id])
        self.store.hint(after, t)
        return True

    def retry_dead_step(self, d: Item, now: int) -> str:
        """``retry_dead`` of a flow step's entry ``d``: its execution resumes (refused as
        ``resume_execution`` refuses it, the entry kept; the re-run removes it); the
        step's job id."""
        eid = str(d["spec"]["xid"])
        if self.flows.get_execution(eid) is None:
            raise ConfigError(
                f"dead-letter entry {d['id']!r} is a step of execution {eid}, which is gone",
                code="invalid_option",
                field="dead_id",
                value=d["id"],
            )
        self.resume_execution(eid, now=now)
        with translate("retry_dead"):
            self.db.batch_delete([self.keys.dead(d["id"]), *side_keys(d)])
        return str(d["job"])

    def prune_events(self, cutoff: int, limit: int) -> None:
        """Delete the events sent at or before ``cutoff`` and the counters of their names
        (safe at any time: a suspension's guard on a deleted counter fails, and it reads
        the events again; the next ``send_event`` creates it anew)."""
        old = self.db.find(
            "tp = :p AND tx <= :t", index="timeout", limit=limit, p=f"{self.p}EVP", t=cutoff
        )
        names = dict.fromkeys(str(it["pk"])[len(f"{self.p}EV#") :] for it in old)
        keys = [self.db.key_of(it) for it in old] + [self._counter(n) for n in names]
        self.db.batch_delete(keys)
