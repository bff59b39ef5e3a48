"""Pauses of ``memory://`` (``SupportsPause``): what is paused, and the jobs moved aside.

A paused queue costs its claims nothing: the store keeps the paused queues
(:attr:`MemoryStore.paused_queues`) and a claim does not read their heaps. A paused task's
or flow's job is moved aside once, when a claim meets it (:meth:`MemoryPauses.park`), and
goes back to its queue's heap, in its order, at resume; while no task or flow is paused
the claim asks nothing (:attr:`MemoryPauses.jobs_paused` is false). The rule is
:func:`queue_core.rules.control.paused`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from backends.memory.records import Job, ReadyEntry
from backends.memory.store import MemoryStore
from queue_core.records.control import Pause, PauseKind
from queue_core.records.jobs import dt_from_ms
from queue_core.rules.control import pause_kind, paused

if TYPE_CHECKING:
    from backends.memory.flows import MemoryFlows

__all__ = ["MemoryPauses"]

_Key = tuple[PauseKind, str]


class MemoryPauses:
    """:class:`~queue_core.storage.control.SupportsPause`.

    Args:
        store: the store.
        flows: the flows part (built on first use): a step job's flow is its execution's.
    """

    def __init__(self, store: MemoryStore, flows: Callable[[], MemoryFlows]) -> None:
        self.store = store
        self.flows = flows
        self.since: dict[_Key, int] = {}
        self.parked: dict[_Key, list[tuple[ReadyEntry, str]]] = {}
        self.jobs_paused = False
        """A task or a flow is paused: claims check each job they meet (lock held)."""

    def pause(self, kind: PauseKind, name: str, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.control.SupportsPause.pause`."""
        key = (pause_kind(kind), name)
        with self.store.cond:
            if key in self.since:
                return False
            self.since[key] = self.store.now(now)
            self._changed()
            return True

    def resume(self, kind: PauseKind, name: str) -> bool:
        """See :meth:`queue_core.storage.control.SupportsPause.resume`."""
        key = (pause_kind(kind), name)
        store = self.store
        with store.cond:
            if self.since.pop(key, None) is None:
                return False
            self._changed()
            for entry, queue in self.parked.pop(key, []):
                job = store.valid_queued(entry[4], entry[3])
                if job is not None:
                    store.push_ready(job, queue, entry)
            store.cond.notify_all()
            return True

    def list_paused(self) -> list[Pause]:
        """See :meth:`queue_core.storage.control.SupportsPause.list_paused`."""
        with self.store.cond:
            return [
                Pause(kind=kind, name=name, since=dt_from_ms(since))  # type: ignore[arg-type]
                for (kind, name), since in sorted(self.since.items())
            ]

    def _changed(self) -> None:
        self.store.paused_queues = {n for k, n in self.since if k is PauseKind.QUEUE}
        self.jobs_paused = any(k is not PauseKind.QUEUE for k, _ in self.since)

    # ------------------------------------------------------------------ from the job parts

    def flow_of(self, job: Job) -> str | None:
        """The flow a step job belongs to (``None`` for other jobs)."""
        eid = job.spec.execution_id
        if eid is None:
            return None
        e = self.flows().executions.get(eid)
        return None if e is None else e.rec.flow

    def matching(self, job: Job) -> _Key | None:
        """The task or flow pause ``job`` matches, if any (lock held)."""
        if not self.jobs_paused:
            return None
        spec, flow = job.spec, self.flow_of(job)
        if not paused(self.since, "", spec.task_name, flow):
            return None
        task = (PauseKind.TASK, spec.task_name)
        return task if task in self.since else (PauseKind.FLOW, flow or "")

    def is_paused(self, job: Job) -> bool:
        """Whether a queued ``job`` matches any pause (its queue's included; lock held)."""
        return job.spec.queue in self.store.paused_queues or self.matching(job) is not None

    def park(self, job: Job, entry: ReadyEntry, queue: str) -> bool:
        """Move a ready ``job`` aside if a task or flow pause matches it (lock held)."""
        key = self.matching(job)
        if key is None:
            return False
        self.parked.setdefault(key, []).append((entry, queue))
        return True
