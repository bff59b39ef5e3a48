"""Flow specs on SQS + DynamoDB: the ``FS#`` item of each spec hash and what is read from it.

A spec item (``P FS#<hash>``/``FS``) holds the spec (``body``, zlib JSON). A declared
flow's steps and dependencies are read from it, not from each execution item: DynamoDB
bills every write of an item by its whole size, and an execution item is written again
by each batch of step ends. A spec never changes under its hash, so a process reads a
spec's steps once.
"""

from __future__ import annotations

import zlib
from typing import Any

from backends.sqs.codec import encode_item
from backends.sqs.dynamo import Table
from backends.sqs.flow_items import Steps
from queue_core.records.errors import StorageError
from queue_core.rules.flows.spec import FlowSpec
from queue_core.storage.flows import NewExecution

__all__ = ["SPEC_MAX", "FlowSpecs", "small"]

SPEC_MAX = 350 * 1024
"""Bytes (compressed) this backend stores in one item of a flow's."""
_KEPT = 256
"""Specs' steps kept in memory by one process's flows part."""


def _steps_of(spec_json: str) -> Steps:
    """A spec's steps as an execution holds them (``NewExecution.build``'s order)."""
    return [(s.id, tuple(s.depends_on)) for s in FlowSpec.from_json(spec_json).steps]


def small(flow: str, what: str, blob: bytes) -> bytes:
    """``blob`` when it fits in one item; else the ``StorageError`` naming ``what``."""
    if len(blob) > SPEC_MAX:
        raise StorageError(
            f"sqs backend: flow {flow!r}: {what}: {len(blob)} bytes compressed, more than "
            f"the {SPEC_MAX} this backend stores in one item"
        )
    return blob


class FlowSpecs:
    """The spec items of one storage.

    Args:
        db: the table.
        p: the key prefix (``"<prefix>#"``).
    """

    def __init__(self, db: Table, p: str) -> None:
        self.db, self.p = db, p
        self._steps: dict[str, Steps] = {}

    def _key(self, spec_hash: str) -> dict[str, Any]:
        return {"pk": {"S": f"{self.p}FS#{spec_hash}"}, "sk": {"S": "FS"}}

    def put(self, new: NewExecution) -> Steps | None:
        """Store ``new``'s spec (again: the same content under the same hash); return its
        steps when they are its spec's (a declared flow), else ``None`` (a workflow, whose
        steps grow in its execution item, which then keeps them)."""
        body = small(new.flow, "the spec", zlib.compress(new.spec_json.encode("utf-8")))
        spec = {"pk": f"{self.p}FS#{new.spec_hash}", "sk": "FS", "body": body}
        self.db.client.put_item(TableName=self.db.name, Item=encode_item(spec))
        if new.kind != "flow":
            return None
        spec_steps = self._steps.get(new.spec_hash)
        if spec_steps is None:  # parsed once per spec and process, as steps() does
            spec_steps = self._keep(new.spec_hash, _steps_of(new.spec_json))
        steps = [(s.id, tuple(s.depends_on)) for s in new.steps]
        return spec_steps if steps == spec_steps else None

    def steps(self, spec_hash: str) -> Steps:
        """The steps of a declared flow's spec (read once per process)."""
        steps = self._steps.get(spec_hash)
        if steps is None:
            text = self.spec_json(spec_hash)
            if not text:
                raise StorageError(f"sqs backend: flow spec {spec_hash!r} is not stored")
            steps = self._keep(spec_hash, _steps_of(text))
        return steps

    def _keep(self, spec_hash: str, steps: Steps) -> Steps:
        if len(self._steps) >= _KEPT:
            self._steps.clear()
        self._steps[spec_hash] = steps
        return steps

    def spec_json(self, spec_hash: str) -> str:
        """The spec's JSON (``""`` when its item is gone)."""
        item = self.db.get(self._key(spec_hash))
        return "" if item is None else zlib.decompress(item["body"]).decode("utf-8")
