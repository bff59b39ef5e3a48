"""Pauses of the SQL backend (``SupportsPause``): what is paused, cached for the claims.

``qc_pauses`` (schema version 11) holds the pauses; ``qc_meta`` key ``pauses_version``
counts their changes. Each storage object keeps the pauses it last read
(:class:`PauseSet`) with their version, and re-reads them at most every :data:`CHECK_S`
seconds of its own monotonic clock, at once after its own ``pause`` / ``resume``, and
when an idle worker's wait is woken by a commit (:mod:`backends.sql.wakeup`). The claim
statements compare the stored version with the one their queue list was made with (an
uncorrelated subquery, read once per statement): after a pause or resume elsewhere a
claim takes nothing, the pauses are read again and the claim is made again
(:meth:`Pauses.stale`), so no claim hands out a job paused before it began. While
nothing is paused (:meth:`Pauses.current` is ``None``) claims are the statements they
were, with that one comparison.

* A paused queue leaves the claim's queue list before the claim runs: its jobs are
  never read.
* A paused task's or flow's queued jobs are set aside (schema version 14): their
  ``qc_jobs.held`` names the pause (``<kind>:<name>``), which takes them out of the
  claim's index (``ix_qc_jobs_ready``), so that no claim reads past them however many
  there are. :meth:`Pauses.pause` sets aside those queued then (one ``UPDATE``); a job
  stored later (an enqueue, a flow step released, a retry) is set aside by the first
  claim that meets it: while a task or a flow is paused, claims take the keyed path
  (:mod:`backends.sql.claiming`), whose ``select_ready`` reads ``paused_field`` (the SQL
  form of :func:`queue_core.rules.control.paused` for task and flow pauses) and
  :meth:`Pauses.hold` sets the matching rows aside instead of claiming them. A job set
  aside stays ``queued`` (listing, stats, cancel, debounce see it as before) and keeps
  its place: :meth:`Pauses.resume` clears ``held`` for its pause (``ix_qc_jobs_held``)
  in the transaction that removes the pause. :meth:`Pauses.hold` first locks the pause's
  row (``pause_lock``, ``FOR SHARE`` on PostgreSQL; SQLite's write lock serializes), so a
  claim that read the pauses before a resume sets nothing aside after the resume's sweep.
  A job that another pause still matches when one resume puts it back is set aside again
  by the next claim that meets it. ``count_pending`` and the wake-up's ready probe leave
  out the jobs set aside (the index) and those not yet set aside (``unpaused_filter``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from backends.sql.store import Store
from queue_core.records.control import Pause, PauseKind
from queue_core.records.jobs import dt_from_ms
from queue_core.rules.control import pause_kind

__all__ = ["CHECK_S", "PauseSet", "Pauses"]

CHECK_S = 0.5
"""How often (seconds) a storage object re-reads the pauses' version."""


@dataclass(frozen=True, slots=True)
class PauseSet:
    """The stored pauses as the claims use them (never empty)."""

    queues: frozenset[str]
    tasks: tuple[str, ...]
    flows: tuple[str, ...]

    @property
    def jobs(self) -> bool:
        """A task or a flow is paused: claims filter their candidates."""
        return bool(self.tasks or self.flows)

    def params(self, store: Store) -> dict[str, Any]:
        """The parameters of ``unpaused_filter``."""
        return {"paused_tasks": store.array(self.tasks), "paused_flows": store.array(self.flows)}


