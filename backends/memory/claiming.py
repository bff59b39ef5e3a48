"""Claims and leases of ``memory://``: claim, renew, heartbeat and the wake-up wait.

A claim pops the best ready entry across the heaps of the queues not paused (``O(k log
n)`` for ``k`` claimed jobs). An entry is skipped if stale, put back if its job is not due
at this ``now``, left queued if its schedule-to-start bound passed (the reaper
dead-letters it) or its rate is spent, moved aside if a task or flow pause matches it,
and parked on its concurrency key if that key's slots are full. A ``round_robin`` group's
job is claimed in turns over its keys (:mod:`backends.memory.roundrobin`): the job
claimed in its place is the group's next turn. Claiming a flow step's job tells the
flows part (:meth:`MemoryFlows.claimed`).
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from backends.memory.limits import MemoryLimits
from backends.memory.pauses import MemoryPauses
from backends.memory.records import Attempt, Job, ReadyEntry
from backends.memory.roundrobin import Verdict
from backends.memory.store import MemoryStore
from queue_core.records.errors import LeaseLost
from queue_core.records.jobs import ClaimedJob, JobState, LeaseRef, RenewResult
from queue_core.rules.leases import step_deadline, step_refused
from queue_core.storage.claims import started_ago

if TYPE_CHECKING:
    from backends.memory.flows import MemoryFlows

__all__ = ["MemoryClaiming"]

_ASIDE = "aside"
_AGAIN = "again"


def _best(heaps: dict[str, list[ReadyEntry]]) -> str | None:
    """The queue whose best ready entry comes first, or ``None`` when all are empty."""
    best: str | None = None
    for q, h in heaps.items():
        if h and (best is None or h[0] < heaps[best][0]):
            best = q
    return best


class MemoryClaiming:
    """``claim``, ``renew``, ``heartbeat`` and
    :class:`~queue_core.storage.abilities.SupportsWakeup`.

    Args:
        store: the store.
        limits: takes a claim of a job's rate key.
        pauses: moves a paused task's or flow's job aside.
        flows: the flows part (built on first use), told when a step's job is claimed.
    """

    def __init__(
        self,
        store: MemoryStore,
        limits: MemoryLimits,
        pauses: MemoryPauses,
        flows: Callable[[], MemoryFlows],
    ) -> None:
        self.store = store
        self.limits = limits
        self.pauses = pauses
        self.flows = flows
        self._ahead = False

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
        ahead: bool = False,
    ) -> list[ClaimedJob]:
        """See :meth:`queue_core.storage.protocol.Storage.claim`; ``ahead``: see
        :meth:`queue_core.storage.abilities.SupportsPrefetch.claim_ahead`."""
        store = self.store
        with store.cond:
            t = store.now(now)
            self._ahead = ahead  # read by _start, under the lock
            heaps = {
                q: store.due_ready(q, t)
                for q in dict.fromkeys(queues)
                if q not in store.paused_queues
            }
            aside: list[tuple[str, ReadyEntry]] = []
            claimed: list[ClaimedJob] = []
            while len(claimed) < limit:
                best = _best(heaps)
                if best is None:
                    break
                entry = heapq.heappop(heaps[best])
                job = store.valid_queued(entry[4], entry[3])
                if job is None:
                    continue
                after = self._consider(job, entry, best, worker_id, lease_ms, t, claimed)
                if after is _AGAIN:
                    heapq.heappush(heaps[best], entry)
                elif after is _ASIDE:
                    aside.append((best, entry))
            for q, entry in aside:
                heapq.heappush(heaps[q], entry)
            return claimed

    def _consider(
        self,
        job: Job,
        entry: ReadyEntry,
        queue: str,
        worker_id: str,
        lease_ms: int,
        t: int,
        claimed: list[ClaimedJob],
    ) -> str | None:
        """Claim ``job`` (or, for a ``round_robin`` job, its group's next turn) into
        ``claimed`` if it may be; what happens to its entry: ``None`` (gone: claimed,
        parked, moved aside), ``_ASIDE`` (back after this claim) or ``_AGAIN`` (back now:
        another job of its group took its place, the next place is its own)."""
        store = self.store
        verdict = self._offer(job, entry, queue, t)
        if verdict is Verdict.PASS:
            return _ASIDE
        if verdict is Verdict.GONE:
            return None
        if job.spec.concurrency_behavior == "round_robin":
            took = self._turn(job, queue, worker_id, lease_ms, t, claimed)
            if job.state is not JobState.QUEUED:
                return None
            return _AGAIN if took else _ASIDE  # no key of the group can be served now
        if store.slot_full(job):
            key = job.spec.concurrency_key
            assert key is not None
            heapq.heappush(store.parked.setdefault(key, []), (entry, queue))
            return None
        granted, start_by = self._rate(job, t)
        if not granted:
            return _ASIDE  # over its rate: stays queued
        claimed.append(self._start(job, worker_id, lease_ms, t, start_by))
        return None

    def _offer(self, job: Job, entry: ReadyEntry, queue: str, t: int) -> Verdict:
        """Whether a ready ``job`` may be claimed at ``t`` (before its key and rate)."""
        store = self.store
        if job.ready_at > t:  # promoted by a later `now` than this one
            heapq.heappush(store.delayed[queue], (job.ready_at, job.gen, job.id))
            return Verdict.GONE
        if store.expired(job, t):
            return Verdict.PASS  # left queued for reap to dead-letter
        if step_refused(t, job.spec.flow_deadline_at):
            return Verdict.PASS  # left queued for the flow's reap to end it not_run
        if self.pauses.jobs_paused and self.pauses.park(job, entry, queue):
            return Verdict.GONE
        return Verdict.TAKE

    def _rate(self, job: Job, t: int) -> tuple[bool, int | None]:
        """Whether ``job``'s rate grants a claim at ``t`` (always, without a rate key),
        and its ``start_by`` (``None`` without a rate key)."""
        if job.spec.rate_key is None:
            return True, None
        start_by = self.limits.rate_take(job.spec, t)
        return start_by is not None, start_by

    def _turn(
        self,
        first: Job,
        queue: str,
        worker_id: str,
        lease_ms: int,
        t: int,
        claimed: list[ClaimedJob],
    ) -> bool:
        """The claim reached ``first``, a job of a ``round_robin`` group: claim the
        group's next turn in its place (:mod:`backends.memory.roundrobin`). Returns
        whether a job was claimed."""
        store = self.store
        spec = first.spec
        rate: list[int | None] = []

        def offer(job: Job, entry: ReadyEntry) -> Verdict:
            verdict = self._offer(job, entry, queue, t)
            if verdict is Verdict.TAKE:
                granted, start_by = self._rate(job, t)
                if not granted:
                    return Verdict.PASS
                rate.append(start_by)
            return verdict

        group = spec.concurrency_group or spec.task_name
        job = store.round_robin.pick(queue, group, store.valid_entry, store.slot_full, offer)
        if job is None:
            return False
        claimed.append(self._start(job, worker_id, lease_ms, t, rate[-1]))
        return True

    def _start(
        self, job: Job, worker_id: str, lease_ms: int, t: int, start_by: int | None = None
    ) -> ClaimedJob:
        self.store.enter(job, JobState.RUNNING)
        job.reason = None
        job.attempts.append(Attempt(number=job.attempt + 1, worker_id=worker_id, started_at=t))
        job.lease_token = uuid.uuid4().hex
        job.lease_expires_at = t + lease_ms
        s = job.spec
        job.ahead = self._ahead
        if self._ahead:  # held: bound by the lease until start_claimed
            job.deadline = job.heartbeat_expires_at = None
        else:
            self._bounds(job, t)
        if s.execution_id is not None:
            self.flows().claimed(job, t)
        return ClaimedJob(
            id=s.id,
            task_name=s.task_name,
            queue=s.queue,
            payload=s.payload,
            attempt=job.attempt,
            lease_token=job.lease_token,
            lease_expires_at=job.lease_expires_at,
            deadline=step_deadline(job.deadline, s.flow_deadline_at),
            max_attempts=s.max_attempts,
            priority=s.priority,
            timeout_ms=s.timeout_ms,
            heartbeat_ms=s.heartbeat_ms,
            options=s.options,
            enqueued_at=job.enqueued_at,
            replay_of=s.replay_of,
            started_at=t,
            execution_id=s.execution_id,
            step_id=s.step_id,
            flow_deadline_at=s.flow_deadline_at,
            run_at=job.ready_at,
            start_by=start_by,
        )

    @staticmethod
    def _bounds(job: Job, t: int) -> None:
        """The attempt's deadline and heartbeat deadline, counted from ``t``."""
        s = job.spec
        job.deadline = t + s.timeout_ms if s.timeout_ms is not None else None
        job.heartbeat_expires_at = t + s.heartbeat_ms if s.heartbeat_ms is not None else None

    def start_claimed(
        self, refs: Sequence[LeaseRef], ago_ms: Sequence[int] = (), *, now: int | None = None
    ) -> list[bool]:
        """See :meth:`queue_core.storage.abilities.SupportsPrefetch.start_claimed`."""
        with self.store.cond:
            t = self.store.now(now)
            out: list[bool] = []
            for ref, ago in zip(refs, started_ago(refs, ago_ms), strict=True):
                job = self.store.current(ref)
                if job is not None:
                    s = t - ago
                    job.ahead = False
                    self._bounds(job, s)
                    job.attempts[-1].started_at = s
                out.append(job is not None)
            return out

    def give_back(self, refs: Sequence[LeaseRef], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.abilities.SupportsGiveBack.give_back`: the held
        attempt's record is dropped and the job re-enters its queue at the place it had
        (its ready time, kept place and sequence are unchanged); its key's slot frees.
        Flow steps, ``round_robin`` jobs (whose turn is not undone) and jobs with a cancel
        request (released, their cancel then ends them) are refused."""
        store = self.store
        with store.cond:
            store.now(now)
            out: list[bool] = []
            for ref in refs:
                job = store.current(ref)
                if (
                    job is None
                    or job.cancel_requested  # the release path ends it cancelled
                    or job.spec.execution_id is not None
                    or job.spec.concurrency_behavior == "round_robin"
                ):
                    out.append(False)
                    continue
                job.attempts.pop()
                job.lease_expires_at = 0
                store.enter(job, JobState.QUEUED, place_at=job.place_at)
                out.append(True)
            store.cond.notify_all()
            return out

    def round_robin_keys(self, group: str, *, now: int | None = None) -> list[str]:
        """See :meth:`queue_core.storage.control.SupportsRoundRobin.round_robin_keys`."""
        store = self.store
        with store.cond:
            t = store.now(now)
            for q in list(store.ready):
                store.due_ready(q, t)
            return store.round_robin.order(group, store.valid_entry, store.slot_full)

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.protocol.Storage.renew`."""
        with self.store.cond:
            t = self.store.now(now)
            flags: list[bool | None] = []
            for ref in refs:
                job = self.store.current(ref)
                if job is not None:
                    job.lease_expires_at = t + lease_ms
                flags.append(None if job is None else job.cancel_requested)
            return RenewResult.of(refs, flags)

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.protocol.Storage.heartbeat`."""
        with self.store.cond:
            t = self.store.now(now)
            job = self.store.current(ref)
            if job is None:
                raise LeaseLost(f"attempt {ref.attempt} of job {ref.job_id} is not current")
            if job.spec.heartbeat_ms is not None:
                job.heartbeat_expires_at = t + job.spec.heartbeat_ms
            return job.cancel_requested

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a job may be ready in ``queues``.

        Returns ``True`` at once when one is ready now, and when woken by an enqueue, a
        retry, a released slot, or the due time of the earliest delayed job.
        """
        store = self.store
        with store.cond:
            if store.closed:
                return False
            t = store.clock()
            due = store.next_due(queues, t)
            if due is not None and due <= t:
                return True
            wait = timeout if due is None else min(timeout, (due - t) / 1000.0)
            woken = store.cond.wait(wait)
            return woken or (due is not None and wait < timeout)

    def interrupt_waits(self) -> None:
        """End the :meth:`wait_for_jobs` calls in progress now (they return ``True``)."""
        with self.store.cond:
            self.store.cond.notify_all()
