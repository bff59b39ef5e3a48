"""Flow executions on SQS + DynamoDB (:class:`~queue_core.flows.storage.SupportsFlows`).

The operations; the event record, the advance and the chunked job writes are in
:mod:`backends.sqs.flow_apply`, the item layout in :mod:`backends.sqs.flow_items`.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import replace
from typing import Any

from backends.sqs.base import SEQ
from backends.sqs.codec import Item, all_index_query, encode_item, new_item, vals
from backends.sqs.dynamo import TX_MAX, TxCancelled
from backends.sqs.errors import translate
from backends.sqs.flow_apply import FlowApply, _slots
from backends.sqs.flow_items import PART, Exec, cells_text, exec_item, fold, jobs_blob
from queue_core.errors import NotFound, StorageError
from queue_core.flows import decide
from queue_core.flows.model import ExecutionReason, ExecutionState, StepState
from queue_core.flows.storage import ExecutionRecord, NewExecution, StepInputs, StepRecord

__all__ = ["SQSFlows"]

_E = ExecutionState
_SPEC_MAX = 350 * 1024
_TRIES = 100


class SQSFlows(FlowApply):
    """The :class:`~queue_core.flows.storage.SupportsFlows` operations of ``sqs://``."""

    # ------------------------------------------------------------------ start

    def _put_spec(self, new: NewExecution) -> None:
        body = zlib.compress(new.spec_json.encode("utf-8"))
        if len(body) > _SPEC_MAX:
            raise StorageError(
                f"sqs backend: flow {new.flow!r}: spec is {len(body)} bytes compressed, "
                f"more than the {_SPEC_MAX} this backend stores in one item"
            )
        item = {"pk": f"{self.keys.p}FS#{new.spec_hash}", "sk": "FS", "body": body}
        self.db.client.put_item(TableName=self.db.name, Item=encode_item(item))

    def _job_writes(
        self,
        new: NewExecution,
        seqs: list[int],
        released: set[int],
        deadline: int | None,
        now: int,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Item]]:
        """The ``JB#`` parts holding every step's job item, the Puts of the released
        ones (queued now) and those items."""
        items = []
        for job, seq in zip(new.jobs, seqs, strict=True):
            item = new_item(self.keys, replace(job, flow_deadline_at=deadline), now, seq)
            items.append({**item, "pl": job.payload})
        parts: list[dict[str, Any]] = []
        for k in range(0, len(items), PART):
            blob = jobs_blob(items[k : k + PART])
            if len(blob) > _SPEC_MAX:
                raise StorageError(
                    f"sqs backend: flow {new.flow!r}: step jobs {k}..{k + PART - 1} take "
                    f"{len(blob)} bytes compressed, more than {_SPEC_MAX} (payloads too large)"
                )
            part = {"pk": f"{self.keys.p}X#{new.id}", "sk": f"JB#{k // PART:04d}", "d": blob}
            parts.append({"Put": {"TableName": self.db.name, "Item": encode_item(part)}})
        puts: list[dict[str, Any]] = []
        queued: list[Item] = []
        for i in sorted(released):
            acts, item = self._release(items[i], deadline, now)
            puts += acts
            queued.append(item)
        return parts, puts, queued

    def _admission(self, new: NewExecution) -> tuple[decide.Admission, int | None]:
        if new.conc_key is None:
            return decide.Admission(_E.RUNNING), None
        key = self.db.get(self._kkey(new.conc_key))
        slots = [] if key is None else _slots(key)
        return decide.admit(new.concurrency, slots), None if key is None else int(key["v"])

    def _key_write(self, new: NewExecution, state: ExecutionState, kv: int | None, now: int) -> Any:
        assert new.conc_key is not None and new.concurrency is not None
        if state is _E.SKIPPED:
            check: dict[str, Any] = {"TableName": self.db.name, "Key": self._kkey(new.conc_key)}
            if kv is None:
                check["ConditionExpression"] = "attribute_not_exists(pk)"
            else:
                check["ConditionExpression"] = "v = :kv"
                check["ExpressionAttributeValues"] = vals(kv=kv)
            return {"ConditionCheck": check}
        cell = {"S": f"{state.value}|{now}"}
        values: dict[str, Any] = {
            ":cl": {"N": str(new.concurrency.limit)},
            ":cb": {"S": new.concurrency.behavior},
            ":one": {"N": "1"},
        }
        names = {"#cl": "cl", "#cb": "cb", "#v": "v", "#a": "a"}
        if kv is None:  # the key's first execution: create the item
            values[":m"] = {"M": {new.id: cell}}
            expr, cond = "SET #cl = :cl, #cb = :cb, #v = :one, #a = :m", "attribute_not_exists(pk)"
        else:
            names["#e"] = new.id
            values.update({":c": cell, ":kv": {"N": str(kv)}})
            expr, cond = "SET #cl = :cl, #cb = :cb, #v = #v + :one, #a.#e = :c", "#v = :kv"
        return {
            "Update": {
                "TableName": self.db.name,
                "Key": self._kkey(new.conc_key),
                "UpdateExpression": expr,
                "ConditionExpression": cond,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def start_execution(self, new: NewExecution, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.flows.storage.SupportsFlows.start_execution`.

        One ``TransactWriteItems`` stores the execution item (conditional on its absence),
        the concurrency key's entry (conditional on the version read for
        ``decide.admit``), the step jobs' ``JB#`` parts and the released roots' jobs;
        when that is more than 100 items, the parts go first and the roots are released
        in chunks afterwards (``td``)."""
        t = self._now(now)
        with translate("start_execution"):
            self._put_spec(new)
            seqs = SEQ.take(len(new.jobs) + 1)
            for _ in range(_TRIES):
                admission, kv = self._admission(new)
                item, released = self._start_item(new, seqs, admission, t)
                parts: list[dict[str, Any]] = []
                puts: list[dict[str, Any]] = []
                queued: list[Item] = []
                if admission.state is not _E.SKIPPED:
                    parts, puts, queued = self._job_writes(
                        new, seqs[1:], released, item.get("dl"), t
                    )
                fixed = [self.db.put(item)]
                if new.conc_key is not None:
                    fixed.append(self._key_write(new, admission.state, kv, t))
                if len(fixed) + len(parts) + len(puts) > TX_MAX:
                    for i in range(0, len(parts), TX_MAX):
                        self.db.transact(parts[i : i + TX_MAX])
                    parts, puts, queued = [], [], []
                    if released:
                        item["td"] = json.dumps([["rel", i] for i in sorted(released)])
                        item["dp"], item["dx"] = f"{self.keys.p}XA", t
                        fixed[0] = self.db.put(item)
                try:
                    self.db.transact(fixed + parts + puts)
                except TxCancelled as exc:
                    if exc.codes and exc.codes[0] == "ConditionalCheckFailed":
                        raise StorageError(f"execution id {new.id!r} already exists") from None
                    continue
                self._hint_released(queued, t)
                if "td" in item:
                    self._drain(new.id, t)
                return ExecutionState(item["st"])
        raise StorageError(f"start_execution {new.id}: too much contention")

    def _start_item(
        self, new: NewExecution, seqs: list[int], admission: decide.Admission, t: int
    ) -> tuple[Item, set[int]]:
        """The execution item as admitted, and the steps ``decide.start`` released."""
        item = exec_item(self.keys.p, new, seqs[0], t)
        if admission.state is _E.SKIPPED:
            reason = ExecutionReason.CONCURRENCY_LIMIT.value
            item.update(
                st=_E.SKIPPED.value,
                rsn=reason,
                fa=t,
                tp=f"{self.keys.p}XF",
                tx=t,
                ss=cells_text([(StepState.NOT_RUN, False, reason)] * len(new.steps)),
            )
            return item, set()
        if admission.state is not _E.RUNNING:
            return item, set()
        x = Exec(item)
        f = fold(x, [], t, lambda v: decide.start(v, t))
        sets = self._exec_sets(x, f, [], t)
        item.update({k: v for k, v in sets.items() if v is not None})
        return item, set(f.released)

    # ------------------------------------------------------------------ cancel and reads

    def cancel_execution(self, execution_id: str, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.flows.storage.SupportsFlows.cancel_execution`."""
        t = self._now(now)
        with translate("cancel_execution"):
            state, _ = self._advance(execution_id, t, lambda v: decide.cancel(v, t))
        if state is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        return state

    def _spec_json(self, spec_hash: str) -> str:
        item = self.db.get({"pk": {"S": f"{self.keys.p}FS#{spec_hash}"}, "sk": {"S": "FS"}})
        return "" if item is None else zlib.decompress(item["body"]).decode("utf-8")

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """See :meth:`queue_core.flows.storage.SupportsFlows.get_execution`."""
        with translate("get_execution"):
            x = self._read_x(execution_id)
            return None if x is None else x.record(self._spec_json(x.item["sh"]))

    def list_executions(
        self,
        flow: str | None = None,
        state: ExecutionState | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """See :meth:`queue_core.flows.storage.SupportsFlows.list_executions`. Pages the
        ``all`` index (partition ``P X``) with filters; meant for dashboards and the CLI."""
        if limit <= 0:
            return []
        kw = all_index_query(f"{self.keys.p}X", fl=flow, st=None if state is None else state.value)
        with translate("list_executions"):
            items = self.db.query(**kw)
            items.sort(key=lambda it: (it["ca"], it["seq"]), reverse=True)
            page = items[max(offset, 0) : max(offset, 0) + limit]
            specs = {h: self._spec_json(h) for h in dict.fromkeys(it["sh"] for it in page)}
            return [Exec(it).record(specs[it["sh"]]) for it in page]

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        """See :meth:`queue_core.flows.storage.SupportsFlows.list_steps` (claims not yet
        folded by an advance show as ``running``)."""
        with translate("list_steps"):
            x = self._read_x(execution_id)
        return [] if x is None else x.step_records()

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        """See :meth:`queue_core.flows.storage.SupportsFlows.get_step_inputs` (the
        execution item, then one BatchGetItem of the dependencies' result items)."""
        with translate("get_step_inputs"):
            x = self._read_x(execution_id)
            if x is None:
                raise NotFound(f"no flow execution with id {execution_id!r}")
            steps = x.steps
            pos = {sid: i for i, (sid, _) in enumerate(steps)}
            if step_id not in pos:
                raise NotFound(f"execution {execution_id} has no step {step_id!r}")
            deps = steps[pos[step_id]][1]
            pk = f"{self.keys.p}X#{execution_id}"
            keys = [{"pk": {"S": pk}, "sk": {"S": f"O#{pos[d]:06d}"}} for d in deps]
            found = {it["sk"]: it["d"] for it in self.db.batch_get(keys)} if keys else {}
        return StepInputs(
            input=bytes(x.item.get("in", b"")),
            results={d: found.get(f"O#{pos[d]:06d}") for d in deps},
        )
