"""The writes of a workflow plan's own items (:class:`~backends.sqs.wf_items.WfPlan`) for
the flows interpreter's transaction (:meth:`backends.sqs.flows.SQSFlows._commit`)."""

from __future__ import annotations

from typing import Any

from backends.sqs.codec import Item, Keys, encode_item, new_item
from backends.sqs.dynamo import TX_MAX, Table
from backends.sqs.flow_items import zjson
from backends.sqs.store import SEQ
from backends.sqs.wf_items import WfPlan

__all__ = ["wf_writes"]


def _put(db: Table, item: Item) -> dict[str, Any]:
    return {"Put": {"TableName": db.name, "Item": encode_item(item)}}


def wf_writes(
    db: Table, keys: Keys, wf: WfPlan, parts: dict[int, list[Item]], beside: int
) -> list[dict[str, Any]]:
    """The workflow operations' writes in the execution's transaction (beside ``beside``
    others). Memo values and children's stored jobs (``JC#``, also cached in ``parts``
    for their release) that would crowd it are written first -- inert until the
    execution item names them --, and deletes of memo values then follow the
    transaction (``wf.late``)."""
    seqs = SEQ.take(len(wf.kids))
    kids = [
        (i, {**new_item(keys, job, wf.now, seq), "pl": job.payload, "wf": 1})
        for (i, job), seq in zip(wf.kids.items(), seqs, strict=True)
    ]
    parts.update({-1 - i: [item] for i, item in kids})
    early = [*wf.inert, *({"pk": wf.pk, "sk": f"JC#{i:06d}", "d": zjson([it])} for i, it in kids)]
    puts = [_put(db, it) for it in early]
    dels = [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in wf.deletes]
    if len(puts) + len(wf.puts) + len(dels) + beside > TX_MAX // 2:
        for i in range(0, len(puts), TX_MAX):
            db.transact(puts[i : i + TX_MAX])
        puts, wf.late = [], [k for k in dels if k["sk"]["S"].startswith("M#")]
        dels = [k for k in dels if not k["sk"]["S"].startswith("M#")]
    deletes = [{"Delete": {"TableName": db.name, "Key": k}} for k in dels]
    return [*puts, *(_put(db, it) for it in wf.puts), *deletes]