class Pauses:
    """:class:`~queue_core.storage.control.SupportsPause` on ``store``, and the cached
    pauses every claim asks for (:meth:`current`)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._next_check = 0.0
        self._version: str | None = None
        self._read = False
        self._set: PauseSet | None = None

    def pause(self, kind: PauseKind, name: str, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.control.SupportsPause.pause`."""
        kind = pause_kind(kind)
        params = {"kind": kind.value, "name": name, "now": self.store.now(now)}
        with self.store.tx() as cur:
            added = cur.execute(self.store.q["pause_add"], params).fetchone() is not None
            if added:
                cur.execute(self.store.q["pauses_changed"], {})
                if kind is not PauseKind.QUEUE:  # its queued jobs leave the ready index
                    statement = "hold_task" if kind is PauseKind.TASK else "hold_flow"
                    cur.execute(
                        self.store.q[statement], {"field": _field(kind, name), "name": name}
                    )
        self._next_check = 0.0
        return added

    def resume(self, kind: PauseKind, name: str) -> bool:
        """See :meth:`queue_core.storage.control.SupportsPause.resume`."""
        kind = pause_kind(kind)
        params = {"kind": kind.value, "name": name}
        with self.store.tx() as cur:
            removed = cur.execute(self.store.q["pause_remove"], params).fetchone() is not None
            if removed:
                cur.execute(self.store.q["pauses_changed"], {})
                if kind is not PauseKind.QUEUE:  # the jobs set aside go back, in place
                    cur.execute(self.store.q["unhold"], {"field": _field(kind, name)})
                self.store.notify(cur)  # the paused jobs are claimable again
        self._next_check = 0.0
        return removed

    def hold(self, cur: Any, met: dict[str, list[int]]) -> list[int]:
        """In a claim's transaction: set aside the queued jobs (``seq``) that a claim met,
        by the pause (``paused_field``) each matched. Those of a pause resumed meanwhile
        stay where they are (the pause's row is locked first, see the module doc): their
        seqs are returned, for the claim to read past them."""
        q, left = self.store.q, []
        for field, seqs in met.items():
            kind, _, name = field.partition(":")
            if cur.execute(q["pause_lock"], {"kind": kind, "name": name}).fetchone() is None:
                left += seqs
                continue
            cur.execute(q["hold_met"], {"field": field, "seqs": self.store.array(seqs)})
        return left

    def list_paused(self) -> list[Pause]:
        """See :meth:`queue_core.storage.control.SupportsPause.list_paused`."""
        return [
            Pause(kind=PauseKind(r["kind"]), name=r["name"], since=_at(r["since"]))
            for r in self.store.fetch("pauses_list", {})
        ]

    def current(self, *, fresh: bool = False) -> PauseSet | None:
        """The stored pauses (``None``: nothing is paused), at most :data:`CHECK_S`
        seconds old (fresh after this object's own pause or resume); ``fresh``: read now
        (an idle worker woken by a commit: the commit may be a pause)."""
        if fresh:
            self._next_check = 0.0
        clock = time.monotonic()
        if clock >= self._next_check:
            with self._lock:
                if clock >= self._next_check:
                    self._refresh()
                    self._next_check = clock + CHECK_S
        return self._set

    def snapshot(self) -> tuple[PauseSet | None, str | None]:
        """:meth:`current` and the version it was read at (``None``: never paused), for a
        claim that checks the version in its statement."""
        paused = self.current()
        return paused, self._version

    def stale(self) -> bool:
        """Read the version now: whether the pauses changed since they were last read
        (then they are read again)."""
        before = self._version
        self.current(fresh=True)
        return self._version != before

    def _refresh(self) -> None:
        rows = self.store.fetch("pauses_version", {})
        version = rows[0]["value"] if rows else None
        if version == self._version and self._read:
            return
        queues: set[str] = set()
        named: dict[str, list[str]] = {PauseKind.TASK.value: [], PauseKind.FLOW.value: []}
        for r in self.store.fetch("pauses_list", {}):
            if r["kind"] == PauseKind.QUEUE.value:
                queues.add(r["name"])
            else:
                named[r["kind"]].append(r["name"])
        tasks, flows = tuple(named[PauseKind.TASK.value]), tuple(named[PauseKind.FLOW.value])
        self._set = PauseSet(frozenset(queues), tasks, flows) if queues or tasks or flows else None
        self._version, self._read = version, True


def _field(kind: PauseKind, name: str) -> str:
    """What ``qc_jobs.held`` holds for a job set aside by the pause of ``kind`` and
    ``name`` (the form of ``paused_field``)."""
    return f"{kind.value}:{name}"


def _at(ms: Any) -> Any:
    at = dt_from_ms(int(ms))
    assert at is not None
    return at
