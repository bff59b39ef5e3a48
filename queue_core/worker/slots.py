"""Slot accounting: which attempts this worker runs, and how many more it may take.

A slot is held from claim until the body has really returned (or its process is gone).
An attempt whose outcome is already recorded but whose thread has not returned (a
timed-out ``isolation="thread"`` body) is *stuck*: it keeps its slot, and the worker may
open a replacement slot for it, up to ``max_replacements``, so one hung call cannot
starve the worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from queue_core.records.jobs import ClaimedJob, LeaseRef

if TYPE_CHECKING:
    import anyio

    from queue_core.app.context import JobContext
    from queue_core.app.task import Task

__all__ = ["Attempt", "SlotTable"]


class Attempt:
    """One attempt held by this worker."""

    __slots__ = (
        "job",
        "ref",
        "task",
        "ctx",
        "mode",
        "scope",
        "ended",
        "stuck",
        "released",
        "cancel_requested",
        "lease_lost",
        "deadline",
        "call",
        "claimed_at",
        "claim_began",
        "claim_took",
        "last_beat",
        "expired",
        "label",
    )

    def __init__(
        self, job: ClaimedJob, task: Task[Any, Any] | None, claim_began: float = 0.0
    ) -> None:
        self.job = job
        self.ref: LeaseRef = job.ref
        self.task = task
        self.ctx: JobContext | None = None
        self.mode = "thread"
        self.scope: anyio.CancelScope | None = None
        self.ended = False
        """The outcome is recorded (or must not be: lease lost)."""
        self.stuck = False
        self.released = False
        """Released at shutdown: recorded lost, its own outcome is dropped."""
        self.cancel_requested = False
        self.lease_lost = False
        self.deadline: float | None = None
        """Deadline on the worker clock's monotonic reading (watched by the worker)."""
        self.call: Any = None
        """Per-call overrides parsed from ``job.options``."""
        self.claimed_at = 0.0
        """The worker clock's monotonic reading when the claim returned."""
        self.claim_began = claim_began
        """For a job held ahead of a free slot: the system clock's monotonic reading
        (``Timing.pacing``) when the claim that returned it began -- before storage
        stamped ``job.started_at``, so the body's start by storage's clock is at most
        that stamp plus the time since. ``0.0``: started as it was claimed."""
        self.claim_took = 0.0
        """For a held job: how long that claim call took (s): the stamp is at least the
        call's start, at most its end, so the clock read from it may be this far ahead."""
        self.last_beat = 0.0
        """The worker clock's monotonic reading at the last heartbeat (or the claim)."""
        self.expired = False
        """Timed out by the worker for heartbeat silence: the body is being stopped."""
        self.label: str | None = None
        """What the log calls the attempt's task when not its name (a script step's
        ``<flow>.<step id>``)."""

    def stop_requested(self) -> bool:
        return self.cancel_requested or self.lease_lost or self.released or self.expired

    def stop(self) -> None:
        """Stop what can be stopped of the body: its ``ctx`` is cancelled, an async body's
        cancel scope too (a thread body sees ``ctx.cancelled``; a process attempt sees
        :meth:`stop_requested` within a cancel poll)."""
        if self.ctx is not None:
            self.ctx._cancel()
        if self.scope is not None:
            self.scope.cancel()


class SlotTable:
    """The attempts running in this worker and the free-slot count."""

    __slots__ = ("slots", "max_replacements", "running", "stuck")

    def __init__(self, slots: int, max_replacements: int) -> None:
        self.slots = slots
        self.max_replacements = max_replacements
        self.running: dict[LeaseRef, Attempt] = {}
        self.stuck = 0

    def free(self) -> int:
        """Slots free now: ``slots`` plus replacements for stuck ones, minus those held."""
        return self.slots + min(self.stuck, self.max_replacements) - len(self.running)

    def add(self, attempt: Attempt) -> None:
        self.running[attempt.ref] = attempt

    def mark_stuck(self, attempt: Attempt) -> None:
        if not attempt.stuck:
            attempt.stuck = True
            self.stuck += 1

    def remove(self, attempt: Attempt) -> None:
        if self.running.pop(attempt.ref, None) is not None and attempt.stuck:
            self.stuck -= 1

    def live(self) -> list[Attempt]:
        """Attempts whose outcome is not recorded yet (their leases need renewing)."""
        return [a for a in self.running.values() if not a.ended]

    def busy(self) -> int:
        """Attempts still running that are not stuck."""
        return len(self.running) - self.stuck
