"""Large values of the SQS backend kept beside their item, in chunk items. Pure.

A DynamoDB item holds at most 400 KB, and one ``TransactWriteItems`` request at most
4 MB. A job's payload (``plc``), its result (``rsc``), a dead-letter entry's attempt
records (``atc``), a flow step's output and a workflow's memo (``dc``) that would not
fit inline are stored in chunk items of the same partition key, written in the
transaction that stores the value; the count attribute says how many. :func:`side_keys`
lists every chunk item of an item, for the writes that delete it.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

__all__ = [
    "ATTEMPTS_INLINE",
    "MAX_RESULT_BYTES",
    "RESULT_INLINE",
    "TX_BYTES",
    "PAYLOAD_INLINE",
    "attempts_fields",
    "chunk_count",
    "chunk_items",
    "decode_attempts",
    "output_fields",
    "result_fields",
    "side_keys",
    "written_bytes",
]

Item = dict[str, Any]

CHUNK = 300 * 1024
PAYLOAD_INLINE = 256 * 1024
"""A payload up to this size stays on its item (job or dead-letter entry)."""
RESULT_INLINE = 64 * 1024
"""A result up to this size stays on the job item (which may hold a 256 KB payload)."""
ATTEMPTS_INLINE = 64 * 1024
"""A dead-letter entry's attempt records up to this size (as JSON) stay on its item."""
MAX_RESULT_BYTES = 1536 * 1024
"""The largest result this backend stores: a flow step's end writes it twice (the job's
result and the step's output) in one transaction of at most 4 MB, beside the job item."""
TX_BYTES = 3 * 1024 * 1024
"""Bytes the writes of several ends may carry in one transaction (:func:`written_bytes`)."""

COUNTS = {"plc": "P#", "rsc": "R#", "atc": "T#"}
"""Count attribute -> sort-key prefix of its chunk items (``<prefix>0000`` …)."""


def chunk_items(pk: str, data: bytes, prefix: str) -> list[Item]:
    """The chunk items of ``data`` under ``pk``: ``sk = <prefix>0000`` …, ``d`` the bytes."""
    return [
        {"pk": pk, "sk": f"{prefix}{i:04d}", "d": data[off : off + CHUNK]}
        for i, off in enumerate(range(0, len(data), CHUNK))
    ]


def chunk_count(payload: bytes) -> int | None:
    """How many chunk items a payload needs (``plc``), or ``None`` when it sits inline."""
    return len(range(0, len(payload), CHUNK)) if len(payload) > PAYLOAD_INLINE else None


def side_keys(item: Item, attrs: tuple[str, ...] = tuple(COUNTS)) -> list[dict[str, Any]]:
    """The keys of every chunk item of ``item`` (payload, result, attempt records), or
    of those counted by ``attrs``."""
    pk = {"S": str(item["pk"])}
    return [
        {"pk": pk, "sk": {"S": f"{COUNTS[attr]}{i:04d}"}}
        for attr in attrs
        for i in range(int(item.get(attr) or 0))
    ]


def result_fields(pk: str, result: bytes | None) -> tuple[Item, list[Item]]:
    """The job item's SET values for ``result`` (``res`` inline, or ``rsc`` chunks) and
    the chunk items to put."""
    if result is None or len(result) <= RESULT_INLINE:
        return {"res": result, "rsc": None}, []
    chunks = chunk_items(pk, result, COUNTS["rsc"])
    return {"res": None, "rsc": len(chunks)}, chunks


def output_fields(pk: str, sk: str, result: bytes | None) -> list[Item]:
    """The items of a flow step's output ``result`` kept at ``(pk, sk)``: ``d`` inline,
    or ``dc`` chunk items ``<sk>#0000`` … beside it."""
    data = result or b""
    if len(data) <= RESULT_INLINE:
        return [{"pk": pk, "sk": sk, "d": data}]
    chunks = chunk_items(pk, data, f"{sk}#")
    return [{"pk": pk, "sk": sk, "d": None, "dc": len(chunks)}, *chunks]


def attempts_fields(pk: str, attempts: list[Item]) -> tuple[Item, list[Item]]:
    """A dead-letter entry's fields for its ``attempts`` (``atts`` inline, or ``atc``
    chunk items of their compressed JSON) and the chunk items to put."""
    text = json.dumps(attempts, separators=(",", ":")).encode()
    if len(text) <= ATTEMPTS_INLINE:
        return {"atts": attempts}, []
    chunks = chunk_items(pk, zlib.compress(text), COUNTS["atc"])
    return {"atts": None, "atc": len(chunks)}, chunks


def decode_attempts(blob: bytes) -> list[Item]:
    """The attempt records of an entry's joined ``atc`` chunks."""
    attempts: list[Item] = json.loads(zlib.decompress(blob))
    return attempts


def written_bytes(actions: list[dict[str, Any]]) -> int:
    """About how many bytes a list of transaction actions writes: the binary and text
    values of its Puts' items and its Updates' values (lists and maps by their repr, an
    overestimate), for packing ends into transactions of at most 4 MB."""
    total = 0
    for action in actions:
        op = action.get("Put") or action.get("Update") or {}
        values = op.get("Item") or op.get("ExpressionAttributeValues") or {}
        for v in values.values():
            if "B" in v or "S" in v:
                total += len(v.get("B") or v.get("S") or "")
            elif "L" in v or "M" in v:
                total += len(repr(v))
    return total
