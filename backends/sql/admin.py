"""Dead letters, stats and the retention prune of the SQL backend.

A dead-letter entry (``qc_dead``) carries the job as it was enqueued: :meth:`Admin.bury`
writes it in the transaction that ends the job ``dead`` (finish, reap), and
:meth:`Admin.retry_dead` replays it with :func:`~queue_core.rules.outcomes.replay_job`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from backends.sql.limits import mark
from backends.sql.records import (
    Grave,
    attempt_json,
    dead_entry,
    dead_from_row,
    spec_of_dead,
)
from backends.sql.store import Store
from queue_core.records.errors import ConfigError, NotFound
from queue_core.records.jobs import DeadJob, QueueStats
from queue_core.rules.outcomes import replay_job
from queue_core.rules.paging import check_page
from queue_core.storage.job_ids import new_job_id

if TYPE_CHECKING:
    from backends.sql.workflows import Workflows

__all__ = ["Admin"]


class Admin:
    """Dead letters (write, list, get, retry, purge), stats and prune, on ``store``;
    ``retry_dead`` of a flow step's entry resumes its execution through ``workflows()``
    (built on first use)."""

    def __init__(self, store: Store, retention_ms: int, workflows: Callable[[], Workflows]) -> None:
        self.store = store
        self.retention_ms = retention_ms
        self.workflows = workflows

    def bury(self, cur: Any, graves: list[Grave]) -> None:
        """Write the dead-letter entries of jobs already ended ``dead`` (their attempt
        records final): each carries the job's spec as enqueued."""
        if not graves:
            return
        q = self.store.q
        ids = self.store.array([g[0] for g in graves])
        rows = {r["id"]: r for r in cur.execute(q["select_for_dead"], {"ids": ids})}
        attempts: dict[str, list[dict[str, Any]]] = {}
        for a in cur.execute(q["select_attempts_of"], {"ids": ids}).fetchall():
            attempts.setdefault(a["job_id"], []).append(attempt_json(a))
        entries = [
            dead_entry(rows[job_id], dead_id=dead_id, reason=reason, error=error,
                       attempts=attempts.get(job_id, []))
            for job_id, dead_id, reason, error in graves
        ]  # fmt: skip
        cur.executemany(q["insert_dead"], entries)

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """See :meth:`queue_core.storage.protocol.Storage.list_dead`."""
        limit, offset = check_page(limit, offset)
        params = {"limit": limit, "offset": offset, "task": task_name}
        name = "list_dead" if task_name is None else "list_dead_of_task"
        return [dead_from_row(r) for r in self.store.fetch(name, params)]

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """See :meth:`queue_core.storage.protocol.Storage.get_dead`."""
        rows = self.store.fetch("get_dead", {"id": dead_id})
        return dead_from_row(rows[0]) if rows else None

    def retry_dead(self, dead_id: str, queue: str | None = None, *, now: int | None = None) -> str:
        """See :meth:`queue_core.storage.protocol.Storage.retry_dead`: the entry's spec as
        enqueued, replayed by :func:`~queue_core.rules.outcomes.replay_job`."""
        store, q = self.store, self.store.q
        with store.tx() as cur:
            row = cur.execute(q["take_dead"], {"id": dead_id}).fetchone()
            if row is None:
                raise NotFound(f"no dead-letter entry with id {dead_id!r}")
            t = store.resolve_now(cur, now)
            spec = spec_of_dead(row)
            if spec.execution_id is not None:
                return self._resume_step(cur, dead_id, spec.id, spec.execution_id, t)
            cur.execute(q["delete_dead"], {"seq": row["seq"]})
            job = replay_job(spec, dead_id=dead_id, new_id=new_job_id(), queue=queue, now=t)
            store.dialect.insert(cur, [job], None, None, t)
            mark(cur, store, job)  # its rate stays in qc_rates
            return job.id

    def _resume_step(self, cur: Any, dead_id: str, job_id: str, eid: str, t: int) -> str:
        """A step job's entry: its execution resumes (its re-released job's entry goes
        with the ``Release``); refused, entry kept, when it cannot."""
        try:
            self.workflows().resume(cur, eid, None, t)
        except NotFound:
            raise ConfigError(
                f"dead letter {dead_id} is a step of execution {eid}, which is gone "
                "(pruned): it cannot be resumed",
                code="invalid_option",
                field="dead_id",
                value=dead_id,
            ) from None
        cur.execute(self.store.q["delete_dead_id"], {"id": dead_id})
        self.store.notify(cur)
        return job_id

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.purge_dead`."""
        with self.store.stmt() as cur:
            cur.execute(self.store.q["purge_dead"], {"task": task_name, "before": before})
            return int(cur.rowcount)

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """See :meth:`queue_core.storage.protocol.Storage.stats`."""
        counts: dict[str, dict[str, int]] = {}
        kinds = {f.name for f in dataclasses.fields(QueueStats)} - {"queue"}
        for r in self.store.fetch("stats", {"now": self.store.now(now)}):
            if r["kind"] in kinds:  # a row whose state is no state (corrupt) is not counted
                counts.setdefault(r["queue"], {})[r["kind"]] = int(r["n"])
        return [QueueStats(queue=q, **counts[q]) for q in sorted(counts)]

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.prune`: jobs finished at or before
        ``now - retention_ms`` (retention 0: every finished job), their attempt records
        and the unique keys naming them; finished flow executions with the same cutoff
        (their steps, and specs no execution uses any more)."""
        if limit <= 0:
            return 0
        store, q = self.store, self.store.q
        with store.tx() as cur:
            cutoff = store.resolve_now(cur, now) - self.retention_ms
            held = self._prune_executions(cur, cutoff, limit)
            rows = cur.execute(q["select_prunable"], {"cutoff": cutoff, "limit": limit})
            rows = rows.fetchall()
            if not rows:
                return held
            ids = {"ids": store.array([r["id"] for r in rows])}
            cur.execute(q["delete_attempts_of"], ids)
            cur.execute(q["unique_forget"], ids)
            cur.execute(q["debounce_forget"], ids)
            cur.execute(q["delete_jobs"], {"seqs": store.array([r["seq"] for r in rows])})
            return held + len(rows)

    def _prune_executions(self, cur: Any, cutoff: int, limit: int) -> int:
        """Finished executions (a flow's step jobs, finished no later, go with the jobs; a
        workflow's jobs, memos and waits with it: ``select_prunable`` leaves its jobs),
        and the stored events sent at or before ``cutoff``; the jobs deleted."""
        q, array = self.store.q, self.store.array
        rows = cur.execute(q["flow_prunable"], {"cutoff": cutoff, "limit": limit}).fetchall()
        cur.execute(q["wf_prune_events"], {"cutoff": cutoff})
        if not rows:
            return 0
        ids = {"ids": array([r["id"] for r in rows])}
        cur.execute(q["flow_delete_steps"], ids)
        cur.execute(q["flow_delete_executions"], ids)
        hashes = array(sorted({r["spec_hash"] for r in rows}))
        cur.execute(q["flow_delete_specs"], {"hashes": hashes})
        wf = {"ids": array([r["id"] for r in rows if r["kind"] == "workflow"])}
        if not wf["ids"]:
            return 0
        cur.execute(q["wf_prune_memos"], wf)
        cur.execute(q["wf_prune_waits"], wf)
        jobs = cur.execute(q["wf_prune_jobs"], wf).fetchall()
        if jobs:
            cur.execute(q["delete_attempts_of"], {"ids": array([r["id"] for r in jobs])})
            cur.execute(q["unique_forget"], {"ids": array([r["id"] for r in jobs])})
            cur.execute(q["delete_jobs"], {"seqs": array([r["seq"] for r in jobs])})
        return len(jobs)
