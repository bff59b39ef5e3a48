"""The data a running worker's parts share: slots, buffered ends, queued heartbeats, the
stop request, and the events that wake the tasks waiting for them.

Data, not a base class: every part of the worker (see :mod:`queue_core.worker`) is given
this object and reads or changes the fields it needs. Its few methods only keep fields
consistent that change together (freeing a slot, asking to stop, buffering an end).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio

from queue_core.records.jobs import AttemptEnd, LeaseRef
from queue_core.worker.prefetch import Held
from queue_core.worker.slots import Attempt, SlotTable
from queue_core.worker.threads import event_class

__all__ = ["RunState"]


class RunState:
    """What the claim loop, the runner, the recorder and the services share."""

    __slots__ = (
        "table",
        "held",
        "ends",
        "heartbeats",
        "stop",
        "stopping",
        "processed",
        "backlog",
        "delivering",
        "new_event",
        "flush_wake",
        "slot_wake",
        "hb_wake",
    )

    def __init__(self, slots: int, max_replacements: int, prefetch: int = 0) -> None:
        self.table = SlotTable(slots, max_replacements)
        self.held = Held(prefetch)
        """Jobs claimed ahead of free slots (:mod:`~queue_core.worker.prefetch`)."""
        self.ends: list[AttemptEnd] = []
        """Attempt ends recorded and not yet handed to the finish thread."""
        self.heartbeats: dict[LeaseRef, Attempt] = {}
        """Heartbeats of async bodies and process children, for the heartbeat writer."""
        self.stop = threading.Event()
        """Asked to stop (``Worker.stop()``, from any thread, or a signal)."""
        self.stopping = False
        """The stop was seen on the loop: the claim loop ends, ends are no longer gathered."""
        self.processed = 0
        """Attempts whose slot was freed, but for those released for retry (counted by the
        recorder when released: a body may still return after)."""
        self.backlog = False
        """The last claim took as many jobs as it asked for: more are waiting, so more ends
        are coming soon (the finish thread may gather them)."""
        self.delivering = False
        """Body-thread ends are being recorded on the loop: the delivery hands the ends
        over to the finish thread when done, so recording one does not wake the finisher."""
        self.new_event: Callable[[], anyio.Event] = anyio.Event
        """Makes an ``anyio.Event`` of the running backend (see ``threads.event_class``)."""
        self.flush_wake = anyio.Event()
        """Wakes the finisher (ends to hand over, or a failed write)."""
        self.slot_wake = anyio.Event()
        """Wakes the claim loop and the shutdown (a slot freed, a stop asked)."""
        self.hb_wake = anyio.Event()
        """Wakes the heartbeat writer."""

    def on_loop(self) -> None:
        """At the start of a run, on its event loop: the events of that loop."""
        self.new_event = event_class()
        self.flush_wake = self.new_event()
        self.slot_wake = self.new_event()
        self.hb_wake = anyio.Event()

    def put_end(self, end: AttemptEnd) -> None:
        """Buffer ``end`` for the finisher (woken unless a delivery hands it over)."""
        self.ends.append(end)
        if not self.delivering:
            self.flush_wake.set()

    def free(self, att: Attempt) -> None:
        """``att``'s body is really done: its slot is free."""
        self.table.remove(att)
        if self.heartbeats:  # hashing a LeaseRef is a Python call: skip it when empty
            self.heartbeats.pop(att.ref, None)
        if not att.released:
            self.processed += 1
        self.slot_wake.set()

    def request_stop(self) -> None:
        """On the loop: stop claiming, let the shutdown begin."""
        self.stopping = True
        self.stop.set()
        self.slot_wake.set()
