"""The worker registry and the cancel poll of the SQL backend (table ``qc_workers``,
schema version 6; see :mod:`queue_core.records.workers`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from backends.sql.store import Store
from queue_core.records.jobs import LeaseRef
from queue_core.records.workers import WorkerInfo
from queue_core.rules.workers import live_workers

__all__ = ["Workers"]


def _info(row: Any) -> WorkerInfo:
    return WorkerInfo(
        id=row["id"],
        host=row["host"],
        pid=int(row["pid"]),
        queues=tuple(json.loads(row["queues"])),
        slots=int(row["slots"]),
        busy=int(row["busy"]),
        stuck=int(row["stuck"]),
        started_at=int(row["started_at"]),
        last_seen=int(row["last_seen"]),
        ttl_ms=int(row["ttl_ms"]),
    )


class Workers:
    """:class:`~queue_core.storage.abilities.SupportsWorkerRegistry` and
    :class:`~queue_core.storage.abilities.SupportsCancelPoll` on ``qc_workers`` / ``qc_jobs``."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def register_worker(self, info: WorkerInfo) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.register_worker`."""
        params = info.to_dict()
        params["queues"] = json.dumps(params["queues"])
        with self.store.stmt() as cur:
            cur.execute(self.store.q["upsert_worker"], params)

    def deregister_worker(self, worker_id: str) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.deregister_worker`."""
        with self.store.stmt() as cur:
            cur.execute(self.store.q["delete_worker"], {"id": worker_id})

    def list_workers(self, *, now: int | None = None) -> list[WorkerInfo]:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.list_workers`: dead
        records met are deleted (each only if not refreshed meanwhile)."""
        with self.store.stmt() as cur:
            t = self.store.resolve_now(cur, now)
            infos = [_info(r) for r in cur.execute(self.store.q["select_workers"], {}).fetchall()]
        live, dead = live_workers(infos, t)
        if dead:
            seen = {i.id: i.last_seen for i in infos}
            with self.store.tx() as cur:
                for worker_id in dead:
                    params = {"id": worker_id, "last_seen": seen[worker_id]}
                    cur.execute(self.store.q["delete_dead_worker"], params)
        return live

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        """See :meth:`queue_core.storage.abilities.SupportsCancelPoll.cancel_requested`: one
        indexed read for the batch."""
        if not refs:
            return []
        params = {"ids": self.store.array(sorted({r.job_id for r in refs}))}
        with self.store.stmt() as cur:
            rows = cur.execute(self.store.q["select_cancel_requested"], params).fetchall()
        asked = {(r["id"], int(r["attempt"]), r["lease_token"]) for r in rows}
        return [r for r in refs if (r.job_id, r.attempt, r.lease_token) in asked]
