"""Jobs of the SQL backend: enqueue, leases (renew, heartbeat), cancel and the reads.

Each operation is one transaction, or one statement (atomic on its own). Claiming,
finishing and reaping are parts of their own (:mod:`.claiming`, :mod:`.finishing`,
:mod:`.reaping`). A step job's cancel (a job with a stored execution) is a flow event:
it is applied with its execution's decision by the flows part, in the same transaction
(:meth:`Jobs.cancel`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from backends.sql.limits import Limits, limited
from backends.sql.pauses import Pauses
from backends.sql.records import attempt_from_row, job_from_row
from backends.sql.store import Store
from queue_core.records.errors import LeaseLost, NotFound
from queue_core.records.jobs import (
    AttemptRecord,
    JobRecord,
    JobState,
    LeaseRef,
    NewJob,
    Reason,
    RenewResult,
)
from queue_core.rules.paging import check_page

if TYPE_CHECKING:
    from backends.sql.flows import Flows

__all__ = ["Jobs"]


class Jobs:
    """Enqueue, renew, heartbeat, cancel and job reads on ``store``; unique and
    concurrency-``skip`` batches through ``limits``; step jobs' cancels through
    ``flows()`` (built on first use); ``count_pending`` leaves out what ``pauses`` holds."""

    def __init__(
        self, store: Store, limits: Limits, flows: Callable[[], Flows], pauses: Pauses
    ) -> None:
        self.store = store
        self.limits = limits
        self.flows = flows
        self.pauses = pauses

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.protocol.Storage.enqueue`. A batch is all-or-nothing."""
        if not jobs:
            return []
        if limited(jobs):
            return [e.state for e in self.limits.enqueue_unique(jobs, now=now)]
        store, d = self.store, self.store.dialect
        if any(j.concurrency_skip and j.concurrency_key is not None for j in jobs):
            with store.tx() as cur:
                t = store.resolve_now(cur, now)
                states, reasons = self.limits.skip_states(cur, jobs)
                d.insert(cur, jobs, states, reasons, t)
            return states
        one = len(jobs) == 1 or d.single_statement_batches
        with store.stmt() if one else store.tx() as cur:
            d.insert(cur, jobs, None, None, d.clock(now))
        return [JobState.QUEUED] * len(jobs)

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.protocol.Storage.renew`: fenced, rows taken in job
        id order."""
        if not refs:
            return RenewResult()
        store, d = self.store, self.store.dialect
        with store.stmt() if d.single_statement_batches else store.tx() as cur:
            return d.renew(cur, refs, lease_ms, d.clock(now))

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.protocol.Storage.heartbeat`."""
        params = {"id": ref.job_id, "attempt": ref.attempt, "token": ref.lease_token,
                  "now": self.store.now(now)}  # fmt: skip
        with self.store.stmt() as cur:
            row = cur.execute(self.store.q["heartbeat"], params).fetchone()
        if row is None:
            raise LeaseLost(f"attempt {ref.attempt} of job {ref.job_id} is not current")
        return bool(row["cancel_requested"])

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """See :meth:`queue_core.storage.protocol.Storage.cancel`. A step's job is cancelled
        under its execution's locks, with the execution's decision."""
        store, q = self.store, self.store.q
        step = self._step_of(job_id)
        with store.tx() as cur:
            x, t = None, now
            if step is not None:  # the execution first: the flows' lock order
                t = store.resolve_now(cur, now)
                x = self.flows().open(cur, step[0], t, jobs=True)
            row = cur.execute(q["select_for_cancel"], {"id": job_id}).fetchone()
            if row is None:
                raise NotFound(f"no job with id {job_id!r}")
            state = JobState(row["state"])
            if state is JobState.QUEUED:
                t = store.resolve_now(cur, t)
                cur.execute(q["cancel_queued"], {"seq": row["seq"], "now": t})
                if x is not None and step is not None:
                    ended = (step[1], JobState.CANCELLED.value, Reason.CANCELLED.value)
                    self.flows().ended(x, [ended])
                store.notify(cur)  # may free a skip-concurrency slot
                return JobState.CANCELLED
            if state is JobState.RUNNING:
                cur.execute(q["request_cancel"], {"seq": row["seq"]})
            return state

    def _step_of(self, job_id: str) -> tuple[str, str] | None:
        """(execution id, step id) of a step's job; ``None`` for any other job."""
        rows = self.store.fetch("flow_jobs_of", {"ids": self.store.array([job_id])})
        if not rows or rows[0]["execution_id"] is None:
            return None
        return rows[0]["execution_id"], rows[0]["step_id"]

    def get_job(self, job_id: str) -> JobRecord | None:
        """See :meth:`queue_core.storage.protocol.Storage.get_job`."""
        rows = self.store.fetch("get_job", {"id": job_id})
        return job_from_row(rows[0]) if rows else None

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """See :meth:`queue_core.storage.protocol.Storage.list_attempts`."""
        return [attempt_from_row(r) for r in self.store.fetch("list_attempts", {"id": job_id})]

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.count_pending`."""
        if not queues:
            return 0
        store = self.store
        params = {"queues": store.array(list(queues)), "now": store.now(now),
                  "horizon_ms": horizon_ms}  # fmt: skip
        paused = self.pauses.current()
        if paused is None:
            return int(store.fetch("count_pending", params)[0]["n"])
        params["all_queues"] = params["queues"]
        params["queues"] = store.array([q for q in queues if q not in paused.queues])
        params.update(paused.params(store))
        with store.stmt() as cur:
            sql = self.store.q["count_pending_unpaused"]
            return int(cur.execute(sql, params).fetchone()["n"])

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """A page of jobs, newest (latest enqueued) first, optionally filtered."""
        limit, offset = check_page(limit, offset)
        params = {"state": JobState(state).value if state is not None else None,
                  "queue": queue, "limit": limit, "offset": offset}  # fmt: skip
        return [job_from_row(r) for r in self.store.fetch("list_jobs", params)]
