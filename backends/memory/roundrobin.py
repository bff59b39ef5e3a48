"""``round_robin`` groups of ``memory://``: claims rotate over a group's keys.

A ready job of a ``round_robin`` group sits in its queue's ready heap like any job, and
also in its key's heap here (same entry, same generation: a stale one is skipped in both).
When the claim reaches a group's job in its queue's order, it claims in that place the
job :meth:`RoundRobinIndex.pick` gives: the best job of the key that comes first in
:func:`~queue_core.rules.control.round_robin_order` -- least recently served, never
served first, ties by its best job -- among keys below their limit. Each key's turn is
one entry of a heap ordered like that rule, ``(served, best job's order, key)``; an entry
is live only while it equals the key's recorded turn, so turns change without searching.

Groups are per queue (a group's jobs rotate among those of one queue). A key's served
mark is forgotten once it has no ready job (it then counts as never served: a key that
keeps at most one job waiting is served first whenever it has one, which holds back no
other key by more than one job per round).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from backends.memory.records import Job, ReadyEntry
from queue_core.rules.control import round_robin_order

__all__ = ["RoundRobinIndex", "Verdict"]

_Order = tuple[int, int, int]
"""A ready entry's claim order: ``(-priority, order_at, seq)``."""
_Turn = tuple[int, _Order, str]


class Verdict(Enum):
    """What the claim made of the job :meth:`RoundRobinIndex.pick` offered."""

    TAKE = "take"
    """Claimed: the key is served."""
    PASS = "pass"
    """Not claimable now (its schedule-to-start passed, its rate is spent): it stays in
    its key's heap; the key is passed over for this pick."""
    GONE = "gone"
    """Taken out of the ready set (moved aside by a pause): offer the key's next job."""


@dataclass(slots=True, eq=False)
class _Group:
    keys: dict[str, list[ReadyEntry]] = field(default_factory=dict)
    turns: list[_Turn] = field(default_factory=list)
    turn_of: dict[str, tuple[int, _Order]] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)
    counter: int = 0

    def set_turn(self, key: str, head: ReadyEntry) -> None:
        turn = (self.served.get(key, 0), head[:3])
        if self.turn_of.get(key) != turn:
            self.turn_of[key] = turn
            heapq.heappush(self.turns, (turn[0], turn[1], key))

    def forget(self, key: str) -> None:
        self.keys.pop(key, None)
        self.turn_of.pop(key, None)
        self.served.pop(key, None)


Valid = Callable[[ReadyEntry], Job | None]
"""The job of an entry if it is still queued at that generation, else ``None``."""


class RoundRobinIndex:
    """The key heaps and turns of every ``round_robin`` group (the store's lock held)."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], _Group] = {}

    def ready(self, job: Job, entry: ReadyEntry, queue: str) -> None:
        """``job`` (a group's) entered its queue's ready heap with ``entry``."""
        spec = job.spec
        group = self.groups.setdefault((queue, spec.concurrency_group or spec.task_name), _Group())
        key = spec.concurrency_key or ""
        heap = group.keys.setdefault(key, [])
        heapq.heappush(heap, entry)
        if heap[0] is entry:
            group.set_turn(key, entry)

    def _head(self, group: _Group, key: str, valid: Valid) -> Job | None:
        heap = group.keys.get(key)
        while heap:
            job = valid(heap[0])
            if job is not None:
                return job
            heapq.heappop(heap)
        group.forget(key)
        return None

    def pick(
        self,
        queue: str,
        name: str,
        valid: Valid,
        full: Callable[[Job], bool],
        offer: Callable[[Job, ReadyEntry], Verdict],
    ) -> Job | None:
        """Claim the group's next turn: offer each key's best job in turn order until
        ``offer`` takes one (that key is then served and goes to the back); ``None`` when
        no key below its limit (``full`` of its best job) has a job ``offer`` takes."""
        group = self.groups.get((queue, name))
        if group is None:
            return None
        passed: list[_Turn] = []
        try:
            while group.turns:
                turn = heapq.heappop(group.turns)
                job = self._live(group, turn, valid)
                if job is None:
                    continue
                key = turn[2]
                head = group.keys[key][0]
                verdict = Verdict.PASS if full(job) else offer(job, head)
                if verdict is Verdict.PASS:
                    passed.append(turn)
                    continue
                heapq.heappop(group.keys[key])
                del group.turn_of[key]
                if verdict is Verdict.TAKE:
                    group.counter += 1
                    group.served[key] = group.counter
                if self._head(group, key, valid) is not None:
                    group.set_turn(key, group.keys[key][0])
                if verdict is Verdict.TAKE:
                    return job
            return None
        finally:
            for turn in passed:
                heapq.heappush(group.turns, turn)
            if not group.keys:
                del self.groups[(queue, name)]

    def _live(self, group: _Group, turn: _Turn, valid: Valid) -> Job | None:
        """The best job of ``turn``'s key when ``turn`` is the key's current turn, else
        ``None`` (a stale turn is dropped; one whose key's best job changed is
        re-queued with the right order)."""
        served, order, key = turn
        if group.turn_of.get(key) != (served, order):
            return None  # superseded by a later turn of the key
        job = self._head(group, key, valid)
        if job is None:
            return None
        head = group.keys[key][0]
        if head[:3] != order:
            group.set_turn(key, head)
            return None
        return job

    def order(self, name: str, valid: Valid, full: Callable[[Job], bool]) -> list[str]:
        """The keys of group ``name`` (every queue) with a claimable job, in the order the
        next claims serve them (:func:`~queue_core.rules.control.round_robin_order`)."""
        heads: dict[str, tuple[int, ReadyEntry]] = {}
        for (_, group_name), group in list(self.groups.items()):
            if group_name != name:
                continue
            for key in list(group.keys):
                job = self._head(group, key, valid)
                if job is None or full(job):
                    continue
                mine = (group.served.get(key, 0), group.keys[key][0])
                if key not in heads or mine[1][:3] < heads[key][1][:3]:
                    heads[key] = mine
        ranked = sorted(heads, key=lambda k: heads[k][1][:3])
        return round_robin_order({k: (heads[k][0], ranked.index(k)) for k in heads})
