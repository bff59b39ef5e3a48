"""The worker registry and the cancel poll of the SQL backend (table ``qc_workers``,
schema version 6; see :mod:`queue_core.workers`). Mixed into
:class:`~backends.sql.SQLStorage`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from backends.sql.base import SQLBase
from queue_core.model import LeaseRef
from queue_core.workers import WorkerInfo, live_workers

__all__ = ["SQLWorkers"]


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


class SQLWorkers(SQLBase):
    """:class:`~queue_core.workers.SupportsWorkerRegistry` and
    :class:`~queue_core.workers.SupportsCancelPoll` on ``qc_workers`` / ``qc_jobs``."""

    def register_worker(self, info: WorkerInfo) -> None:
        """See :meth:`queue_core.workers.SupportsWorkerRegistry.register_worker`."""
        params = info.to_dict()
        params["queues"] = json.dumps(params["queues"])
        with self._stmt() as cur:
            cur.execute(self._q["upsert_worker"], params)

    def deregister_worker(self, worker_id: str) -> None:
        """See :meth:`queue_core.workers.SupportsWorkerRegistry.deregister_worker`."""
        with self._stmt() as cur:
            cur.execute(self._q["delete_worker"], {"id": worker_id})

    def list_workers(self, *, now: int | None = None) -> list[WorkerInfo]:
        """See :meth:`queue_core.workers.SupportsWorkerRegistry.list_workers`: dead
        records met are deleted (each only if not refreshed meanwhile)."""
        with self._stmt() as cur:
            t = self._resolve_now(cur, now)
            infos = [_info(r) for r in cur.execute(self._q["select_workers"], {}).fetchall()]
        live, dead = live_workers(infos, t)
        if dead:
            seen = {i.id: i.last_seen for i in infos}
            with self._tx() as cur:
                for worker_id in dead:
                    params = {"id": worker_id, "last_seen": seen[worker_id]}
                    cur.execute(self._q["delete_dead_worker"], params)
        return live

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        """See :meth:`queue_core.workers.SupportsCancelPoll.cancel_requested`: one
        indexed read for the batch."""
        if not refs:
            return []
        params = {"ids": self._list(sorted({r.job_id for r in refs}))}
        with self._stmt() as cur:
            rows = cur.execute(self._q["select_cancel_requested"], params).fetchall()
        asked = {(r["id"], int(r["attempt"]), r["lease_token"]) for r in rows}
        return [r for r in refs if (r.job_id, r.attempt, r.lease_token) in asked]
