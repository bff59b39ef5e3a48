"""Records of durable workflows (SPEC §12) that cross the storage protocol.

A workflow execution is a flow execution (:mod:`queue_core.records.flows`) whose one
declared step, the *function step* (index 0), runs the workflow function; its children
are steps added at run time. What the function has done is kept as *memos*, one
key/value family per execution:

==============  ===================================================================
memo key        value
==============  ===================================================================
``s:<id>``      the result of ``ctx.step(id, ...)`` (the queue's serializer)
``t:<n>``       the wake time of the n-th sleep (epoch ms, JSON)
``e:<n>``       the n-th event wait: ``{"name", "key", "since", "until"}`` (JSON)
``d:<n>``       the ``data`` of the event delivered to the n-th wait (the queue's
                serializer), written by storage at delivery
``c:<n>``       the step index of the n-th child (``ctx.run`` / ``ctx.run_flow``, JSON)
==============  ===================================================================

When the function stops to sleep or wait, its attempt ends with outcome ``suspended``
and a :class:`Suspension`, carried by a :class:`SuspendedEnd` to ``Storage.finish``,
which applies it atomically with the attempt's end (see
:class:`~queue_core.storage.abilities.SupportsWorkflows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from queue_core.records.base import Record, _MappingMixin
from queue_core.records.jobs import AttemptEnd, NewJob

__all__ = [
    "FUNCTION_STEP",
    "PARKED_AT",
    "EventWait",
    "HistoryEntry",
    "MemoPut",
    "MemoRecord",
    "NewChild",
    "StoredEvent",
    "SuspendedEnd",
    "Suspension",
]

PARKED_AT: Final = 2**62
"""The ready time (epoch ms) of a *parked* job: one no claim reaches, until a wake-up (an
event, the last awaited child's end) moves it to ``now``. Storage keeps it as any ready
time; only its size makes it "never"."""

FUNCTION_STEP: Final = "main"
"""The step id of a workflow's function step (index 0 of its execution)."""


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class MemoPut(Record):
    """One memo to store (insert, or replace the value of an existing key)."""

    key: str
    value: bytes


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class MemoRecord(Record):
    """One stored memo of an execution."""

    key: str
    value: bytes
    seq: int
    """Its place among the execution's memos: storage gives a new key the execution's
    next number (1, 2, ...); replacing a value keeps the number. ``replay(step_id)``
    drops a step's memo and every memo numbered after it."""
    at: int
    """Epoch ms of the last write."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class EventWait(Record):
    """An event wait to register: ``send_event(name, key)`` delivers to it."""

    memo_key: str
    """Where storage writes the delivered event's data (``d:<n>``)."""
    name: str
    key: str | None
    """``None`` matches an event of ``name`` with any key (or none)."""
    since: int
    """Epoch ms the wait began: events sent at or after it are delivered."""
    until: int | None
    """Epoch ms the wait times out (events sent at or after it are not delivered);
    ``None``: never."""


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class NewChild(Record):
    """A child job to add as step ``idx`` of a workflow execution (``ctx.run``)."""

    idx: int
    step_id: str
    """``<task name>#<n>``: unique in the execution, never a declared step's id (``#``)."""
    job: NewJob
    """Its job: id ``step_job_id(execution, idx)``, ``execution_id``/``step_id`` set,
    ``flow_deadline_at`` the execution's deadline; enqueued ready now."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Suspension(Record):
    """What a suspended attempt of a function step leaves for storage to apply."""

    ready_at: int | None
    """When the function job is ready again by itself: a sleep's wake time or an event
    wait's timeout (epoch ms); ``None``: only a wake-up readies it (:data:`PARKED_AT`)."""
    memos: tuple[MemoPut, ...] = ()
    """Memos to store (a sleep's wake time, an event wait's start, the children's indexes)."""
    children: tuple[NewChild, ...] = ()
    """Child jobs to add, in index order (each its step and its job, queued now)."""
    awaiting: tuple[int, ...] = ()
    """Step indexes the function waits for: it is ready again once every one of them
    has finished (at once when they all have)."""
    wait: EventWait | None = None
    """The event wait to register (at once delivered when a stored event matches)."""
    reason: str = "sleep"
    """The attempt's reason: ``sleep``, ``event`` or ``children``."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class SuspendedEnd(AttemptEnd):
    """An attempt end with outcome ``suspended`` (SPEC §5, §12) and its :attr:`suspension`.

    Its decision is ``RETRY`` with ``spends_attempt=False``: ``finish`` queues the job again
    (raising ``max_attempts`` by one, as for any such decision) and then applies the
    suspension through the execution's plan in the same atomic step. A storage without
    :class:`~queue_core.storage.abilities.SupportsWorkflows` never receives one.
    """

    suspension: Suspension


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class StoredEvent(Record):
    """An event ``send_event`` stored (kept for retention, for waits that began before it
    but whose suspension is stored after it)."""

    name: str
    key: str | None
    data: bytes
    at: int
    """Epoch ms it was sent (the storage's clock)."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=True)
class HistoryEntry(_MappingMixin):
    """One thing a workflow's function did, in the order it did them
    (``ExecutionHandle.history()``; ``queue-core flow show`` and the dashboard show them
    in the timeline). JSON uses these names."""

    kind: str
    """``step`` (a ``ctx.step``), ``sleep``, ``wait`` (``ctx.wait_for_event``) or ``child``
    (``ctx.run`` / ``ctx.run_flow``)."""
    name: str
    """The step id, ``sleep #1``, the event name, or the child's step id."""
    state: str
    """``done`` (a step); ``sleeping`` / ``slept``; ``waiting`` / ``received`` /
    ``timed_out``; a child's step state."""
    started_at: datetime | None
    """When the sleep or wait began, or the child was added; ``None`` for a step (only
    its end is stored)."""
    ended_at: datetime | None
    """When the step's result was stored, the event received, the wait timed out, the
    sleep ended or the child finished; ``None`` while it goes on."""
    until: datetime | None = None
    """A sleep's wake time, a wait's timeout."""
    key: str | None = None
    """A wait's event key."""
