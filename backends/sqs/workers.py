"""The worker registry and the cancel poll of the SQS backend (see
:mod:`queue_core.records.workers`).

A worker record is one DynamoDB item, ``pk = P W``, ``sk = W#<worker id>``, holding the
record's JSON (``w``) and a ``ttl`` attribute (epoch seconds, an hour past the record's
expiry) so that DynamoDB's TTL removes records of dead workers eventually. Whether a
record is live is decided on read (:func:`queue_core.rules.workers.is_live`), never by the
TTL (which may lag by days); :meth:`Workers.list_workers` deletes the records it
judged dead, each only if unchanged (a conditional delete).

The cancel poll is one consistent ``BatchGetItem`` of the job items' fencing fields
and cancel flag (100 jobs per request).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from backends.sqs.codec import decode_item
from backends.sqs.errors import error_code, translate
from backends.sqs.store import Store
from queue_core.records.jobs import LeaseRef
from queue_core.records.workers import WorkerInfo
from queue_core.rules.workers import live_workers

__all__ = ["Workers"]

_TTL_MARGIN_S = 3600


class Workers:
    """:class:`~queue_core.storage.abilities.SupportsWorkerRegistry` and
    :class:`~queue_core.storage.abilities.SupportsCancelPoll` on the DynamoDB table."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys

    def _workers_pk(self) -> str:
        return f"{self.keys.p}W"

    def _worker_key(self, worker_id: str) -> dict[str, Any]:
        return {"pk": {"S": self._workers_pk()}, "sk": {"S": f"W#{worker_id}"}}

    def register_worker(self, info: WorkerInfo) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.register_worker`."""
        item = {
            **self._worker_key(info.id),
            "w": {"S": info.to_json()},
            "ttl": {"N": str(info.expires_at // 1000 + _TTL_MARGIN_S)},
        }
        with translate("register_worker"):
            self.db.client.put_item(TableName=self.db.name, Item=item)

    def deregister_worker(self, worker_id: str) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.deregister_worker`."""
        with translate("deregister_worker"):
            self.db.client.delete_item(TableName=self.db.name, Key=self._worker_key(worker_id))

    def list_workers(self, *, now: int | None = None) -> list[WorkerInfo]:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.list_workers`."""
        t = self.store.now(now)
        with translate("list_workers"):
            items = self.db.query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": self._workers_pk()}},
                ConsistentRead=True,
            )
        texts = {}
        for it in items:
            info = WorkerInfo.from_json(it["w"])
            texts[info.id] = (info, it["w"])
        live, dead = live_workers([i for i, _ in texts.values()], t)
        for worker_id in dead:
            self._drop_if_same(worker_id, texts[worker_id][1])
        return live

    def _drop_if_same(self, worker_id: str, text: str) -> None:
        with translate("list_workers"):
            try:
                self.db.client.delete_item(
                    TableName=self.db.name,
                    Key=self._worker_key(worker_id),
                    ConditionExpression="w = :w",
                    ExpressionAttributeValues={":w": {"S": text}},
                )
            except ClientError as exc:  # refreshed meanwhile: kept
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        """See :meth:`queue_core.storage.abilities.SupportsCancelPoll.cancel_requested`."""
        if not refs:
            return []
        keys = [self.keys.job(j) for j in dict.fromkeys(r.job_id for r in refs)]
        found: dict[str, dict[str, Any]] = {}
        with translate("cancel_requested"):
            for i in range(0, len(keys), 100):
                todo: list[dict[str, Any]] = keys[i : i + 100]
                while todo:
                    resp = self.db.client.batch_get_item(
                        RequestItems={
                            self.db.name: {
                                "Keys": todo,
                                "ConsistentRead": True,
                                "ProjectionExpression": "#id, #st, #att, #tok, #cxl",
                                "ExpressionAttributeNames": {
                                    "#id": "id",
                                    "#st": "st",
                                    "#att": "att",
                                    "#tok": "tok",
                                    "#cxl": "cxl",
                                },
                            }
                        }
                    )
                    for raw in resp.get("Responses", {}).get(self.db.name, []):
                        it = decode_item(raw)
                        found[it["id"]] = it
                    todo = resp.get("UnprocessedKeys", {}).get(self.db.name, {}).get("Keys", [])
        out = []
        for ref in refs:
            job = found.get(ref.job_id)
            if job is None or job.get("st") != "running" or not job.get("cxl"):
                continue
            if job.get("att") == ref.attempt and job.get("tok") == ref.lease_token:
                out.append(ref)
        return out
