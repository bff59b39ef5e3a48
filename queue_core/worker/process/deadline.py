"""When a process-isolated attempt times out, counted from its body's start (SPEC §4: never
early), as the child's start frames tell it (:mod:`~queue_core.worker.process.child`)."""

from __future__ import annotations

from typing import Any

from queue_core.worker.process.child import LATE_START, PREP_BOUND

__all__ = ["START_FRAMES", "Deadline"]

START_FRAMES = frozenset({"prep", "go"})
"""The child's frames about its body's start: neither an answer nor a heartbeat."""


class Deadline:
    """One attempt's deadline on the parent's clock (``time.monotonic``, which the child's
    ``go`` frame shares).

    ``timeout`` after the request was sent (``sent_at``) and :data:`LATE_START`; held while
    the child imports the body's module (``prep``, up to :data:`PREP_BOUND` past it); then
    ``timeout`` after the body's start (``go``) when that is later.
    """

    __slots__ = ("go_at", "preparing", "sent_at", "timeout")

    def __init__(self, timeout: float | None, sent_at: float) -> None:
        self.timeout = timeout
        self.sent_at = sent_at
        self.go_at: float | None = None
        self.preparing = False

    @property
    def end(self) -> float | None:
        """When to stop the attempt; ``None`` without a timeout."""
        timeout = self.timeout
        if timeout is None:
            return None
        base = self.sent_at + timeout + LATE_START
        if self.go_at is not None:
            return max(base, self.go_at + timeout)
        return self.sent_at + timeout + PREP_BOUND if self.preparing else base

    def note(self, frame: Any) -> bool:
        """Take ``frame`` if it is a start frame (``True``); anything else is left."""
        kind = frame[0]
        if kind == "go":
            self.go_at = frame[1]
            return True
        if kind == "prep":
            self.preparing = True
            return True
        return False
