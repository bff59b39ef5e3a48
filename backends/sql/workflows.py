"""Durable workflows on SQLite and PostgreSQL (``SupportsWorkflows``).

Each operation is one transaction: it locks the execution (:meth:`Flows.open
<backends.sql.flows.Flows.open>`), reads what the core needs, lets the core decide
(:mod:`queue_core.rules.flows.workflow`) and hands the plan to the flows part's one
interpreter. What ``finish``, ``claim``, ``reap`` and ``prune`` do for workflows is in the
flows part (:meth:`~backends.sql.flows.Flows.suspended`, ``claimed``), the reaper's
deadline scan (``waiting`` executions too) and :mod:`backends.sql.admin`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backends.sql.flow_open import Open
from backends.sql.flows import Flows
from backends.sql.store import Store
from queue_core.records.errors import LeaseLost, NotFound, StorageError
from queue_core.records.flows import ExecutionState
from queue_core.records.jobs import LeaseRef
from queue_core.records.workflows import StoredEvent
from queue_core.rules.flows import decide, plan, workflow
from queue_core.rules.flows.spec import ConcurrencySpec
from queue_core.storage.flows import NewExecution
from queue_core.storage.workflows import sub_execution_id

__all__ = ["Workflows"]


class Workflows:
    """``put_memo``, ``send_event``, ``start_child_execution`` and ``resume_execution``
    (``workflow_state`` is a read: :class:`~backends.sql.flow_reads.FlowReads`).

    Args:
        store: the store.
        flows: the flows part (built on first use): locks, the interpreter.
    """

    def __init__(self, store: Store, flows: Callable[[], Flows]) -> None:
        self.store = store
        self.flows = flows

    def _fenced(self, cur: Any, ref: LeaseRef, execution_id: str) -> None:
        found = self.flows().rows.fenced(cur, ref.job_id, ref.attempt, ref.lease_token)
        if found != execution_id:
            raise LeaseLost(
                f"attempt {ref.attempt} of job {ref.job_id} is not a current attempt of "
                f"execution {execution_id}"
            )

    def _open(self, cur: Any, execution_id: str, t: int) -> Open:
        x = self.flows().open(cur, execution_id, t)
        if x is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        return x

    def put_memo(
        self,
        ref: LeaseRef,
        execution_id: str,
        key: str,
        value: bytes,
        *,
        now: int | None = None,
    ) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.put_memo`."""
        with self.store.tx() as cur:
            t = self.store.resolve_now(cur, now)
            x = self._open(cur, execution_id, t)  # the execution first (the lock order)
            self._fenced(cur, ref, execution_id)
            self.flows().apply(x, [plan.PutMemo(key, value)])

    def send_event(
        self,
        name: str,
        key: str | None = None,
        data: bytes = b"null",
        *,
        now: int | None = None,
    ) -> int:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.send_event`."""
        flows = self.flows()
        with self.store.tx() as cur:
            t = self.store.resolve_now(cur, now)
            flows.rows.store_event(cur, StoredEvent(name=name, key=key, data=data, at=t))
            woken = 0
            for eid, seen in flows.rows.waits_of(cur, name):
                if not workflow.delivers(seen, key, t):
                    continue
                x = flows.open(cur, eid, t)
                wait = None if x is None else flows.rows.wait(cur, eid, seen.memo_key)
                if x is None or wait is None or not workflow.delivers(wait, key, t):
                    continue  # delivered or dropped meanwhile
                flows.apply(x, workflow.deliver_ops(wait, data))
                woken += 1
            return woken

    def start_child_execution(
        self,
        ref: LeaseRef,
        new: NewExecution,
        step_id: str,
        memo_key: str,
        *,
        now: int | None = None,
    ) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.start_child_execution`."""
        if new.parent_id is None or new.parent_idx is None:
            raise StorageError(f"execution {new.id} has no parent link")
        flows = self.flows()
        with self.store.tx() as cur:
            t = self.store.resolve_now(cur, now)
            parent = self._open(cur, new.parent_id, t)
            self._fenced(cur, ref, new.parent_id)
            n = len(parent.index.ids)
            if new.parent_idx != n or new.id != sub_execution_id(new.parent_id, new.parent_idx):
                raise StorageError(
                    f"sub-execution {new.id}: step index {new.parent_idx} is not the next "
                    f"one of execution {new.parent_id} ({n})"
                )
            state = flows.start(cur, new, t, parent)
            flows.apply(parent, workflow.child_flow_ops(new.parent_idx, step_id, memo_key, state))
            return state

    def resume_execution(
        self, execution_id: str, from_step: str | None = None, *, now: int | None = None
    ) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.resume_execution`."""
        with self.store.tx() as cur:
            return self.resume(cur, execution_id, from_step, self.store.resolve_now(cur, now))

    def resume(self, cur: Any, execution_id: str, from_step: str | None, t: int) -> ExecutionState:
        """Resume in the caller's transaction (also ``retry_dead`` of a step's entry):
        :func:`workflow.check_resume`, :func:`decide.admit` against the other active
        executions of its key, then :func:`workflow.resume_ops` applied."""
        flows = self.flows()
        x = self._open(cur, execution_id, t)
        view = flows.view(x)
        memos = flows.rows.memos(cur, execution_id)
        workflow.check_resume(execution_id, view, from_step, memos)
        h = x.head
        conc = None
        others = []
        if h["conc_key"] is not None:
            conc = ConcurrencySpec(h["conc_limit"], "skip" if h["conc_skip"] else "queue")
            others = [s for s in flows.slots(cur, h["conc_key"]) if s.id != execution_id]
        admission = decide.admit(conc, others)
        ops = workflow.resume_ops(view, x.index, admission, t, from_step=from_step, memos=memos)
        flows.apply(x, ops)
        return ExecutionState(x.head["state"])
