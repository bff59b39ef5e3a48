"""DynamoDB requests of the SQS backend: update expressions, transactions, paged reads.

Knows the table but no job semantics: the operations (``backends.sqs.storage`` and its
mixins) decide what to write, this module says how.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from backends.sqs.blobs import chunk_items, decode_attempts
from backends.sqs.codec import Item, dead_job, decode_item, enc, encode_item, job_record, vals
from backends.sqs.errors import error_code
from queue_core.records.jobs import DeadJob, JobRecord

__all__ = ["TX_MAX", "Table", "TxCancelled"]

TX_MAX = 100  # items per TransactWriteItems


class TxCancelled(Exception):
    """A transaction was cancelled; ``codes`` has one cancellation code per item."""

    def __init__(self, codes: list[str]) -> None:
        super().__init__(codes)
        self.codes = codes


class Table:
    """One DynamoDB table through one client."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name

    # ------------------------------------------------------------------ write builders

    def update(
        self,
        key: dict[str, Any],
        sets: Item,
        removes: Iterable[str] = (),
        cond: str | None = None,
        cond_values: Item | None = None,
        add: Item | None = None,
    ) -> dict[str, Any]:
        """UpdateItem arguments: SET ``sets`` (``None`` values are removed), REMOVE
        ``removes``, ADD ``add``, bump the version ``v``; conditional on ``cond`` whose
        ``:name`` placeholders come from ``cond_values``. A name ``"m.k"`` is entry ``k``
        of map attribute ``m`` (attribute names have no dot; ``k`` may)."""
        names: dict[str, str] = {"#v": "v"}
        values: dict[str, Any] = {":zero": {"N": "0"}, ":one": {"N": "1"}}
        set_exprs: list[str] = []
        removes = list(removes)
        for i, (k, v) in enumerate(sets.items()):
            if v is None:
                removes.append(k)
                continue
            values[f":s{i}"] = enc(v)
            set_exprs.append(f"{_path(names, f's{i}', k)} = :s{i}")
        set_exprs.append("#v = if_not_exists(#v, :zero) + :one")
        parts = ["SET " + ", ".join(set_exprs)]
        rem = [r for r in dict.fromkeys(removes) if r not in sets or sets[r] is None]
        if rem:
            parts.append("REMOVE " + ", ".join(_path(names, f"r{i}", r) for i, r in enumerate(rem)))
        if add:
            names.update({f"#a{i}": k for i, k in enumerate(add)})
            values.update({f":a{i}": enc(v) for i, v in enumerate(add.values())})
            parts.append("ADD " + ", ".join(f"#a{i} :a{i}" for i in range(len(add))))
        op: dict[str, Any] = {
            "TableName": self.name,
            "Key": key,
            "UpdateExpression": " ".join(parts),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if cond:
            op["ConditionExpression"] = cond
            values.update({f":{k}": enc(v) for k, v in (cond_values or {}).items()})
        return op

    def counter(
        self,
        key: dict[str, Any],
        *,
        run: int = 0,
        act: int = 0,
        limit_on: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """An Update adding ``run``/``act`` to a concurrency counter, optionally guarded by
        ``limit_on < limit``."""
        add: Item = {k: n for k, n in (("run", run), ("act", act)) if n}
        names = {f"#{k}": k for k in add}
        values = {f":{k}": enc(v) for k, v in add.items()}
        op: dict[str, Any] = {
            "TableName": self.name,
            "Key": key,
            "UpdateExpression": "ADD " + ", ".join(f"#{k} :{k}" for k in add),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if limit_on is not None and limit is not None:
            names[f"#{limit_on}"] = limit_on
            values[":lim"] = {"N": str(limit)}
            op["ConditionExpression"] = f"attribute_not_exists(#{limit_on}) OR #{limit_on} < :lim"
        return op

    @staticmethod
    def key_of(item: Item) -> dict[str, Any]:
        """The primary key of ``item``."""
        return {"pk": {"S": item["pk"]}, "sk": {"S": item["sk"]}}

    def put(self, item: Item) -> dict[str, Any]:
        """A transaction Put of a new item (refused when the key exists)."""
        return {
            "Put": {
                "TableName": self.name,
                "Item": encode_item(item),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def chunk_puts(self, pk: str, payload: bytes, prefix: str = "P#") -> list[dict[str, Any]]:
        """Put actions for the chunk items of a value too large to sit inline
        (:mod:`backends.sqs.blobs`; a payload's by default)."""
        return self.puts(chunk_items(pk, payload, prefix))

    def puts(self, items: list[Item]) -> list[dict[str, Any]]:
        """Unconditional Put actions of ``items``."""
        return [{"Put": {"TableName": self.name, "Item": encode_item(it)}} for it in items]

    # ------------------------------------------------------------------ requests

    def transact(self, actions: list[dict[str, Any]]) -> None:
        """TransactWriteItems; raises :class:`TxCancelled` with per-item codes."""
        try:
            self.client.transact_write_items(TransactItems=actions)
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = exc.response.get("CancellationReasons") or []
            codes = [str(r.get("Code", "None")) for r in reasons]
            if not codes:
                codes = _codes_from_message(str(exc), len(actions))
            raise TxCancelled(codes) from exc

    def write(self, actions: list[dict[str, Any]]) -> None:
        """Write ``actions`` all or nothing: a lone Update or Put is one conditional
        UpdateItem/PutItem (DynamoDB bills a transactional write twice), more are one
        ``TransactWriteItems``. Raises :class:`TxCancelled` when a condition failed
        (for a lone write: ``["ConditionalCheckFailed"]``, or ``["TransactionConflict"]``
        when it met another transaction on its item, as a transaction would report it)."""
        if len(actions) == 1 and ("Update" in actions[0] or "Put" in actions[0]):
            try:
                ok = (
                    self.update_if(actions[0]["Update"]) is not None
                    if "Update" in actions[0]
                    else self.put_if(actions[0]["Put"])
                )
            except ClientError as exc:
                if error_code(exc) != "TransactionConflictException":
                    raise
                raise TxCancelled(["TransactionConflict"]) from exc
            if not ok:
                raise TxCancelled(["ConditionalCheckFailed"])
            return
        self.transact(actions)

    def update_if(self, op: dict[str, Any]) -> dict[str, Any] | None:
        """UpdateItem; ``None`` when its condition failed."""
        try:
            resp: dict[str, Any] = self.client.update_item(**op)
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return None
        return resp

    def put_if(self, op: dict[str, Any]) -> bool:
        """PutItem; ``False`` when its condition failed."""
        try:
            self.client.put_item(**op)
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def query(self, **kw: Any) -> list[Item]:
        """Every item of a Query (pages followed until ``Limit`` items, if given)."""
        out: list[Item] = []
        limit = kw.get("Limit")
        while True:
            resp = self.client.query(TableName=self.name, **kw)
            out.extend(decode_item(r) for r in resp.get("Items", []))
            lek = resp.get("LastEvaluatedKey")
            if not lek or (limit is not None and len(out) >= limit):
                return out
            kw["ExclusiveStartKey"] = lek

    def find(
        self, cond: str, *, index: str | None = None, limit: int | None = None, **values: Any
    ) -> list[Item]:
        """Up to ``limit`` items whose key matches ``cond`` (a key condition whose ``:name``
        placeholders are ``values``): of ``index``, or of the table (consistent reads)."""
        kw: dict[str, Any] = {
            "KeyConditionExpression": cond,
            "ExpressionAttributeValues": vals(**values),
        }
        kw.update({"ConsistentRead": True} if index is None else {"IndexName": index})
        if limit is not None:
            kw["Limit"] = limit
        return self.query(**kw)[:limit]

    def query_page(self, want: int, **kw: Any) -> list[Item]:
        """Up to ``want`` items of a Query, read in pages of at most 500."""
        got: list[Item] = []
        while len(got) < want:
            kw["Limit"] = min(want - len(got), 500)
            resp = self.client.query(TableName=self.name, **kw)
            got += [decode_item(r) for r in resp.get("Items", [])]
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                break
            kw["ExclusiveStartKey"] = lek
        return got

    def count(self, **kw: Any) -> int:
        n = 0
        while True:
            resp = self.client.query(TableName=self.name, Select="COUNT", **kw)
            n += int(resp.get("Count", 0))
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                return n
            kw["ExclusiveStartKey"] = lek

    def get(self, key: dict[str, Any]) -> Item | None:
        """One consistent GetItem."""
        resp = self.client.get_item(TableName=self.name, Key=key, ConsistentRead=True)
        raw = resp.get("Item")
        return decode_item(raw) if raw else None

    def batch_get(self, keys: Sequence[dict[str, Any]]) -> list[Item]:
        """Consistent BatchGetItem of ``keys`` (100 per request, unprocessed retried)."""
        found: list[Item] = []
        for i in range(0, len(keys), 100):
            todo: list[dict[str, Any]] = list(keys[i : i + 100])
            while todo:
                resp = self.client.batch_get_item(
                    RequestItems={self.name: {"Keys": todo, "ConsistentRead": True}}
                )
                found += [decode_item(r) for r in resp.get("Responses", {}).get(self.name, [])]
                todo = resp.get("UnprocessedKeys", {}).get(self.name, {}).get("Keys", [])
        return found

    def batch_delete(self, keys: list[dict[str, Any]]) -> None:
        """BatchWriteItem deletes, 25 per request, unprocessed retried."""
        for i in range(0, len(keys), 25):
            reqs = [{"DeleteRequest": {"Key": k}} for k in keys[i : i + 25]]
            while reqs:
                resp = self.client.batch_write_item(RequestItems={self.name: reqs})
                reqs = resp.get("UnprocessedItems", {}).get(self.name, [])

    def payload(self, item: Item) -> bytes:
        """An item's payload: inline, or joined from its chunk items (one Query)."""
        if not item.get("plc"):
            return bytes(item.get("pl", b""))
        return self.joined(item["pk"], "P#")

    def joined(self, pk: str, prefix: str) -> bytes:
        """The bytes of the chunk items ``<prefix>…`` under ``pk``, joined (one Query)."""
        parts = self.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :c)",
            ExpressionAttributeValues=vals(pk=pk, c=prefix),
            ConsistentRead=True,
        )
        return b"".join(c["d"] for c in sorted(parts, key=lambda c: c["sk"]))

    def record(self, item: Item) -> JobRecord:
        """The record of job item ``item``, its payload and result joined from their
        chunk items when they are too large to sit inline."""
        if item.get("rsc"):
            item = {**item, "res": self.joined(item["pk"], "R#")}
        return job_record(item, self.payload(item))

    def dead(self, entry: Item) -> DeadJob:
        """The dead-letter record of ``entry``, its payload and attempt records joined
        from their chunk items when they are too large to sit inline."""
        if entry.get("atc"):
            entry = {**entry, "atts": decode_attempts(self.joined(entry["pk"], "T#"))}
        return dead_job(entry, self.payload(entry))

    def attempts(self, pk: str) -> list[Item]:
        """The attempt items of the job whose key is ``pk`` (one consistent Query)."""
        return self.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :a)",
            ExpressionAttributeValues=vals(pk=pk, a="A#"),
            ConsistentRead=True,
        )


def _path(names: dict[str, str], tag: str, name: str) -> str:
    """The expression path of attribute ``name`` (``"m.k"``: entry ``k`` of map ``m``),
    its names added to ``names`` under ``#<tag>``."""
    top, dot, entry = name.partition(".")
    names[f"#{tag}"] = top
    if not dot:
        return f"#{tag}"
    names[f"#{tag}e"] = entry
    return f"#{tag}.#{tag}e"


def _codes_from_message(message: str, n: int) -> list[str]:
    """Parse ``[Code1, None, …]`` out of a TransactionCanceled message (moto fallback)."""
    m = re.search(r"\[([^\]]*)\]", message)
    if not m:
        return ["None"] * n
    codes = [c.strip() for c in m.group(1).split(",")]
    return codes + ["None"] * (n - len(codes))
