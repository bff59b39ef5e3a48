"""The reaper of ``memory://``: the sequence :meth:`Storage.reap` states, under the lock.

First running flow executions past their deadline (the flows part, whose step jobs end
``timed_out``); then running attempts whose bound passed, oldest lease first, each as
:func:`~queue_core.rules.outcomes.reap_verdict` says (a job queued again keeps its
place in line, ``Job.place_at``); then queued jobs whose
schedule-to-start bound passed (:meth:`MemoryStore.expired`), dead-lettered unrun. A
flow step's job that changes state ends its step in the same locked step.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

from backends.memory.records import Job
from backends.memory.store import MemoryStore
from queue_core.records.jobs import JobState, ReapedJob, Reason
from queue_core.rules.outcomes import ReapVerdict, reap_verdict

if TYPE_CHECKING:
    from backends.memory.flows import MemoryFlows

__all__ = ["MemoryReaping"]


class MemoryReaping:
    """``reap``.

    Args:
        store: the store.
        flows: the flows part (built on first use): execution deadlines, and step jobs
            that change state.
    """

    def __init__(self, store: MemoryStore, flows: Callable[[], MemoryFlows]) -> None:
        self.store = store
        self.flows = flows

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """See :meth:`queue_core.storage.protocol.Storage.reap`."""
        store = self.store
        with store.cond:
            t = store.now(now)
            reaped = self.flows().reap_deadlines(t, limit) if store.flow_deadlines else []
            stale: list[tuple[int, int, Job, ReapVerdict]] = []
            for job in store.running.values():
                verdict = reap_verdict(
                    t,
                    lease_expires_at=job.lease_expires_at,
                    deadline=job.deadline,
                    heartbeat_expires_at=job.heartbeat_expires_at,
                    cancel_requested=job.cancel_requested,
                    attempt=job.attempt,
                    max_attempts=job.spec.max_attempts,
                    lost_delay_ms=job.lost_delay_ms,
                    run_at=job.ready_at,
                    schedule_to_start_ms=job.spec.schedule_to_start_ms,
                    place_at=job.place_at,
                    held=job.ahead,
                    held_refunds=job.held_refunds,
                )
                if verdict is not None:
                    stale.append((job.lease_expires_at, job.seq, job, verdict))
            stale.sort(key=lambda s: (s[0], s[1]))
            for _, _, job, verdict in stale[: limit - len(reaped)]:
                reaped.append(self._reap_attempt(job, verdict, t))
            while len(reaped) < limit and store.expiries:
                _, gen, job_id = store.expiries[0]
                queued = store.valid_queued(job_id, gen)
                if queued is not None and not store.expired(queued, t):
                    break  # the earliest expiry is still to come
                heapq.heappop(store.expiries)
                if queued is not None:
                    reaped.append(self._reap_unstarted(queued, t))
            if reaped:
                store.cond.notify_all()
            return reaped

    def _reap_attempt(self, job: Job, verdict: ReapVerdict, t: int) -> ReapedJob:
        store = self.store
        attempt = job.attempts[-1]
        attempt.outcome = verdict.outcome
        attempt.reason = verdict.reason.value
        attempt.finished_at = t
        if verdict.refund:  # a held attempt: its body never started
            job.refund()
            job.held_refunds += 1
        if verdict.state is JobState.QUEUED:
            assert verdict.ready_at is not None
            job.ready_at = verdict.ready_at
            job.reason = None
            store.enter(job, JobState.QUEUED, place_at=verdict.place_at)
        elif verdict.state is JobState.DEAD:
            assert verdict.job_reason is not None
            store.dead_letter(job, verdict.job_reason, None, t)
        else:
            store.end(job, verdict.state, verdict.job_reason, t)
        if job.spec.execution_id is not None:
            self.flows().step_ended(job, t)
        return ReapedJob(
            job_id=job.id,
            attempt=attempt.number,
            outcome=verdict.outcome,
            reason=verdict.reason.value,
            state=job.state,
        )

    def _reap_unstarted(self, job: Job, t: int) -> ReapedJob:
        self.store.dead_letter(job, Reason.SCHEDULE_TO_START.value, None, t)
        if job.spec.execution_id is not None:
            self.flows().step_ended(job, t)
        return ReapedJob(
            job_id=job.id,
            attempt=0,
            outcome=None,
            reason=Reason.SCHEDULE_TO_START.value,
            state=JobState.DEAD,
        )
