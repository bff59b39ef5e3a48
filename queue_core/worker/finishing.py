"""The finisher: buffered attempt ends handed to the finish thread, which writes them.

The :class:`Finisher` (a task of the worker, on the event loop) hands each batch of ends
the recorder buffered (``RunState.ends``) over with :meth:`FinishThread.put` and does not
wait for the write; a batch of body-thread ends is handed over as its delivery ends
(:meth:`Finisher.delivery_ended`), without waking the task. The thread writes whatever has
been handed over since its last ``finish`` call, one call at a time (at most one in
flight, as before), and goes back to sleep only when nothing is left. A successful write
costs the event loop nothing: no wake-up to report it, no task step, no event; only a
failed one is reported (``on_failed``, on the loop), and then the thread holds the batch
(first in line) and writes nothing more until the finisher has backed off on the
worker's clock and called :meth:`FinishThread.resume`.

The same thread tells storage when the bodies of jobs held ahead of free slots start
(:meth:`FinishThread.put_starts`, ``start_claimed``), before it writes the ends handed
over after them: an attempt's start is stored before its end (:mod:`.prefetch`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from queue import SimpleQueue
from typing import Any

import anyio
import anyio.lowlevel

from queue_core.app.clock import Clock, SystemClock
from queue_core.records.errors import StorageError
from queue_core.records.jobs import AttemptEnd, LeaseRef
from queue_core.storage.abilities import SupportsPrefetch, SupportsStartWithFinish
from queue_core.storage.protocol import Storage
from queue_core.worker.log import log
from queue_core.worker.outage import Outage
from queue_core.worker.reaper import Backoff
from queue_core.worker.recording import Recorder
from queue_core.worker.state import RunState
from queue_core.worker.timing import Timing

__all__ = ["GATHER_ENDS", "GATHER_S", "START_WAIT_S", "FinishThread", "Finisher", "StartAndFinish"]

StartAndFinish = Callable[[list[tuple[LeaseRef, float]], list[AttemptEnd]], Sequence[bool]]
"""Tells held attempts' starts (each with the worker clock's monotonic reading then) and
writes ends, in one storage call: ``finish``'s result."""

GATHER_ENDS = 64
"""While ends stream in, the finish thread writes once this many wait ..."""
GATHER_S = 0.01
"""... or once it has waited this long (seconds) for them, whichever comes first."""

START_WAIT_S = 0.02
"""The longest the start of a held attempt waits for ends to be written with (seconds):
its stored start time, deadline and heartbeat bound are late by at most this."""

_FLUSH_WAIT_S = 0.05
"""The longest :meth:`Finisher.flush_all` waits for the thread's word before it looks
again (a write that failed and waits for its back-off sends none)."""


