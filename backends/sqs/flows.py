"""Flow executions on SQS + DynamoDB: ``SupportsFlows`` and the one interpreter of plan ops.

The core decides (:mod:`queue_core.rules.flows.plan`); this part records events, reads
what a decision needs and applies the plan. A step job's end puts an event in its
execution's partition, in the transaction that ends the job (:meth:`SQSFlows.step_event`);
a step's claim records its attempt in the execution's ``r`` (:meth:`SQSFlows.claim_update`).
The advance reads the execution item (version ``v``) and its events, lets
:func:`~queue_core.rules.flows.folding.fold` fold and judge them, and :meth:`SQSFlows._commit`
applies the ops in one transaction conditional on ``v``. Job writes that do not fit (a
500-wide fan-out) stay in the execution (``td``: what remains to be done) and are applied
in fenced chunks of at most 100 items by whoever comes next -- the finisher, another
worker, the reaper (``P XA``). The items are described in ``docs/backends/sqs.md``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from backends.sqs.blobs import output_fields, side_keys
from backends.sqs.codec import Item, all_index_query, encode_item, new_item, vals
from backends.sqs.dynamo import TX_MAX, TxCancelled
from backends.sqs.errors import translate
from backends.sqs.flow_inputs import StepInputsReader
from backends.sqs.flow_items import (
    PART,
    Exec,
    JobOp,
    dump_op,
    exec_item,
    exec_record,
    fit,
    fresh_release,
    job_when,
    pack,
    slots,
    stored_at,
    unzjson,
    zjson,
)
from backends.sqs.flow_specs import FlowSpecs, small
from backends.sqs.store import SEQ, Store
from backends.sqs.wf_items import exec_sets
from backends.sqs.wf_writes import wf_writes
from backends.sqs.writes import Writes
from queue_core.records.errors import NotFound, StorageError
from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.jobs import JobState, ReapedJob
from queue_core.records.workflows import PARKED_AT
from queue_core.rules.flows import decide, plan
from queue_core.rules.flows import fold as folding
from queue_core.rules.flows.decide import ExecutionView, Transition
from queue_core.rules.flows.spec import ConcurrencySpec
from queue_core.rules.leases import reap_cutoff
from queue_core.rules.paging import check_page
from queue_core.storage.flows import ExecutionRecord, NewExecution, StepRecord
from queue_core.storage.flows import step_job_id as job_of

__all__ = ["PART", "SQSFlows"]

log = logging.getLogger("backends.sqs")
_E, _S = ExecutionState, StepState
_TRIES = 100
_HINTS = 10  # wake-up hints per queue per write: claims read the ready index
_EVENTS = 60  # events folded by one transaction (the rest by the next round)
Actions = list[dict[str, Any]]


class SQSFlows:
    """The flows part of the SQS storage (built on first use).

    Args:
        store: the storage's store.
        writes: the job writes (a released step's job, a plan's ``EndJob``).
    """

    def __init__(self, store: Store, writes: Writes) -> None:
        self.store, self.db, self.keys, self.p = store, store.db, store.keys, store.keys.p
        self.writes = writes
        self.inputs = StepInputsReader(
            self.db, lambda eid: self._key("X", eid), self._read, self._exec
        )
        self.specs = FlowSpecs(self.db, self.p)

    def _key(self, kind: str, name: str) -> dict[str, Any]:
        """The key of an execution (``X``), a concurrency key (``XK``), a spec (``FS``)."""
        return {"pk": {"S": f"{self.p}{kind}#{name}"}, "sk": {"S": kind}}

    def _read(self, eid: str) -> Exec | None:
        item = self.db.get(self._key("X", eid))
        return None if item is None else self._exec(item)

    def _exec(self, item: Item) -> Exec:
        """An execution item as read, with its steps (its own ``sp``, else its spec's)."""
        return Exec(item, None if "sp" in item else self.specs.steps(str(item["sh"])))

    def _put(self, item: Item) -> dict[str, Any]:
        return {"Put": {"TableName": self.db.name, "Item": encode_item(item)}}

    # ------------------------------------------------------------------ the job parts' calls

    def step_event(
        self,
        job: Item,
        state: JobState,
        reason: str | None,
        now: int,
        *,
        result: bytes | None = None,
        queued: bool = False,
    ) -> Actions:
        """The Puts recording that step job ``job`` changed to ``state``, for the
        transaction that changes it: the event, and for a success its ``result`` (kept
        for ``get_step_inputs``). ``queued``: the job ended unrun, after ``att`` attempts."""
        idx, n = int(job["id"][len(job["xid"]) + 1 :]), int(job["att"])
        pk, sk = f"{self.p}X#{job['xid']}", f"E#{idx:06d}#{n:05d}#{'q' if queued else 'a'}"
        ev = {"pk": pk, "sk": sk, "i": idx, "n": n, "st": state.value, "rsn": reason}
        out = [self._put({**ev, "dp": f"{self.p}XA", "dx": now})]
        if state is JobState.SUCCEEDED:
            out += self.db.puts(output_fields(pk, f"O#{idx:06d}", result))  # large: chunks
        return out

    def claim_update(self, eid: str, claims: dict[str, int], now: int) -> dict[str, Any]:
        """The claim transaction's write on execution ``eid``: the attempts started (by
        step job id) go into ``r`` for the next advance to fold, and ``v`` moves. Only
        while the execution may start a step: the condition mirrors
        :func:`queue_core.rules.flows.decide.may_release` on the stored fields."""
        sets: Item = {f"r.{job_id[len(eid) + 1 :]}": n for job_id, n in claims.items()}
        if "r.0" in sets:  # plan.claim_ops: a waiting workflow's function runs it again
            sets["st"] = _E.RUNNING.value
        cond = "st IN (:run, :wait) AND attribute_not_exists(fs) AND "
        cond += "(attribute_not_exists(dl) OR dl > :now)"
        may = {"run": "running", "wait": "waiting", "now": now}
        return {"Update": self.db.update(self._key("X", eid), sets, cond=cond, cond_values=may)}

    def after_ends(self, eids: Iterable[str], now: int) -> list[ReapedJob]:
        """Advance the executions whose step jobs just ended (or that ``reap`` found due).
        The ends are durable: a failure here is logged and left to the next ``reap``,
        never reported as a failed ``finish``, never blocking other executions."""
        reaped: list[ReapedJob] = []
        for eid in dict.fromkeys(eids):
            try:
                with translate("flow advance"):
                    reaped += self._advance(eid, now)[1]
            except StorageError as exc:
                log.warning("flow advance of %s left to the reaper: %s", eid, exc)
        return reaped

    def reap(
        self, now: int, limit: int, *, first: bool, ended: Iterable[str] = ()
    ) -> list[ReapedJob]:
        """``first`` (before the job reaps): advance the running executions whose deadline
        passed. Else: the executions ``ended`` (whose step jobs this reap just ended),
        those whose events or job writes were left at or before ``reap_cutoff(now)`` (by
        a killed caller: the margin keeps the reaper from racing a finisher still
        advancing, whose every chunk would then be written twice), then promote the keys
        whose promotion may be due."""
        if first:
            due = self.db.find(  # a margin after the deadline (reap_cutoff): the worker first
                "tp = :p AND tx <= :t",
                index="timeout",
                limit=limit,
                p=f"{self.p}XT",
                t=reap_cutoff(now),
            )
            return self.after_ends([it["id"] for it in due], now)
        reaped = self.after_ends(ended, now)
        left = self.db.find(
            "dp = :p AND dx <= :t", index="due", limit=limit, p=f"{self.p}XA", t=reap_cutoff(now)
        )
        reaped += self.after_ends(self._names(left, limit), now)
        for name in self._names(
            self.db.find("dp = :p", index="due", limit=limit, p=f"{self.p}XP"), limit
        ):
            self._promote_key(name, now)
        return reaped

    @staticmethod
    def _names(items: list[Item], limit: int) -> list[str]:
        """The execution ids (or key names) of ``items`` (``pk = P X#<name>``), once each."""
        return list(dict.fromkeys(it["pk"].split("#", 2)[2] for it in items))[:limit]

    def prune(self, cutoff: int, limit: int) -> int:
        """Delete executions finished at or before ``cutoff``: their partition (a
        workflow's memos, children's stored jobs) and their step jobs (pending ones, a
        workflow's, any the job prune has not removed); how many jobs it deleted."""
        pruned = 0
        done = self.db.find(
            "tp = :p AND tx <= :t", index="timeout", limit=limit, p=f"{self.p}XF", t=cutoff
        )
        for it in done:
            own = self.db.query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues=vals(pk=it["pk"]),
                ProjectionExpression="pk, sk",
                ConsistentRead=True,
            )
            keys = [self.db.key_of(o) for o in own if o["sk"] != "X"]
            ids = [job_of(it["id"], i) for i in range(len(self._exec(it).steps))]
            for job in self.store.read_jobs(ids).values():
                pruned += 1
                keys.append(self.keys.job(job["id"]))
                keys += [self.keys.attempt(job["id"], n) for n in range(1, job.get("att", 0) + 1)]
                keys += side_keys(job)
            self.db.batch_delete([*keys, self._key("X", it["id"])])  # the execution last
        return pruned

    # ------------------------------------------------------------------ start and cancel

    def start_execution(self, new: NewExecution, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.start_execution`.

        One ``TransactWriteItems`` stores the execution (conditional on its absence) with
        the plan of :func:`~queue_core.rules.flows.plan.start_ops`, the concurrency key's
        entry (conditional on the version read for ``decide.admit``) and the step jobs'
        ``JB#`` parts; parts that do not fit go first, job writes that do not fit follow
        in chunks (``td``); superseded executions end first (:meth:`_supersede`)."""
        t = self.store.now(now)
        with translate("start_execution"):
            steps = self.specs.put(new)  # a declared flow's steps: not in each execution
            seqs = SEQ.take(len(new.jobs) + 1)
            for _ in range(_TRIES):
                x = Exec(exec_item(self.p, new, seqs[0], t, steps is None), steps)
                admission, fixed = self._admit(new, t)
                if admission.supersede and new.concurrency and new.conc_key is not None:
                    for old in admission.supersede:
                        self._supersede(old, new.concurrency.behavior, new.conc_key, t)
                    continue
                parts: dict[int, list[Item]] = {}
                if admission.state is not _E.SKIPPED:
                    puts, parts = self._job_parts(new, seqs[1:], t)
                    if len(fixed) + len(puts) >= TX_MAX:  # inert until the execution exists
                        for i in range(0, len(puts), TX_MAX):
                            self.db.transact(puts[i : i + TX_MAX])
                        puts = []
                    fixed += puts
                view = x.view()
                ops = plan.start_ops(view, plan.index_of(view.steps), admission, t)
                try:
                    return self._commit(x, ops, fixed, t, parts=parts, create=True)[0]
                except TxCancelled as exc:
                    if exc.codes and exc.codes[0] == "ConditionalCheckFailed":
                        raise StorageError(f"execution id {new.id!r} already exists") from None
        raise StorageError(f"start_execution {new.id}: too much contention")

    def _job_parts(
        self, new: NewExecution, seqs: list[int], now: int
    ) -> tuple[Actions, dict[int, list[Item]]]:
        """The Puts of the ``JB#`` parts holding every step's job item, and the parts."""
        mark = {"wf": 1} if new.kind == "workflow" else {}  # kept with the execution
        items = [
            {**new_item(self.keys, job, now, seq), "pl": job.payload, **mark}
            for job, seq in zip(new.jobs, seqs, strict=True)
        ]
        parts = {k // PART: items[k : k + PART] for k in range(0, len(items), PART)}
        pk, what = f"{self.p}X#{new.id}", "the job items of {} steps"
        blobs = {k: small(new.flow, what.format(len(its)), zjson(its)) for k, its in parts.items()}
        return [self._put({"pk": pk, "sk": f"JB#{k:04d}", "d": b}) for k, b in blobs.items()], parts

    def cancel_execution(self, execution_id: str, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.cancel_execution`."""
        t = self.store.now(now)
        with translate("cancel_execution"):
            state, _ = self._advance(execution_id, t, lambda v: decide.cancel(v, t))
        if state is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        return state

    # ------------------------------------------------------------------ the interpreter

    def _advance(
        self, eid: str, now: int, judge: Callable[[ExecutionView], Transition] | None = None
    ) -> tuple[ExecutionState | None, list[ReapedJob]]:
        """Fold the claims and events of ``eid`` and ``judge`` it (:func:`folding.fold`), then
        apply the plan (:meth:`_commit`); again when the execution moved meanwhile."""
        reaped: list[ReapedJob] = []
        for _ in range(_TRIES):
            x = self._read(eid)
            if x is None:
                return None, reaped
            if x.item.get("td"):
                reaped += self._drain(eid, now)
                continue
            f, fixed, n = self.folded(x, now, judge)
            if not (f.ops or n or x.claims):
                return x.state, reaped
            try:
                state, ended = self._commit(x, f.ops, fixed, now, sets={"r": {}})
            except TxCancelled:
                time.sleep(0.002)
                continue
            reaped += ended
            if n < _EVENTS:
                return state, reaped
            judge = None
        raise StorageError(f"sqs backend: flow {eid}: advance kept conflicting")

    def folded(
        self, x: Exec, now: int, judge: Callable[[ExecutionView], Transition] | None = None
    ) -> tuple[folding.Folded, Actions, int]:
        """The claims and events of ``x`` folded (:func:`folding.fold`), the deletes of those
        events (and a finished execution's key mark) and how many were read. An event of
        a step not stored yet (a sub-execution that ended before its parent's step was
        written) waits for the next advance."""
        events = self.db.find(
            "pk = :pk AND begins_with(sk, :e)", limit=_EVENTS, pk=x.item["pk"], e="E#"
        )
        events = [e for e in events if e["i"] < len(x.steps)]
        kept = [folding.StepEvent(i, _S.RUNNING, n) for i, n in x.claims.items()]
        kept += [
            folding.StepEvent(e["i"], StepState(e["st"]), e["n"], e.get("rsn")) for e in events
        ]
        view = x.view()
        f = folding.fold(view, plan.index_of(view.steps), kept, now, judge)
        exists = {"TableName": self.db.name, "ConditionExpression": "attribute_exists(pk)"}
        fixed: Actions = [{"Delete": {**exists, "Key": self.db.key_of(e)}} for e in events]
        if f.finished and x.item.get("ck"):
            fixed.append(self._key_set(x.item["ck"], x.id, None, None, mark=now))
        return f, fixed, len(events)

    def _drain(self, eid: str, now: int) -> list[ReapedJob]:
        """Apply the job writes left in ``td``, a chunk per transaction."""
        reaped: list[ReapedJob] = []
        for _ in range(_TRIES):
            x = self._read(eid)
            if x is None or not x.item.get("td"):
                return reaped
            try:
                reaped += self._commit(x, x.todo(), [], now, drain=False)[1]
            except TxCancelled:
                time.sleep(0.002)
        raise StorageError(f"sqs backend: flow {eid}: job writes kept conflicting")

    def _commit(
        self,
        x: Exec,
        ops: Sequence[plan.Op],
        fixed: Actions,
        now: int,
        *,
        sets: Item | None = None,
        parts: dict[int, list[Item]] | None = None,
        create: bool = False,
        drain: bool = True,
    ) -> tuple[ExecutionState, list[ReapedJob]]:
        """Apply ``ops`` to execution ``x`` in one transaction: the execution item (put when
        ``create``, else updated on the condition of its version) with ``sets``, then
        ``fixed``, then the job writes that fit; those left are kept in ``td`` and (with
        ``drain``) applied next. Returns the execution's state and the running jobs
        ended; raises :class:`TxCancelled` when anything moved."""
        sets, todo, wf = exec_sets(self.p, x, ops, now, sets or {})
        parts = {} if parts is None else parts  # each JB# part read once
        fixed = [*fixed, *wf_writes(self.db, self.keys, wf, parts, len(fixed))]
        ids = [job_of(x.id, op.idx) for op in todo if not fresh_release(x, op)]
        jobs = self.store.read_jobs(ids) if ids else {}
        done = [self._job_op(op, x, jobs, now, parts) for op in todo]
        chosen = fit([acts for acts, _, _ in done], TX_MAX - 1 - len(fixed), fixed)
        left = [dump_op(op) for gi, op in enumerate(todo) if gi not in chosen]
        sets.update(td=pack(json.dumps(left)), dp=f"{self.p}XA", dx=now)
        if not left:
            sets.update(td=None, dp=None, dx=None)
        if create:
            head = self.db.put({**x.item, **sets})
        else:
            version: dict[str, Any] = {"cond": "v = :xv", "cond_values": {"xv": x.item["v"]}}
            head = {"Update": self.db.update(self._key("X", x.id), sets, **version)}
        self.db.write([head, *fixed, *(a for gi in chosen for a in done[gi][0])])
        if wf.late:  # memo values no longer named by the execution
            self.db.batch_delete(wf.late)
        self._hint([h for gi in chosen if (h := done[gi][2]) is not None], now)
        reaped = [r for gi in chosen if (r := done[gi][1]) is not None]
        if x.item.get("ck") and not create and any(isinstance(o, plan.Finished) for o in ops):
            self._promote_key(x.item["ck"], now)
        if left and drain:
            reaped += self._drain(x.id, now)
        for sub in wf.subs:  # a step standing for a sub-execution was cancelled or timed out
            self._advance(sub, now, lambda v: decide.cancel(v, now))
        if wf.parent is not None and not create:
            reaped += self.after_ends([wf.parent], now)
        return ExecutionState(sets.get("st", x.item["st"])), reaped

    def _job_op(
        self, op: JobOp, x: Exec, jobs: dict[str, Item], now: int, parts: dict[int, list[Item]]
    ) -> tuple[Actions, ReapedJob | None, Item | None]:
        """The writes of ``op`` (none when its job is not in the state it applies to), the
        running job it ends, the job it enqueues."""
        job = jobs.get(job_of(x.id, op.idx))
        if isinstance(op, plan.Release):
            k, sk, at = stored_at(x, op.idx)
            if k not in parts:  # the step jobs stored at start, read once per part
                got = self.db.get({"pk": {"S": x.item["pk"]}, "sk": {"S": sk}})
                if got is None:
                    raise StorageError(f"sqs backend: flow {x.id}: step jobs part {sk} missing")
                parts[k] = unzjson(got["d"])
            stored = parts[k][at]
            if job is not None:  # released before: a finished job runs again (a resume)
                return self.writes.rerun(job, stored, op.deadline_at, now)
            sets, removes = self.keys.queued_fields(stored, now, now)
            item = {k: v for k, v in stored.items() if k not in removes}
            item.update(sets, enq=now, fdl=op.deadline_at)
            if item.get("plc"):  # the parts keep the payload; large ones live in chunks
                item["pl"] = None
            return self.writes.put_new(item, stored["pl"]), None, item
        when = job_when(op)
        if job is None or job["st"] != when.value:
            return [], None, None
        fence: dict[str, Any] = {"cond": "st = :s AND v = :jv", "cond_values": {"s": job["st"]}}
        fence["cond_values"]["jv"] = job["v"]
        if isinstance(op, (plan.SetReady, plan.Wake)):  # a queued workflow job's ready time
            ready = now if isinstance(op, plan.Wake) else op.at
            sets, removes = self.keys.queued_fields(job, ready, now)
            up = self.db.update(self.keys.job(job["id"]), sets, removes, **fence)
            return [{"Update": up}], None, {**job, **sets} if ready < PARKED_AT else None
        if isinstance(op, plan.RequestCancel):
            cx = self.db.update(self.keys.job(job["id"]), {"cxl": True}, **fence)
            return [{"Update": cx}], None, None
        if when is JobState.QUEUED:
            return self.writes.end_queued(job, op.state, op.reason, now), None, None
        assert op.outcome is not None
        acts, _ = self.writes.end_attempt(
            job,
            op.outcome,
            op.reason,
            None,
            None,
            now,
            state=op.state,
            job_reason=op.reason,
            **fence,
        )
        ended = ReapedJob(
            job_id=job["id"],
            attempt=job["att"],
            outcome=op.outcome,
            reason=op.reason,
            state=op.state,
        )
        return acts, ended, None

    def _hint(self, items: list[Item], now: int) -> None:
        """Wake-up hints for released steps: at most :data:`_HINTS` per queue (a 500-wide
        release sends 10 messages, not 500; a worker that claims in batches takes the rest)."""
        per_queue: dict[str, list[Item]] = {}
        for it in items:
            per_queue.setdefault(it["q"], []).append(it)
        self.store.hint([it for its in per_queue.values() for it in its[:_HINTS]], now)

    # ------------------------------------------------------------------ concurrency

    def _admit(self, new: NewExecution, now: int) -> tuple[decide.Admission, Actions]:
        """``decide.admit`` on the key item, and the start's write on it, conditional on
        the version read: the new execution's entry (a skipped one only moves ``v``)."""
        if new.conc_key is None:
            return decide.Admission(_E.RUNNING), []
        key = self.db.get(self._key("XK", new.conc_key))
        admission = decide.admit(new.concurrency, [] if key is None else slots(key))
        kv = None if key is None else int(key["v"])
        cell = None if admission.state is _E.SKIPPED else f"{admission.state.value}|{now}"
        return admission, [self._key_set(new.conc_key, new.id, cell, kv, new.concurrency)]

    def _supersede(self, eid: str, behavior: str, ck: str, now: int) -> None:
        """A newer execution of key ``ck`` ends ``eid``: by ``decide.cancel`` through the advance
        (claims folded first; key entry ``cancelling``), or (``latest``) ``supersede_ops``."""
        if behavior == "cancel_in_progress":
            why = ExecutionReason.SUPERSEDED
            state, _ = self._advance(eid, now, lambda v: decide.cancel(v, now, why))
            if state is _E.CANCELLING and (x := self._read(eid)) is not None:
                self.db.transact([self._key_set(ck, eid, f"cancelling|{x.item['ca']}", None)])
            return
        for _ in range(_TRIES):
            x = self._read(eid)
            if x is None or x.state is not _E.QUEUED:
                return
            ops = plan.supersede_ops(view := x.view(), plan.index_of(view.steps), behavior, now)[1]
            with contextlib.suppress(TxCancelled):  # else read again
                self._commit(x, ops, [self._key_set(ck, x.id, None, None, mark=now)], now)
                return
        raise StorageError(f"sqs backend: flow {eid}: supersede kept conflicting")

    def _key_set(
        self,
        ck: str,
        eid: str,
        cell: str | None,
        kv: int | None,
        spec: ConcurrencySpec | None = None,
        *,
        mark: int | None = None,
    ) -> dict[str, Any]:
        """Set (``cell``) or remove (``None``) execution ``eid``'s entry of key ``ck`` and
        move ``v``, conditional on ``v = kv`` when given. With ``spec`` (a start) the
        limit is stored too, and ``kv`` ``None`` creates the item. With ``mark``, the key
        is flagged for promotion (``P XP``)."""
        new = spec is not None and kv is None
        sets: Item = {"a": {eid: cell}} if new else {f"a.{eid}": cell}
        if spec is not None:
            sets.update(cl=spec.limit, cb=spec.behavior)
        if mark is not None:
            sets.update(dp=f"{self.p}XP", dx=mark)
        cond: dict[str, Any] = {} if kv is None else {"cond": "v = :kv", "cond_values": {"kv": kv}}
        if new:
            cond = {"cond": "attribute_not_exists(pk)"}
        return {"Update": self.db.update(self._key("XK", ck), sets, **cond)}

    def _promote_key(self, ck: str, now: int) -> None:
        """Start the queued executions of ``ck`` that have a place (``decide.promote``, then
        ``plan.start_ops``), one at a time under the key's version; then clear its mark."""
        for _ in range(_TRIES):
            key = self.db.get(self._key("XK", ck))
            if key is None:
                return
            ids = decide.promote(ConcurrencySpec(int(key["cl"]), key["cb"]), slots(key))
            if not ids:
                kv: dict[str, Any] = {"cond": "v = :kv", "cond_values": {"kv": key["v"]}}
                unmark = self.db.update(self._key("XK", ck), {"dp": None, "dx": None}, **kv)
                if key.get("dp") is None or self.db.update_if(unmark) is not None:
                    return
                continue
            x = self._read(ids[0])
            try:
                if x is None or x.state is not _E.QUEUED:  # a stale entry: fix it
                    cell = (
                        None if x is None or x.state.finished else f"{x.state.value}|{x.item['ca']}"
                    )
                    self.db.transact([self._key_set(ck, ids[0], cell, key["v"])])
                    continue
                view = x.view()
                ops = plan.start_ops(
                    view, plan.index_of(view.steps), decide.Admission(_E.RUNNING), now
                )
                ends = any(isinstance(op, plan.Finished) for op in ops)
                cell = None if ends else f"running|{x.item['ca']}"
                self._commit(
                    x,
                    ops,
                    [self._key_set(ck, x.id, cell, key["v"], mark=now if ends else None)],
                    now,
                )
            except TxCancelled:
                continue

    # ------------------------------------------------------------------ reads

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.get_execution`."""
        with translate("get_execution"):
            item = self.db.get(self._key("X", execution_id))  # the record needs no steps
            return None if item is None else exec_record(item, self.specs.spec_json(item["sh"]))

    def list_executions(
        self,
        flow: str | None = None,
        state: ExecutionState | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.list_executions`. Pages the
        ``all`` index (partition ``P X``) with filters; meant for dashboards and the CLI."""
        limit, offset = check_page(limit, offset)
        if limit <= 0:
            return []
        kw = all_index_query(f"{self.p}X", fl=flow, st=None if state is None else state.value)
        with translate("list_executions"):
            items = sorted(self.db.query(**kw), key=lambda it: (it["ca"], it["seq"]), reverse=True)
            page = items[max(offset, 0) : max(offset, 0) + limit]
            specs = {h: self.specs.spec_json(h) for h in dict.fromkeys(it["sh"] for it in page)}
            return [exec_record(it, specs[it["sh"]]) for it in page]

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.list_steps` (claims not yet
        folded by an advance show as ``running``)."""
        with translate("list_steps"):
            x = self._read(execution_id)
        return [] if x is None else x.step_records()
