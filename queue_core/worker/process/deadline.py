"""When a process-isolated attempt times out, counted from its body's start (SPEC §4: never
early), as the child's start frames tell it (:mod:`~queue_core.worker.process.child`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queue_core.worker.process.child import LATE_START, PREP_BOUND

__all__ = ["START_FRAMES", "BodyStart", "Deadline"]

BodyStart = Callable[[float | None], object]
"""Told when the body starts, as the attempt's deadline counts it: at the request's send
(``sent_at + LATE_START``), at a late start (``go``); ``None`` while the child imports the
body's module (``prep``: the start is not known yet). The worker moves its own watch of
the attempt -- its timeout and heartbeat silence -- with it, so that neither counts the
time a fresh child takes to start or to import (SPEC §4: never early)."""

START_FRAMES = frozenset({"prep", "go"})
"""The child's frames about its body's start: neither an answer nor a heartbeat."""


class Deadline:
    """One attempt's deadline on the parent's clock (``time.monotonic``, which the child's
    ``go`` frame shares).

    ``timeout`` after the request was sent (``sent_at``) and :data:`LATE_START`; held while
    the child imports the body's module (``prep``, up to :data:`PREP_BOUND` past it); then
    ``timeout`` after the body's start (``go``) when that is later.
    """

    __slots__ = ("body_start", "go_at", "preparing", "sent_at", "timeout")

    def __init__(
        self, timeout: float | None, sent_at: float, body_start: BodyStart | None = None
    ) -> None:
        self.timeout = timeout
        self.sent_at = sent_at
        self.go_at: float | None = None
        self.preparing = False
        self.body_start = body_start
        if body_start is not None:
            body_start(sent_at + LATE_START)

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
            if self.body_start is not None:
                self.body_start(max(self.sent_at + LATE_START, frame[1]))
            return True
        if kind == "prep":
            self.preparing = True
            if self.body_start is not None:
                self.body_start(None)
            return True
        return False