class FinishThread:
    """A daemon thread that writes attempt ends with ``finish``; see the module doc.

    ``on_written(batch, took)`` runs on this thread after each successful write;
    ``on_failed(exc)`` runs on the event loop after a write raised. With
    ``may_gather`` (called on this thread; ``False`` while the worker stops), ends that
    stream in let more of them gather before a write (:meth:`_gather`), for a few
    milliseconds of ``pacing`` (the system clock: a wait of this thread, see
    :mod:`queue_core.worker.timing`).
    """

    def __init__(
        self,
        finish: Callable[[list[AttemptEnd]], Sequence[bool]],
        on_written: Callable[[list[AttemptEnd], Sequence[bool]], None],
        on_failed: Callable[[BaseException], None],
        may_gather: Callable[[], bool] | None = None,
        pacing: Clock | None = None,
        start: Callable[[list[tuple[LeaseRef, float]]], object] | None = None,
        start_and_finish: StartAndFinish | None = None,
    ) -> None:
        self._token = anyio.lowlevel.current_token()
        self._start = start
        self._start_and_finish = start_and_finish
        self._starts: list[tuple[LeaseRef, float]] = []
        """Held attempts whose bodies started, for ``start`` before the next ends."""
        self._monotonic = (pacing if pacing is not None else SystemClock()).monotonic
        self._finish = finish
        self._on_written = on_written
        self._on_failed = on_failed
        self._lock = threading.Lock()
        self._pending: list[AttemptEnd] = []
        self._writing = 0
        """Ends in the ``finish`` call in flight (0: none)."""
        self._busy = False
        """The thread was woken (or is writing): ``put`` need not wake it."""
        self._held = False
        """A write failed: nothing is written until :meth:`resume`."""
        self._may_gather = may_gather
        self._enough = threading.Condition(self._lock)
        """Notified when ``GATHER_ENDS`` ends wait (or on :meth:`hurry`)."""
        self._hurries = 0
        """:meth:`hurry` calls so far (one ends the gather under way)."""
        self._idle_calls: list[Callable[[], None]] = []
        """Called on the event loop once nothing is left to write (:meth:`when_idle`)."""
        self._wrote_at = float("-inf")
        """When the last write ended (``pacing``'s monotonic): ends that follow it within
        ``GATHER_S`` are a stream worth gathering."""
        self._wake: SimpleQueue[bool] = SimpleQueue()
        self._thread = threading.Thread(target=self._main, name="queue-core finish", daemon=True)
        self._thread.start()

    def put(self, ends: list[AttemptEnd]) -> None:
        """Hand ``ends`` over to be written after those handed over before."""
        with self._lock:
            self._pending += ends
            if self._starts or len(self._pending) >= GATHER_ENDS or not self._gathering():
                self._enough.notify()
            if self._busy or self._held:
                return
            self._busy = True
        self._wake.put(True)

    def put_starts(self, starts: list[tuple[LeaseRef, float]]) -> None:
        """Have storage told that these held attempts' bodies started (each with the
        worker clock's monotonic reading then): with the next ends written (before them),
        or after :data:`START_WAIT_S` when none come sooner."""
        with self._lock:
            self._starts += starts
            if self._busy or self._held:
                return
            self._busy = True
        self._wake.put(True)

    def resume(self) -> None:
        """After a failed write (and the caller's back-off): write again."""
        with self._lock:
            self._held = False
            if self._busy or not (self._pending or self._starts):
                return
            self._busy = True
        self._wake.put(True)

    def unwritten(self) -> int:
        """Ends handed over and not written yet (in flight included)."""
        with self._lock:
            return len(self._pending) + self._writing

    def _main(self) -> None:
        soon, native = self._token.backend_class.run_sync_soon, self._token.native_token
        while self._wake.get():
            idle: list[Callable[[], None]] = []
            while True:
                self._gather()
                self._await_ends()
                with self._lock:
                    batch, self._pending = self._pending, []
                    starts, self._starts = self._starts, []
                    self._writing = len(batch)
                    if not batch and not starts:
                        self._busy = False
                        idle, self._idle_calls = self._idle_calls, []
                        break
                try:
                    took = self._write(starts, batch)
                    starts = []
                    if not batch:
                        continue
                except BaseException as exc:  # noqa: BLE001 - reported to the loop
                    with self._lock:
                        self._pending[:0] = batch
                        self._starts[:0] = starts
                        self._writing = 0
                        self._held = True
                        self._busy = False
                    try:
                        soon(self._on_failed, (exc,), native)
                    except Exception:  # noqa: BLE001 - the loop is gone: nobody to tell
                        return
                    with self._lock:
                        idle, self._idle_calls = self._idle_calls, []
                    break
                with self._lock:
                    self._writing = 0
                self._wrote_at = self._monotonic()
                try:
                    self._on_written(batch, took)
                except Exception:  # noqa: BLE001 - a report must not stop the writes
                    log.exception("reporting %d written attempt ends failed", len(batch))
            for call in idle:
                try:
                    soon(call, (), native)
                except Exception:  # noqa: BLE001 - the loop is gone: nobody waits
                    return

    def _write(
        self, starts: list[tuple[LeaseRef, float]], batch: list[AttemptEnd]
    ) -> Sequence[bool]:
        """Tell ``starts``, then write ``batch``: in one call where storage can. Starts
        told in a call of their own are taken out of ``starts`` at once, so that a
        ``finish`` failing after them does not have them told again."""
        if starts and batch and self._start_and_finish is not None:
            return self._start_and_finish(starts, batch)
        if starts and self._start is not None:
            self._start(starts)
            starts.clear()
        return self._finish(batch) if batch else ()

    def _await_ends(self) -> None:
        """Starts to tell and no end to write: wait up to :data:`START_WAIT_S` for ends,
        to tell the starts with them (one storage call less)."""
        with self._lock:
            if self._starts and not self._pending and self._may_gather is not None:
                self._enough.wait_for(lambda: bool(self._pending), START_WAIT_S)

    def _gather(self) -> None:
        """While ends stream in (the last write ended less than ``GATHER_S`` ago) and
        ``may_gather()``: let them gather for one write, up to ``GATHER_ENDS`` of them,
        waiting at most ``GATHER_S`` (real time: I/O pacing, as the claim loop's
        poll, not service timing). Each ``finish`` call has a fixed cost (a round trip
        and a commit; the thread's, the driver's and the server's work per statement):
        a draining worker wrote ~10 ends a call, now ~60. A lone end (after a quiet
        spell) is written at once, and so is what was handed over once ``may_gather()``
        turns false (the queue is not backed up, or the worker stops)."""
        if self._monotonic() - self._wrote_at > GATHER_S or not self._gathering():
            return
        with self._lock:
            seen = self._hurries
            self._enough.wait_for(self._gathered(seen), GATHER_S)

    def _gathered(self, hurries: int) -> Callable[[], bool]:
        """Whether a gather that began after ``hurries`` hurries is over (under the lock)."""

        def over() -> bool:
            return (
                len(self._pending) >= GATHER_ENDS
                or self._hurries != hurries
                or not self._gathering()  # no more ends are coming, or closed
            )

        return over

    def _gathering(self) -> bool:
        """Ends may wait for more: ``may_gather()`` (not closed)."""
        may = self._may_gather
        return may is not None and may()

    def when_idle(self, call: Callable[[], None]) -> bool:
        """Have ``call`` run on the event loop once the thread has nothing left to write
        (or a write failed); ``False``, and not kept, when the thread is not writing nor
        about to. Only a waiter costs the loop a wake-up: a write alone does not."""
        with self._lock:
            if not self._busy:
                return False
            self._idle_calls.append(call)
            return True

    def hurry(self) -> None:
        """End a gather under way: write what waits now (someone waits for it)."""
        with self._lock:
            self._hurries += 1
            self._enough.notify()

    def close(self) -> None:
        self._may_gather = None
        self.hurry()
        self._wake.put(False)


