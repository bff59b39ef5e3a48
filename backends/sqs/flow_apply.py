"""Flows on DynamoDB: the durable step-end event, the versioned advance and its chunks.

Shape (B) of ``docs/design/flows-storage.md`` §10, as on Redis: the transaction that
ends a step job's attempt (``finish``, ``reap``, ``cancel``) also puts a step-end event
item in the execution's partition (:func:`~backends.sqs.flow_items.event_sk`); a claim
of a step job records the claim in the execution item (``r``), conditional on the
execution still ``running`` with no failed step and no passed deadline, which also
moves its version. The *advance* then reads the execution item (with its version ``v``)
and its events, folds them through :func:`queue_core.flows.decide.step_ended` and
judges the rest (:func:`~queue_core.flows.decide.advance`, ``cancel`` or ``start``)
— :func:`backends.sqs.flow_items.fold` — and writes, in one ``TransactWriteItems``
conditional on ``v``: the execution's new fields and step states, the deletion of the
folded events, and as many of the implied job writes as fit (release, ``not_run``,
``flow_timeout``, cancel request). Job writes that do not fit (a 500-wide fan-out) are
stored in the execution item (``td``) and applied in chunks of at most 100 items, each
chunk in one transaction with the execution item's version as the fence, so a chunk
applies exactly once whoever (the finisher, another worker, the reaper) applies it.

Who advances: the caller of ``finish``/``cancel`` right after its transaction; ``reap``
advances running executions whose deadline passed, executions with events or job
writes left (``due`` index partition ``P XA``), and re-runs promotion for concurrency
keys marked ``P XP``. A worker SIGKILLed between its finish and the advance stalls
nothing: the event is durable and the next reap folds it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from backends.sqs.base import StorageBase
from backends.sqs.codec import Item, vals
from backends.sqs.dynamo import TX_MAX, TxCancelled
from backends.sqs.flow_items import PART, Exec, Fold, blob_jobs, cells_text, fold
from queue_core.errors import StorageError
from queue_core.flows import decide
from queue_core.flows.decide import ExecutionSlot, ExecutionView, Transition
from queue_core.flows.model import ConcurrencySpec, ExecutionState
from queue_core.flows.storage import step_job_id
from queue_core.model import JobState, Outcome, ReapedJob, Reason

__all__ = ["FlowApply"]

log = logging.getLogger("backends.sqs")
_E = ExecutionState
_TRIES = 100
_HINTS = 10
_EVENTS = 60
"""Events folded by one advance transaction (the rest by the next round)."""

Judge = Callable[[ExecutionView], Transition] | None


def _slots(key: Item) -> list[ExecutionSlot]:
    out = []
    for eid, cell in (key.get("a") or {}).items():
        st, ca = cell.split("|")
        out.append(ExecutionSlot(eid, ExecutionState(st), int(ca)))
    return out


def _item_key(action: dict[str, Any]) -> str:
    body = next(iter(action.values()))
    key = body.get("Key") or {k: body["Item"][k] for k in ("pk", "sk")}
    return f"{key['pk']['S']}|{key['sk']['S']}"


def _fit(groups: list[list[dict[str, Any]]], room: int, taken: set[str]) -> tuple[list[int], int]:
    """Indexes of the op groups that fit in ``room`` items, each item once."""
    chosen: list[int] = []
    for gi, group in enumerate(groups):
        keys = {_item_key(a) for a in group}
        if len(group) > room or keys & taken:
            continue
        chosen.append(gi)
        room -= len(group)
        taken |= keys
    return chosen, room


class FlowApply(StorageBase):
    """Events, advance, chunked job writes and promotion of the SQS flows."""

    _flows_seen = False
    """This process saw the deployment's flows marker (:meth:`_flows_exist`)."""

    def _xkey(self, eid: str) -> dict[str, Any]:
        return {"pk": {"S": f"{self.keys.p}X#{eid}"}, "sk": {"S": "X"}}

    def _kkey(self, ck: str) -> dict[str, Any]:
        return {"pk": {"S": f"{self.keys.p}XK#{ck}"}, "sk": {"S": "XK"}}

    def _read_x(self, eid: str) -> Exec | None:
        item = self.db.get(self._xkey(eid))
        return None if item is None else Exec(item)

    # ------------------------------------------------------------------ the hooks

    def _claim_exec_update(self, eid: str, claims: dict[int, int], now: int) -> dict[str, Any]:
        """The claim's write on the execution: record the started attempts, only while it
        may start steps (``decide.may_release`` on the stored fields); moves ``v``."""
        names = {"#v": "v", "#r": "r"}
        values: dict[str, Any] = {":one": {"N": "1"}, ":run": {"S": "running"}}
        values[":now"] = {"N": str(now)}
        sets = []
        for k, (idx, att) in enumerate(claims.items()):
            names[f"#i{k}"] = str(idx)
            values[f":a{k}"] = {"N": str(att)}
            sets.append(f"#r.#i{k} = :a{k}")
        return {
            "Update": {
                "TableName": self.db.name,
                "Key": self._xkey(eid),
                "UpdateExpression": "SET " + ", ".join([*sets, "#v = #v + :one"]),
                "ConditionExpression": (
                    "st = :run AND attribute_not_exists(fs) AND "
                    "(attribute_not_exists(dl) OR dl > :now)"
                ),
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def _after_ends(self, eids: Sequence[str], now: int) -> list[ReapedJob]:
        """Advance the executions whose step jobs just ended (or that ``reap`` found
        due). The ends are durable: a failure here is logged and left to the next
        ``reap``, never reported as a failed ``finish`` and never blocking other
        executions."""
        reaped: list[ReapedJob] = []
        for eid in dict.fromkeys(eids):
            try:
                reaped += self._advance(eid, now)[1]
            except StorageError as exc:
                log.warning("flow advance of %s left to the reaper: %s", eid, exc)
        return reaped

    def _flows_exist(self) -> bool:
        """Whether this deployment holds any flow execution: one Query of the ``all``
        index (partition ``P X``, ``Limit=1``) until one is seen, nothing after. A
        deployment without flows spares ``reap`` its three flow Queries; one whose
        executions were all pruned since this process saw one keeps paying them."""
        if not self._flows_seen:
            resp = self.db.client.query(
                TableName=self.db.name,
                IndexName="all",
                KeyConditionExpression="ap = :ap",
                ExpressionAttributeValues=vals(ap=f"{self.keys.p}X"),
                Limit=1,
            )
            self._flows_seen = bool(resp.get("Items"))
        return self._flows_seen

    def _reap_flows_first(self, now: int, limit: int) -> list[ReapedJob]:
        """Running executions whose deadline passed: ``decide.advance`` times them out."""
        due = self.db.query(
            IndexName="timeout",
            KeyConditionExpression="tp = :p AND tx <= :now",
            ExpressionAttributeValues=vals(p=f"{self.keys.p}XT", now=now),
            Limit=limit,
        )
        return self._after_ends([it["id"] for it in due[:limit]], now)

    def _reap_flows_after(self, now: int, limit: int) -> list[ReapedJob]:
        """Executions with events or job writes left (ended by this reap, or left by a
        killed caller), then concurrency keys whose promotion may be due."""
        reaped: list[ReapedJob] = []
        for part in ("XA", "XP"):
            items = self.db.query(
                IndexName="due",
                KeyConditionExpression="dp = :p",
                ExpressionAttributeValues=vals(p=f"{self.keys.p}{part}"),
                Limit=limit,
            )
            heads = dict.fromkeys(it["pk"].split("#", 2)[2] for it in items)
            for name in list(heads)[:limit]:
                if part == "XA":
                    reaped += self._after_ends([name], now)
                else:
                    self._promote_key(name, now)
        return reaped

    # ------------------------------------------------------------------ job writes

    def _op_groups(
        self, x: Exec, ops: list[list[Any]], deadline: int | None, now: int
    ) -> tuple[list[list[dict[str, Any]]], list[ReapedJob | None], list[Item | None]]:
        """Per operation: its writes, the reaped job it reports, the job it enqueues."""
        stops = [step_job_id(x.id, int(i)) for op, i in ops if op != "rel"]
        jobs = self._read_jobs(stops) if stops else {}
        parts: dict[int, list[Item]] = {}
        groups: list[list[dict[str, Any]]] = []
        reaps: list[ReapedJob | None] = []
        hints: list[Item | None] = []
        for op, i in ops:
            jid = step_job_id(x.id, int(i))
            hint: Item | None
            if op == "rel":
                part = int(i) // PART
                if part not in parts:
                    parts[part] = self._job_part(x.id, part)
                acts, hint = self._release(parts[part][int(i) % PART], deadline, now)
                reap = None
            else:
                acts, reap, hint = self._op_actions(op, jid, jobs.get(jid), now)
            groups.append(acts)
            reaps.append(reap)
            hints.append(hint)
        return groups, reaps, hints

    def _hint_released(self, items: list[Item], now: int) -> None:
        """Wake-up hints for released steps: at most :data:`_HINTS` per queue per write.
        Claims read the ready index, so a hint only wakes a waiting worker; a 500-wide
        release sends 10 messages, not 500 (a worker that claims in batches takes
        the rest)."""
        per_queue: dict[str, list[Item]] = {}
        for it in items:
            per_queue.setdefault(it["q"], []).append(it)
        self._hint([it for its in per_queue.values() for it in its[:_HINTS]], now)

    def _job_part(self, eid: str, part: int) -> list[Item]:
        key = {"pk": {"S": f"{self.keys.p}X#{eid}"}, "sk": {"S": f"JB#{part:04d}"}}
        item = self.db.get(key)
        if item is None:
            raise StorageError(f"sqs backend: flow {eid}: step jobs part {part} missing")
        return blob_jobs(item["d"])

    def _release(
        self, stored: Item, deadline: int | None, now: int
    ) -> tuple[list[dict[str, Any]], Item]:
        """Put the step's job item, queued now with the flow deadline (once: the Put is
        conditional on its absence, the caller's transaction on the execution's version)."""
        sets, removes = self.keys.queued_fields(stored, now, now)
        item = {k: v for k, v in stored.items() if k not in removes}
        item.update(sets, enq=now, fdl=deadline)
        if item.get("plc"):  # the parts keep the payload; large ones live in chunks
            item["pl"] = None
        acts: list[dict[str, Any]] = [self.db.put(item)]
        if item.get("plc"):
            acts += self.db.chunk_puts(item["pk"], stored["pl"])
        if item.get("ck") is not None:
            acts.append({"Update": self.db.counter(self.keys.counter(item["ck"]), act=1)})
        return acts, item

    def _op_actions(
        self, op: str, jid: str, job: Item | None, now: int
    ) -> tuple[list[dict[str, Any]], ReapedJob | None, Item | None]:
        if job is None:
            return [], None, None
        cond, fv = "st = :s AND v = :jv", {"s": job["st"], "jv": job["v"]}
        if op == "nr" and job["st"] == JobState.QUEUED.value:
            sets, removes = self._finished_fields(JobState.CANCELLED, now)
            sets["rsn"] = Reason.NOT_RUN.value
            acts = [{"Update": self.db.update(self.keys.job(jid), sets, removes, cond, fv)}]
            if job.get("ck") is not None:
                acts.append({"Update": self.db.counter(self.keys.counter(job["ck"]), act=-1)})
            return acts, None, None
        if op == "cx" and job["st"] == JobState.RUNNING.value:
            cx = self.db.update(self.keys.job(jid), {"cxl": True}, [], cond, fv)
            return [{"Update": cx}], None, None
        if op == "to" and job["st"] == JobState.RUNNING.value:
            flow = Reason.FLOW_TIMEOUT.value
            acts, _ = self._end_actions(
                job,
                Outcome.TIMED_OUT,
                flow,
                None,
                None,
                now,
                state=JobState.TIMED_OUT,
                job_reason=flow,
                event=False,
                cond=cond,
                cond_values=fv,
            )
            reap = ReapedJob(
                job_id=jid,
                attempt=job["att"],
                outcome=Outcome.TIMED_OUT,
                reason=flow,
                state=JobState.TIMED_OUT,
            )
            return acts, reap, None
        return [], None, None

    def _exec_sets(self, x: Exec, f: Fold | None, todo: list[list[Any]], now: int) -> Item:
        """SET values (``None`` = REMOVE) of the execution item after ``f``."""
        sets: Item = {"td": json.dumps(todo) if todo else None}
        sets["dp"], sets["dx"] = (f"{self.keys.p}XA", now) if todo else (None, None)
        if f is None:
            return sets
        v = f.view
        sets.update(
            st=v.state.value,
            rsn=None if v.reason is None else v.reason.value,
            fs=v.failed_step,
            dl=v.deadline_at,
            r={},
            ss=cells_text(f.cells),
        )
        if f.started:
            sets["sa"] = now
        if f.finished:
            sets["fa"] = now
        if v.state.finished:
            sets["tp"], sets["tx"] = f"{self.keys.p}XF", x.item.get("fa", now)
            if f.finished:
                sets["tx"] = now
        elif v.state is _E.RUNNING and v.deadline_at is not None:
            sets["tp"], sets["tx"] = f"{self.keys.p}XT", v.deadline_at
        else:
            sets["tp"] = sets["tx"] = None
        return sets

    def _write(
        self,
        x: Exec,
        f: Fold | None,
        ops: list[list[Any]],
        fixed: list[dict[str, Any]],
        now: int,
    ) -> list[ReapedJob]:
        """One transaction: the execution item (conditional on ``v``), ``fixed`` writes,
        and the job writes of ``ops`` that fit; the rest is stored in ``td``.
        Raises :class:`TxCancelled` when anything moved."""
        deadline = x.item.get("dl") if f is None else f.view.deadline_at
        groups, reaps, hints = self._op_groups(x, ops, deadline, now)
        taken = {_item_key(a) for a in fixed} | {f"{x.item['pk']}|X"}
        chosen, _ = _fit(groups, TX_MAX - 1 - len(fixed), taken)
        rest = [op for gi, op in enumerate(ops) if gi not in chosen]
        sets = self._exec_sets(x, f, rest, now)
        upd = self.db.update(self._xkey(x.id), sets, cond="v = :xv", cond_values={"xv": x.version})
        actions = [{"Update": upd}, *fixed, *(a for gi in chosen for a in groups[gi])]
        self.db.transact(actions)
        self._hint_released([h for gi in chosen if (h := hints[gi]) is not None], now)
        return [r for gi in chosen if (r := reaps[gi]) is not None]

    def _drain(self, eid: str, now: int) -> list[ReapedJob]:
        """Apply the job writes left in ``td``, a chunk per transaction."""
        reaped: list[ReapedJob] = []
        for _ in range(_TRIES):
            x = self._read_x(eid)
            if x is None or not x.todo:
                return reaped
            try:
                reaped += self._write(x, None, x.todo, [], now)
            except TxCancelled:
                time.sleep(0.002)
        raise StorageError(f"sqs backend: flow {eid}: job writes kept conflicting")

    # ------------------------------------------------------------------ advance

    def _events(self, eid: str) -> list[Item]:
        return self.db.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :e)",
            ExpressionAttributeValues=vals(pk=f"{self.keys.p}X#{eid}", e="E#"),
            ConsistentRead=True,
            Limit=_EVENTS,
        )[:_EVENTS]

    def _advance(
        self, eid: str, now: int, judge: Judge = None, extra: Sequence[dict[str, Any]] = ()
    ) -> tuple[ExecutionState | None, list[ReapedJob]]:
        """Fold the pending claims and events of ``eid``, judge it and write the result
        (retrying on a version conflict); then promote its key if it finished."""
        reaped: list[ReapedJob] = []
        for _ in range(_TRIES):
            x = self._read_x(eid)
            if x is None:
                return None, reaped
            if x.todo:
                reaped += self._drain(eid, now)
                continue
            events = self._events(eid)
            f = fold(x, events, now, judge)
            if not f.changed and not events:
                return x.state, reaped
            fixed = [*extra, *self._event_deletes(events)]
            if f.finished and x.item.get("ck") and x.state is not _E.SKIPPED:
                fixed.append(self._key_left(x, now))
            try:
                reaped += self._write(x, f, f.ops(x.cells), fixed, now)
            except TxCancelled:
                if extra:  # the caller's guard may be stale: it reads again
                    return None, reaped
                time.sleep(0.002)
                continue
            if f.finished and x.item.get("ck"):
                self._promote_key(x.item["ck"], now)
            if len(events) < _EVENTS:
                return f.view.state, reaped + self._drain(eid, now)
            judge, extra = None, ()
        raise StorageError(f"sqs backend: flow {eid}: advance kept conflicting")

    def _event_deletes(self, events: list[Item]) -> list[dict[str, Any]]:
        return [
            {
                "Delete": {
                    "TableName": self.db.name,
                    "Key": {"pk": {"S": e["pk"]}, "sk": {"S": e["sk"]}},
                    "ConditionExpression": "attribute_exists(pk)",
                }
            }
            for e in events
        ]

    # ------------------------------------------------------------------ prune

    def _prune_flows(self, cutoff: int, limit: int) -> None:
        """Finished executions older than ``cutoff``: every item of their partition, and
        their step jobs (pending ones, and any the job prune has not removed)."""
        done = self.db.query(
            IndexName="timeout",
            KeyConditionExpression="tp = :p AND tx <= :cut",
            ExpressionAttributeValues=vals(p=f"{self.keys.p}XF", cut=cutoff),
            Limit=limit,
        )[:limit]
        for it in done:
            pk = it["pk"]
            part = self.db.query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues=vals(pk=pk),
                ProjectionExpression="pk, sk",
                ConsistentRead=True,
            )
            ids = [f"{it['id']}.{i}" for i in range(len(Exec(it).cells))]
            jobs = self._read_jobs(ids)
            keys = [{"pk": {"S": p["pk"]}, "sk": {"S": p["sk"]}} for p in part if p["sk"] != "X"]
            for job in jobs.values():
                keys.append(self.keys.job(job["id"]))
                keys += [self.keys.attempt(job["id"], n) for n in range(1, job.get("att", 0) + 1)]
                keys += self.keys.chunks(job["pk"], job.get("plc"))
            keys.append(self._xkey(it["id"]))  # the execution last
            self.db.batch_delete(keys)

    # ------------------------------------------------------------------ concurrency

    def _key_left(self, x: Exec, now: int) -> dict[str, Any]:
        """The key item's write when ``x`` finishes: it leaves ``a``; a promotion is due."""
        return self._key_set(x.item["ck"], x.id, None, None, mark=now)

    def _key_set(
        self, ck: str, eid: str, cell: str | None, kv: int | None, *, mark: int | None = None
    ) -> dict[str, Any]:
        """Set (``None``: remove) ``a.<eid>`` of the key item, conditional on its version
        ``kv``; with ``mark``, flag the key for promotion (``P XP``)."""
        names = {"#a": "a", "#e": eid, "#v": "v"}
        values: dict[str, Any] = {":one": {"N": "1"}, ":zero": {"N": "0"}}
        expr = "SET #v = if_not_exists(#v, :zero) + :one"
        if mark is not None:
            names.update({"#dp": "dp", "#dx": "dx"})
            values.update({":dp": {"S": f"{self.keys.p}XP"}, ":dx": {"N": str(mark)}})
            expr += ", #dp = :dp, #dx = :dx"
        if cell is not None:
            values[":c"] = {"S": cell}
            expr += ", #a.#e = :c"
        else:
            expr += " REMOVE #a.#e"
        op: dict[str, Any] = {
            "TableName": self.db.name,
            "Key": self._kkey(ck),
            "UpdateExpression": expr,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if kv is not None:
            op["ConditionExpression"] = "#v = :kv"
            values[":kv"] = {"N": str(kv)}
        return {"Update": op}

    def _promote_key(self, ck: str, now: int) -> None:
        """Start the queued executions of ``ck`` that have a place (``decide.promote``),
        one at a time under the key's version; clear the key's mark when none is left."""
        for _ in range(_TRIES):
            key = self.db.get(self._kkey(ck))
            if key is None:
                return
            spec = ConcurrencySpec(int(key["cl"]), key["cb"])
            ids = decide.promote(spec, _slots(key))
            if not ids:
                if key.get("dp") is None:
                    return
                op = self.db.update(
                    self._kkey(ck),
                    {"dp": None, "dx": None},
                    cond="v = :kv",
                    cond_values={"kv": key["v"]},
                )
                if self.db.update_if(op) is not None:
                    return
                continue
            eid = ids[0]
            x = self._read_x(eid)
            if x is None or x.state is not _E.QUEUED:  # a stale entry: fix it
                cell = None if x is None or x.state.finished else f"{x.state.value}|{x.item['ca']}"
                self._try_tx([self._key_set(ck, eid, cell, key["v"])])
                continue
            guard = self._key_set(ck, eid, f"running|{x.item['ca']}", key["v"])
            self._advance(eid, now, lambda v: decide.start(v, now), [guard])

    def _try_tx(self, actions: list[dict[str, Any]]) -> bool:
        try:
            self.db.transact(actions)
        except TxCancelled:
            return False
        return True
