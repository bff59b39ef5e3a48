"""The rows of durable workflows on SQLite and PostgreSQL: memos, event waits, stored
events, steps added at run time, ready times, re-runs of finished step jobs.

:class:`WorkflowRows` runs the statements of the plan operations that workflows and
resumes add (:mod:`queue_core.rules.flows.plan`); :class:`~backends.sql.flows.Flows`
calls it from its one interpreter, inside the flow transaction that holds the
execution's lock, and keeps its own view of the execution in step. Nothing is decided
here: each method writes what one operation says.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from backends.sql.limits import Limits
from backends.sql.records import job_row
from backends.sql.store import Store
from queue_core.records.jobs import JobState, NewJob
from queue_core.records.workflows import EventWait, MemoRecord, StoredEvent
from queue_core.rules.flows import plan
from queue_core.rules.leases import queued_expiry

__all__ = ["WorkflowRows", "job_json"]

_JOB_FIELDS = tuple(f.name for f in fields(NewJob) if f.name != "payload")


def job_json(j: NewJob) -> str:
    """A step job as stored with its step (``qc_flow_steps.job``: all but the payload)."""
    return json.dumps({name: getattr(j, name) for name in _JOB_FIELDS})


class WorkflowRows:
    """The workflow statements, on ``store`` (each call inside the caller's transaction);
    a child's ``skip`` concurrency limit counted by ``limits``."""

    def __init__(self, store: Store, limits: Limits) -> None:
        self.store = store
        self.q = store.q
        self.limits = limits

    def put_memo(self, cur: Any, eid: str, op: plan.PutMemo, t: int) -> None:
        """``PutMemo``."""
        cur.execute(self.q["wf_put_memo"], {"e": eid, "key": op.key, "value": op.value, "now": t})

    def drop_memos(self, cur: Any, eid: str, keys: Sequence[str]) -> None:
        """``DropMemos``."""
        cur.execute(self.q["wf_drop_memos"], {"e": eid, "keys": self.store.array(list(keys))})

    def memos(self, cur: Any, eid: str) -> dict[str, MemoRecord]:
        """Every memo of ``eid``, by key."""
        rows = cur.execute(self.q["wf_memos"], {"e": eid}).fetchall()
        return {
            r["key"]: MemoRecord(key=r["key"], value=bytes(r["value"]), seq=r["seq"], at=r["at"])
            for r in rows
        }

    def add_step(self, cur: Any, eid: str, op: plan.AddStep, t: int) -> str | None:
        """``AddStep``: the step's row, and its child job enqueued now as ``enqueue`` would
        (ready now; ``skipped`` over its task's ``skip`` concurrency limit: then its reason,
        for the caller to end the step with)."""
        j, state, reason = op.job, JobState.QUEUED, None
        cur.execute(self.q["wf_insert_step"], {
            "e": eid, "idx": op.idx, "step_id": op.step, "state": op.state.value,
            "job_id": None if j is None else j.id, "job": "" if j is None else job_json(j),
            "payload": b"" if j is None else j.payload,
        })  # fmt: skip
        if j is None:
            return None
        if j.concurrency_skip and j.concurrency_key is not None:
            [state], [reason] = self.limits.skip_states(cur, [j])
        row = job_row(j, t, state, reason) + (j.execution_id, j.step_id, j.flow_deadline_at)
        cur.executemany(self.q["flow_insert_job"], [row])
        self.store.notify(cur)
        return reason if state is JobState.SKIPPED else None

    def set_ready(self, cur: Any, job_id: str, at: int, *, wake: bool) -> None:
        """``SetReady`` / ``Wake``: a queued job's ready time (a wake-up notifies workers)."""
        row = cur.execute(self.q["wf_queued_sts"], {"id": job_id}).fetchone()
        if row is None:
            return
        expires = queued_expiry(at, row["schedule_to_start_ms"])
        cur.execute(self.q["wf_set_ready"], {"id": job_id, "at": at, "expires": expires})
        if wake:
            self.store.notify(cur)

    def add_waiter(self, cur: Any, eid: str, w: EventWait) -> None:
        """``AddWaiter`` (replacing one with the same memo key)."""
        cur.execute(self.q["wf_put_wait"], {
            "e": eid, "memo_key": w.memo_key, "name": w.name, "key": w.key,
            "since": w.since, "until": w.until,
        })  # fmt: skip

    def drop_waiter(self, cur: Any, eid: str, memo_key: str | None = None) -> None:
        """``DropWaiter``; every wait of ``eid`` without ``memo_key`` (``Finished``)."""
        if memo_key is None:
            cur.execute(self.q["wf_drop_waits"], {"e": eid})
        else:
            cur.execute(self.q["wf_drop_wait"], {"e": eid, "memo_key": memo_key})

    def waits_of(self, cur: Any, name: str) -> list[tuple[str, EventWait]]:
        """The registered waits of event ``name``: (execution id, wait), by execution id."""
        rows = cur.execute(self.q["wf_waits_of"], {"name": name}).fetchall()
        return [(r["execution_id"], _wait(r)) for r in rows]

    def wait(self, cur: Any, eid: str, memo_key: str) -> EventWait | None:
        """The wait ``memo_key`` of ``eid`` as stored now (read under its lock)."""
        row = cur.execute(self.q["wf_wait_one"], {"e": eid, "memo_key": memo_key}).fetchone()
        return None if row is None else _wait(row)

    def store_event(self, cur: Any, event: StoredEvent) -> None:
        """``send_event``'s stored event."""
        cur.execute(self.q["wf_insert_event"], {
            "name": event.name, "key": event.key, "data": event.data, "now": event.at,
        })  # fmt: skip

    def events(self, cur: Any, name: str, t: int) -> list[StoredEvent]:
        """The stored events of ``name`` sent at or before ``t``, earliest first."""
        rows = cur.execute(self.q["wf_events_of"], {"name": name, "now": t}).fetchall()
        return [
            StoredEvent(name=r["name"], key=r["key"], data=bytes(r["data"]), at=r["at"])
            for r in rows
        ]

    def reopen(self, cur: Any, eid: str) -> None:
        """``Reopened``: ``finished_at`` cleared (the state the plan writes next makes the
        execution active again: the indexes of active executions are by state)."""
        cur.execute(self.q["wf_reopen"], {"e": eid})

    def set_unmet(self, cur: Any, eid: str, op: plan.SetUnmet) -> None:
        """``SetUnmet``."""
        cur.execute(self.q["wf_set_unmet"], {"e": eid, "idx": op.idx, "unmet": op.unmet})

    def rerun(self, cur: Any, jobs: Sequence[tuple[NewJob, int | None]], t: int) -> None:
        """``Release`` of step jobs that finished: each runs again (queued, ready at ``t``,
        ``max_attempts`` = attempts so far + the budget it was stored with, its end
        cleared, its dead-letter entry removed, its attempt records kept)."""
        ids = self.store.array([j.id for j, _ in jobs])
        cur.execute(self.q["wf_undead"], {"ids": ids})
        cur.executemany(self.q["wf_rerun_job"], [
            {"id": j.id, "now": t, "expires": queued_expiry(t, j.schedule_to_start_ms),
             "budget": j.max_attempts, "deadline": deadline}
            for j, deadline in jobs
        ])  # fmt: skip

    def fenced(self, cur: Any, job_id: str, attempt: int, token: str) -> str | None:
        """The execution of the current attempt ``(job_id, attempt, token)``; ``None`` when
        that attempt is not current (or its job is no step job)."""
        params = {"id": job_id, "attempt": attempt, "token": token}
        row = cur.execute(self.q["wf_fence"], params).fetchone()
        return None if row is None else row["execution_id"]


def _wait(r: Any) -> EventWait:
    return EventWait(
        memo_key=r["memo_key"], name=r["name"], key=r["key"], since=r["since"], until=r["until"]
    )