class Finisher:
    """Hands the ends the recorder buffered to its :class:`FinishThread`; backs off after
    a failed write on the worker's clock, then lets the thread write again.

    Made on the run's event loop (the thread reports failures to it).
    """

    def __init__(
        self,
        run: RunState,
        storage: Storage,
        recorder: Recorder,
        timing: Timing,
        outage: Outage,
        backoff: Backoff,
    ) -> None:
        self.run = run
        self.recorder = recorder
        self.timing = timing
        self.outage = outage
        self.backoff = backoff
        """Per worker: one worker's outage is not another's."""
        self.failed: BaseException | None = None
        """The finish thread's last failed write, not yet handled by :meth:`hand_over`."""
        self.writes = 0
        """Batches of ends written so far (a flow step's end may have released a job)."""
        self._storage = storage
        self.io = FinishThread(
            storage.finish,
            self._written,
            self._failed_soon,
            may_gather=self.may_gather,
            pacing=timing.pacing,
            start=self._start if isinstance(storage, SupportsPrefetch) else None,
            start_and_finish=(
                self._start_and_finish if isinstance(storage, SupportsStartWithFinish) else None
            ),
        )

    def may_gather(self) -> bool:
        """On the finish thread (and the loop, as ends are handed over): ends may wait to
        be written with more while the queue is backed up (the last claim took all it
        asked for, so more ends are coming soon), not while the worker stops. Otherwise
        what was handed over is all there is for now: a flow step or a job whose
        successor its end releases must not wait for ends that will not come."""
        return self.run.backlog and not self.run.stopping

    async def hand_over(self) -> None:
        """The finisher task: hand buffered ends over as they come; after a failed write,
        back off on the worker's clock and let the thread write again."""
        run = self.run
        while True:
            failed = self.failed
            if failed is not None:
                self.failed = None
                if not isinstance(failed, StorageError):
                    raise failed
                if not self.outage.failed("finish", failed):
                    log.warning(
                        "finish of %d attempt ends failed (%s); will retry",
                        self.io.unwritten(),
                        failed,
                    )
                await self.timing.sleep(self.backoff.next())
                self.io.resume()
                continue
            if not run.ends:
                run.flush_wake = run.new_event()
                await run.flush_wake.wait()
                continue
            batch, run.ends = run.ends, []
            self.io.put(batch)

    def delivery_begins(self) -> None:
        """On the loop, before a batch of body-thread ends is recorded."""
        self.run.delivering = True

    def delivery_ended(self) -> None:
        """On the loop, after it: hand what was recorded to the finish thread at once
        (in order after every end handed over before), instead of waking the finisher
        task for it: one task step less per batch."""
        run = self.run
        run.delivering = False
        if run.ends:
            batch, run.ends = run.ends, []
            self.io.put(batch)

    def _start(self, starts: list[tuple[LeaseRef, float]]) -> None:
        """On the finish thread: tell storage when the bodies of held attempts started,
        as how long ago on the worker's clock (``SupportsPrefetch.start_claimed``)."""
        storage: Any = self._storage
        storage.start_claimed(*self._ago(starts))

    def _start_and_finish(
        self, starts: list[tuple[LeaseRef, float]], ends: list[AttemptEnd]
    ) -> Sequence[bool]:
        """On the finish thread: :meth:`_start` and write ``ends`` in one call
        (``SupportsStartWithFinish``)."""
        storage: Any = self._storage
        took: Sequence[bool] = storage.start_and_finish(*self._ago(starts), ends)
        return took

    def _ago(self, starts: list[tuple[LeaseRef, float]]) -> tuple[list[LeaseRef], list[int]]:
        """``starts`` as refs and how long ago (ms, on the worker's clock) each began."""
        now = self.timing.monotonic()
        return [ref for ref, _ in starts], [max(0, round((now - at) * 1000)) for _, at in starts]

    def _failed_soon(self, exc: BaseException) -> None:
        """On the loop: the finish thread's write raised (it holds the batch)."""
        self.failed = exc
        self.run.flush_wake.set()

    def _written(self, batch: list[AttemptEnd], took: Sequence[bool]) -> None:
        """On the finish thread: a batch was written."""
        self.writes += 1
        self.backoff.reset()
        self.outage.ok()
        self.recorder.log_written(batch, took)
        for end, ok in zip(batch, took, strict=False):
            if not ok:
                log.info(
                    "attempt %d of job %s was no longer current; its %s end was refused",
                    end.ref.attempt,
                    end.ref.job_id,
                    end.outcome,
                )

    def unwritten(self) -> int:
        """Ends handed over and not written yet (in flight included)."""
        return self.io.unwritten()

    async def flush_all(self) -> None:
        """Wait until every buffered end is written (handed over by :meth:`hand_over`).
        Woken by the finish thread once it has nothing left to
        write (:meth:`FinishThread.when_idle`), not by polling: a burst worker's next claim
        follows the write that released its next job at once."""
        run = self.run
        while run.ends or self.io.unwritten():
            if run.ends:
                run.flush_wake.set()
                await anyio.lowlevel.checkpoint()  # the finisher task hands them over
            self.io.hurry()
            written = anyio.Event()
            if self.io.when_idle(written.set):
                with anyio.move_on_after(_FLUSH_WAIT_S):
                    await written.wait()
            elif run.ends or self.io.unwritten():
                await anyio.sleep(0.001)  # held after a failed write, or not handed over yet

    def close(self) -> None:
        """After the run (every end written, see :meth:`flush_all`): let the thread end."""
        self.io.close()
