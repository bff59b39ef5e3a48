"""Jobs claimed ahead of free slots (SPEC §8 ``prefetch``), held until a slot frees.

While every slot is busy and fewer than ``prefetch`` jobs are held, the claim loop claims
ahead (:meth:`~queue_core.storage.abilities.SupportsPrefetch.claim_ahead`: the attempts
have a lease but no deadline yet); a freed slot then takes the oldest held job at once,
with no storage round trip before its body starts. Storage learns of the start afterwards
(``start_claimed``, written by the finish thread before any end handed over after it, so
the attempt's start is recorded before its end): its start time, deadline and heartbeat
bound count from there, never from the claim. Held leases are renewed with the running
ones; a stopping worker gives its held jobs back at once, unstarted where storage can
(:func:`give_back`: no attempt counted or recorded), else released like running attempts
(``lost``, ``worker_shutdown``, no attempt spent). On a storage without the ability the
worker claims for free slots only. A pause (SPEC §13: no matching job or step starts more
than 1 s after it) gives held jobs that match it back the same way (:func:`watch_pauses`,
which reads the stored pauses once a second while jobs are held).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection

import anyio
from anyio import to_thread

from queue_core.records.control import PauseKind
from queue_core.records.errors import StorageError
from queue_core.records.jobs import ClaimedJob, LeaseRef
from queue_core.rules.control import paused
from queue_core.storage.abilities import SupportsFlows, SupportsGiveBack
from queue_core.storage.control import SupportsPause
from queue_core.storage.protocol import Storage
from queue_core.worker.log import log

__all__ = ["PAUSE_EVERY", "Held", "give_back", "watch_pauses"]

PAUSE_EVERY = 1.0
"""Seconds between two reads of the stored pauses while jobs are held (SPEC §13: a pause
stops matching starts within 1 s)."""


async def give_back(
    storage: Storage, jobs: list[ClaimedJob], limiter: anyio.CapacityLimiter
) -> list[ClaimedJob]:
    """Give held ``jobs`` (their bodies never started) back unstarted where storage can
    (``SupportsGiveBack``: SPEC §8, no attempt spent, none recorded); the ones it did not
    take, for the worker to release as running attempts."""
    if not jobs or not isinstance(storage, SupportsGiveBack):
        return jobs
    refs = [job.ref for job in jobs]
    try:
        took = await to_thread.run_sync(storage.give_back, refs, limiter=limiter)
    except StorageError as exc:
        log.warning("giving back %d held job(s) failed (%s): releasing them", len(jobs), exc)
        return jobs
    left = [job for job, ok in zip(jobs, took, strict=True) if not ok]
    if len(left) < len(jobs):
        log.info(
            "gave back %d prefetched job(s) unstarted: no attempt spent",
            len(jobs) - len(left),
            extra={"event": {"event": "held_given_back", "jobs": len(jobs) - len(left)}},
        )
    return left


class Held:
    """The jobs a worker holds ahead of free slots, oldest first, each with the pacing
    clock's reading when its claim began (a rate-limited job's start bound counts from
    it, :mod:`~queue_core.worker.ratestart`)."""

    __slots__ = ("limit", "jobs")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        """At most this many jobs held (``prefetch``; 0: never claim ahead)."""
        self.jobs: deque[tuple[ClaimedJob, float, float]] = deque()
        """(job, when its claim call began, how long the call took), oldest first."""

    def __len__(self) -> int:
        return len(self.jobs)

    def want(self) -> int:
        """How many more may be held now."""
        return self.limit - len(self.jobs)

    def add(self, jobs: list[ClaimedJob], began: float, took: float = 0.0) -> None:
        self.jobs.extend((job, began, took) for job in jobs)

    def take(self, n: int) -> list[tuple[ClaimedJob, float, float]]:
        """The ``n`` oldest held jobs (fewer when fewer are held), no longer held."""
        jobs = self.jobs
        return [jobs.popleft() for _ in range(min(n, len(jobs)))]

    def take_all(self) -> list[ClaimedJob]:
        """Every held job, oldest first, no longer held."""
        return [job for job, *_ in self.take(len(self.jobs))]

    def refs(self) -> list[LeaseRef]:
        return [job.ref for job, *_ in self.jobs]

    def drop(self, refs: set[LeaseRef]) -> list[ClaimedJob]:
        """Stop holding the jobs of ``refs``; return them."""
        gone = [job for job, *_ in self.jobs if job.ref in refs]
        if gone:
            self.jobs = deque(p for p in self.jobs if p[0].ref not in refs)
        return gone


def held_paused(
    jobs: Collection[ClaimedJob],
    pauses: Collection[tuple[PauseKind, str]],
    flows: dict[str, str | None],
) -> set[LeaseRef]:
    """The held jobs a pause matches (:func:`~queue_core.rules.control.paused`): by queue,
    task, or -- a flow step -- the flow of its execution (``flows``: execution id -> flow
    name, :class:`FlowNames`)."""
    return {
        job.ref
        for job in jobs
        if paused(pauses, job.queue, job.task_name, flows.get(job.execution_id or ""))
    }


class FlowNames:
    """The flow of each execution a held step belongs to, read from storage once per
    execution (a flow step's claim does not carry it; an execution's flow never changes):
    a flow pause gives back the steps of that flow only. Steps cannot be given back
    unstarted, so each one wrongly matched would be released with an attempt record --
    a pause of one flow once released every held step of every flow each second."""

    __slots__ = ("storage", "known")

    LIMIT = 10_000
    """Executions remembered; the cache starts over past it."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.known: dict[str, str | None] = {}

    def of(self, jobs: Collection[ClaimedJob]) -> dict[str, str | None]:
        """``{execution id: flow name}`` for the steps among ``jobs`` (``None`` for an
        execution storage no longer has); reads storage for those not known yet (call it
        off the event loop)."""
        storage = self.storage
        if not isinstance(storage, SupportsFlows):
            return {}
        ids = {job.execution_id for job in jobs if job.execution_id is not None}
        if len(self.known) > self.LIMIT:
            self.known.clear()
        for eid in ids - self.known.keys():
            record = storage.get_execution(eid)
            self.known[eid] = None if record is None else record.flow
        return {eid: self.known[eid] for eid in ids}


async def watch_pauses(
    storage: Storage,
    held: Held,
    limiter: anyio.CapacityLimiter,
    release: Callable[[ClaimedJob], object],
) -> None:
    """Once a :data:`PAUSE_EVERY` while jobs are held: read the stored pauses and give the
    held jobs they match back unstarted (:func:`give_back`; ``release`` the ones storage
    did not take, as at a stop). Claims already leave paused jobs out; this covers the
    ones claimed ahead before the pause. Paced by the event loop's timer, as the claim
    loop's own pauses are: it is how often storage is read, not the worker's time."""
    if not isinstance(storage, SupportsPause):
        return
    names = FlowNames(storage)
    while True:
        await anyio.sleep(PAUSE_EVERY)
        if not held.jobs:
            continue
        try:
            stored = await to_thread.run_sync(storage.list_paused, limiter=limiter)
        except StorageError:
            continue  # the claims and renewals report an outage
        if not stored:
            continue
        pauses = {(p.kind, p.name) for p in stored}
        jobs = [job for job, *_ in held.jobs]
        if any(kind is PauseKind.FLOW for kind, _ in pauses):
            try:
                flows = await to_thread.run_sync(names.of, jobs, limiter=limiter)
            except StorageError:
                continue
        else:
            flows = {}
        jobs = held.drop(held_paused(jobs, pauses, flows))
        for job in await give_back(storage, jobs, limiter):
            release(job)
