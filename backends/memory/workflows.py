"""Durable workflows of ``memory://``: the reference ``SupportsWorkflows``.

Each operation takes the store's lock, reads what the core needs, lets the core decide
(:mod:`queue_core.rules.flows.workflow`) and hands the plan to the flows part's one
interpreter (:meth:`MemoryFlows._apply <backends.memory.flows.MemoryFlows>`). The
changes ``finish``, ``claim`` and ``reap`` make for workflows are in the flows part
(:meth:`~backends.memory.flows.MemoryFlows.suspended`, ``claimed``, ``reap_deadlines``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from backends.memory.flows import MemoryFlows
from backends.memory.store import MemoryStore
from queue_core.records.errors import LeaseLost, StorageError
from queue_core.records.flows import ExecutionState
from queue_core.records.jobs import LeaseRef
from queue_core.records.workflows import StoredEvent
from queue_core.rules.flows import decide, plan, workflow
from queue_core.storage.flows import NewExecution
from queue_core.storage.workflows import WorkflowState, sub_execution_id

__all__ = ["MemoryWorkflows"]


class MemoryWorkflows:
    """``workflow_state``, ``put_memo``, ``send_event``, ``start_child_execution`` and
    ``resume_execution``.

    Args:
        store: the store.
        flows: the flows part (built on first use): executions, waits, events, the
            interpreter.
    """

    def __init__(self, store: MemoryStore, flows: Callable[[], MemoryFlows]) -> None:
        self.store = store
        self.flows = flows
        self._event_seq = itertools.count(1)

    def workflow_state(self, execution_id: str) -> WorkflowState | None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.workflow_state`."""
        with self.store.cond:
            e = self.flows().executions.get(execution_id)
            if e is None:
                return None
            jobs = {}
            for step in e.steps:
                job = self.store.jobs.get(step.job_id or "")
                if job is not None:
                    jobs[step.idx] = job.record()
            return WorkflowState(
                execution=e.rec, steps=list(e.steps), memos=dict(e.memos), jobs=jobs
            )

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
        with self.store.cond:
            t = self.store.now(now)
            self._fenced(ref, execution_id)
            e = self.flows().get(execution_id)
            self.flows()._apply(e, [plan.PutMemo(key, value)], t)

    def _fenced(self, ref: LeaseRef, execution_id: str) -> None:
        job = self.store.current(ref)
        if job is None or job.spec.execution_id != execution_id:
            raise LeaseLost(
                f"attempt {ref.attempt} of job {ref.job_id} is not a current attempt of "
                f"execution {execution_id}"
            )

    def send_event(
        self,
        name: str,
        key: str | None = None,
        data: bytes = b"null",
        *,
        now: int | None = None,
    ) -> int:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.send_event`."""
        store = self.store
        with store.cond:
            t = store.now(now)
            flows = self.flows()
            seq = next(self._event_seq)
            event = StoredEvent(name=name, key=key, data=data, at=t)
            flows.events.setdefault(name, {})[seq] = event
            heapq.heappush(store.flow_events, (t, seq, name))
            woken = 0
            for (eid, _), wait in list(flows.waiters.get(name, {}).items()):
                e = flows.executions.get(eid)
                if e is None or not workflow.delivers(wait, key, t):
                    continue
                flows._apply(e, workflow.deliver_ops(wait, data), t)
                woken += 1
            if woken:
                store.cond.notify_all()
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
        store = self.store
        with store.cond:
            t = store.now(now)
            if new.parent_id is None or new.parent_idx is None:
                raise StorageError(f"execution {new.id} has no parent link")
            self._fenced(ref, new.parent_id)
            flows = self.flows()
            parent = flows.get(new.parent_id)
            if new.parent_idx != len(parent.steps) or new.id != sub_execution_id(
                new.parent_id, new.parent_idx
            ):
                raise StorageError(
                    f"sub-execution {new.id}: step index {new.parent_idx} is not the next "
                    f"one of execution {new.parent_id} ({len(parent.steps)})"
                )
            state = flows.start(new, t)
            ops = workflow.child_flow_ops(new.parent_idx, step_id, memo_key, state)
            flows._apply(parent, ops, t)
            store.cond.notify_all()
            return state

    def resume_execution(
        self, execution_id: str, from_step: str | None = None, *, now: int | None = None
    ) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.resume_execution`."""
        with self.store.cond:
            state = self.resume(execution_id, from_step, self.store.now(now))
            self.store.cond.notify_all()
            return state

    def resume(self, execution_id: str, from_step: str | None, t: int) -> ExecutionState:
        """Resume at ``t`` with the lock held (also ``retry_dead`` of a step's entry)."""
        flows = self.flows()
        e = flows.get(execution_id)
        view = e.view()
        workflow.check_resume(execution_id, view, from_step, e.memos)
        key = e.rec.conc_key
        active = flows.by_key.get(key, []) if key is not None else []
        others = flows.slots([i for i in active if i != execution_id])
        admission = decide.admit(e.new.concurrency, others)
        ops = workflow.resume_ops(view, e.index, admission, t, from_step=from_step, memos=e.memos)
        flows._apply(e, ops, t)
        return e.rec.state
