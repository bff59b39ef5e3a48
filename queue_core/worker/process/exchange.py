"""One process-isolated attempt's wait for its child: the answer, heartbeats and progress
reports, exit, cancel.

The event-loop path of :meth:`ProcessPool.run <queue_core.worker.process.pool.ProcessPool.run>`.
The wait first reads the child's pipe alone for one cancel-poll period
(:meth:`Exchange._fast`): a no-op body answers within a pipe round trip, and the task group
of the full wait (answer reader, exit watcher, cancel poller) would cost more than that
round trip. A body that runs longer gets the full wait.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

import anyio

from queue_core.worker.process.children import SIDE_FRAMES, Child, pass_on
from queue_core.worker.process.deadline import BodyStart, Deadline
from queue_core.worker.process.results import ProcessOutcome

__all__ = ["Exchange"]

_CANCEL_POLL = 0.05
"""Seconds between two reads of the attempt's ``cancelled()``."""


class Exchange:
    """One attempt's wait for the child: its answer, heartbeats and progress reports (each
    passed on to its callback, on the event loop), exit, cancellation."""

    def __init__(
        self,
        child: Child,
        heartbeat: Callable[[], object] | None,
        cancelled: Callable[[], bool] | None,
        *,
        progress: Callable[[float, str | None], object] | None = None,
        timeout: float | None = None,
        started: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
        body_start: BodyStart | None = None,
    ) -> None:
        self.child = child
        self.heartbeat = heartbeat
        self.progress = progress
        self.cancelled = cancelled
        self.monotonic = monotonic
        self.deadline = Deadline(timeout, started, body_start)
        """When the attempt times out (``started``: when its request was sent)."""
        self.answer: Any = None
        self.why_stopped: ProcessOutcome | None = None
        self.failure: Exception | None = None
        """Raised by a callback: ends the attempt."""
        self.at_deadline = False
        """:meth:`first_wait` ended at the attempt's deadline, unanswered."""
        self._waited = False
        self._scope: anyio.CancelScope | None = None
        """The deadline's scope while :meth:`run_to_deadline` waits."""

    def left(self) -> float | None:
        """Seconds until the deadline (``0.0`` once reached); ``None`` without one."""
        end = self.deadline.end
        return None if end is None else max(0.0, end - self.monotonic())

    async def first_wait(self) -> bool:
        """On asyncio, the fast wait (:meth:`_fast_asyncio`) before any deadline scope is
        entered, bounded by the deadline itself: ``True`` when the attempt is settled (an
        answer, the pipe closed, a failing callback, or the deadline reached: then
        :attr:`at_deadline`). ``False`` when the full wait (:meth:`run`, inside the
        deadline's scope) must follow; on other loops at once."""
        cancelled = self.cancelled
        if cancelled is not None and cancelled():
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio): run() waits fast itself
            return False
        self._waited = True
        left = self.left()
        if left is None or left > _CANCEL_POLL:
            return await self._fast_asyncio(loop, _CANCEL_POLL)
        if await self._fast_asyncio(loop, left):
            return True
        if self.left():
            return False  # a late start moved the deadline: the full wait follows
        self.at_deadline = True
        return True

    async def run_to_deadline(self) -> bool:
        """:meth:`run` until the deadline, which the child's start frames move while it
        waits; ``True`` when the deadline ended it."""
        with anyio.CancelScope() as scope:
            self._scope = scope
            self._move()
            await self.run()
        self._scope = None
        return scope.cancelled_caught

    def _went(self, message: Any) -> bool:
        """Whether ``message`` is a start frame of the child's (the deadline moves)."""
        if not self.deadline.note(message):
            return False
        self._move()
        return True

    def _move(self) -> None:
        scope, left = self._scope, self.left()
        if scope is not None:
            scope.deadline = math.inf if left is None else anyio.current_time() + left

    async def run(self) -> None:
        if not self._waited and await self._fast():
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._read_answer, tg.cancel_scope)
            if self.child.pidfd is not None:
                tg.start_soon(self._watch_exit, tg.cancel_scope)
            if self.cancelled is not None:
                tg.start_soon(self._watch_cancel, tg.cancel_scope)

    async def _fast(self) -> bool:
        """Wait for the answer alone, for one cancel-poll period; ``True`` when it came.

        Most attempts end here, without the task group of the full wait below (its tasks
        cost more than a no-op body's round trip). Nothing is lost meanwhile: a child
        that dies closes its pipe (so the wait ends at once), unless a forked grandchild
        holds the pipe open, and cancellation is polled every period anyway; after one
        period the full wait takes over and sees both at once.
        """
        cancelled = self.cancelled
        if cancelled is not None and cancelled():
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio): the portable wait below
            pass
        else:
            return await self._fast_asyncio(loop, _CANCEL_POLL)
        with anyio.move_on_after(_CANCEL_POLL):
            while True:
                message = await self.child.recv()
                if message is None:
                    return True  # the pipe closed: the child is gone
                if self._went(message):
                    continue
                if message[0] not in SIDE_FRAMES:
                    self.answer = message
                    return True
                if not self._side(message):
                    return True
        return False

    async def _fast_asyncio(self, loop: asyncio.AbstractEventLoop, within: float) -> bool:
        """:meth:`_fast` on asyncio's own reader and timer, for ``within`` seconds: the
        same wait, with a fraction of the calls that anyio's portable ``wait_readable``
        and cancel scope make. The pipe is read only once the loop says it is readable
        (one ``read`` per answer, none that ends in EAGAIN)."""
        child = self.child
        end = loop.time() + within
        while True:
            got, message = child.take()
            if got:
                if message is None:
                    return True  # the pipe closed: the child is gone
                if self._went(message):
                    continue
                if message[0] not in SIDE_FRAMES:
                    self.answer = message
                    return True
                if not self._side(message):
                    return True
                continue
            left = end - loop.time()
            if left <= 0 or not await _readable(loop, child.rfd, left):
                return False
            child.read_once()

    def _side(self, message: Any) -> bool:
        """Deliver one heartbeat or progress report (:func:`pass_on`); ``False`` when the
        callback raised (the attempt ends)."""
        try:
            pass_on(message, self.heartbeat, self.progress)
        except Exception as exc:
            self.failure = exc
            return False
        return True

    async def _read_answer(self, scope: anyio.CancelScope) -> None:
        while True:
            message = await self.child.recv()
            if message is None:
                break
            if self._went(message):
                continue
            if message[0] not in SIDE_FRAMES:
                self.answer = message
                break
            if not self._side(message):
                break
        scope.cancel()

    async def _watch_exit(self, scope: anyio.CancelScope) -> None:
        # A forked grandchild may hold the pipe open; the leader's exit decides.
        await self.child.wait_exit()
        scope.cancel()

    async def _watch_cancel(self, scope: anyio.CancelScope) -> None:
        cancelled = self.cancelled
        assert cancelled is not None
        try:
            while not cancelled():  # noqa: ASYNC110 - a plain callable, polled
                await anyio.sleep(_CANCEL_POLL)
        except Exception as exc:
            self.failure = exc
        else:
            self.why_stopped = ProcessOutcome.CANCELLED
        scope.cancel()


async def _readable(loop: asyncio.AbstractEventLoop, fd: int, within: float) -> bool:
    """Wait until ``fd`` is readable (``True``) or ``within`` seconds pass (``False``).

    A cancellation of the calling task (a cancel scope around it) ends the wait too.
    """
    done: asyncio.Future[bool] = loop.create_future()

    def settle(value: bool) -> None:
        if not done.done():
            done.set_result(value)

    loop.add_reader(fd, settle, True)
    timer = loop.call_later(within, settle, False)
    try:
        return await done
    finally:
        loop.remove_reader(fd)
        timer.cancel()
