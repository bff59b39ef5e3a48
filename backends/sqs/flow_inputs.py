"""SQS + DynamoDB: flow steps' inputs (the execution's input and its dependencies'
results), one step at a time or for a claimed batch in two BatchGetItem reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from backends.sqs.codec import Item
from backends.sqs.dynamo import Table
from backends.sqs.errors import translate
from backends.sqs.flow_items import Exec
from queue_core.records.errors import NotFound
from queue_core.storage.flows import StepInputs

__all__ = ["StepInputsReader"]


class StepInputsReader:
    """``get_step_inputs`` and ``get_step_inputs_batch`` over the flows part's reads.

    Args:
        db: the table.
        key: an execution's item key from its id.
        read: an execution by id (consistent read), ``None`` when there is none.
        exec_of: an execution item as read -> the execution (with its steps).
    """

    def __init__(
        self,
        db: Table,
        key: Callable[[str], dict[str, Any]],
        read: Callable[[str], Exec | None],
        exec_of: Callable[[Item], Exec],
    ) -> None:
        self.db, self._key, self._read, self._exec_of = db, key, read, exec_of

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.get_step_inputs` (the
        execution item, then one BatchGetItem of the dependencies' result items)."""
        with translate("get_step_inputs"):
            x = self._read(execution_id)
            if x is None:
                raise NotFound(f"no flow execution with id {execution_id!r}")
            if step_id not in x.pos:
                raise NotFound(f"execution {execution_id} has no step {step_id!r}")
            return self._inputs([(x, step_id)])[0]

    def get_step_inputs_batch(self, steps: Sequence[tuple[str, str]]) -> list[StepInputs | None]:
        """See :class:`queue_core.storage.abilities.SupportsStepInputsBatch`: one
        BatchGetItem of the executions' items, one of every step's dependencies' results
        (two reads per claimed batch instead of two per step)."""
        with translate("get_step_inputs_batch"):
            keys = [self._key(eid) for eid in dict.fromkeys(eid for eid, _ in steps)]
            read = {x.id: x for x in map(self._exec_of, self.db.batch_get(keys))} if keys else {}
            known = [(read.get(eid), sid) for eid, sid in steps]
            asked = [(x, sid) for x, sid in known if x is not None and sid in x.pos]
            found = iter(self._inputs(asked))
            return [next(found) if x is not None and sid in x.pos else None for x, sid in known]

    def _output(self, item: Item) -> bytes:
        """A step output item's result: inline, or joined from its chunk items."""
        return self.db.joined(item["pk"], f"{item['sk']}#") if item.get("dc") else item["d"]

    def _inputs(self, steps: Sequence[tuple[Exec, str]]) -> list[StepInputs]:
        """The inputs of each known ``(execution, step id)``: one BatchGetItem of their
        dependencies' result items (``O#<index>``)."""
        keys: dict[tuple[str, int], dict[str, Any]] = {}
        for x, sid in steps:
            pos, pk = x.pos, str(x.item["pk"])
            for dep in x.steps[pos[sid]][1]:
                keys[pk, pos[dep]] = {"pk": {"S": pk}, "sk": {"S": f"O#{pos[dep]:06d}"}}
        got = self.db.batch_get(list(keys.values())) if keys else []
        found = {(str(it["pk"]), int(it["sk"][2:])): self._output(it) for it in got}
        out: list[StepInputs] = []
        for x, sid in steps:
            pos, pk = x.pos, str(x.item["pk"])
            results = {dep: found.get((pk, pos[dep])) for dep in x.steps[pos[sid]][1]}
            out.append(StepInputs(input=bytes(x.item.get("in", b"")), results=results))
        return out
