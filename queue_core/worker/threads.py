"""Thread plumbing of the worker: body threads and dedicated storage-call threads.

Storage is synchronous and sync bodies block, so both run off the event loop. Each
hands its result back to the loop with one ``run_sync_soon`` (no ``to_thread`` hop, no
task per job).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from queue import SimpleQueue
from typing import Any

import anyio
import anyio.lowlevel

from queue_core.worker.slots import Attempt

__all__ = ["BodyThreads", "StorageThread", "body_call", "event_class"]

log = logging.getLogger("queue_core.worker")


def event_class() -> Callable[[], anyio.Event]:
    """The running async backend's own ``Event`` class (call it on the loop).

    ``anyio.Event()`` asks ``sniffio`` which library runs the loop on every call; the
    class it returns makes the same events without asking (the worker makes a few per
    claim and per finish).
    """
    return type(anyio.Event())


def body_call(
    dumps: Callable[[Any], bytes],
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Callable[[], bytes]:
    """The call a body thread makes: the body, then its result serialized."""
    return lambda: dumps(func(*args, **kwargs))


class BodyThreads:
    """Daemon threads that run sync bodies; each end is handed back to the event loop.

    Daemon threads, so a body that never returns cannot keep the process alive after
    the worker has shut down (it was recorded and released already). Completions are
    scheduled on the loop without a round trip (``run_sync_soon``), coalesced: ends that
    arrive while a delivery is pending ride along with it, so a burst of short bodies
    wakes the loop once. No task or thread is created per job.

    Submitted calls wait in one FIFO. A thread that has run a body takes the next
    waiting call itself, without sleeping; a sleeping thread is woken only when no
    thread is awake to take a waiting call (*searching*). A thread that takes a call
    while more wait wakes (or starts) another searcher before it runs its body, so a
    waiting call never sits behind a body that blocks: every call starts at once on a
    free thread, as with one wake-up per call, but a burst of short bodies costs one or
    two thread wake-ups instead of one per body.
    """

    def __init__(
        self,
        on_done: Callable[[Attempt, bool, Any], None],
        on_delivery: tuple[Callable[[], None], Callable[[], None]] | None = None,
    ) -> None:
        """``on_done(att, ok, value)`` runs on the loop for each end; ``on_delivery``,
        ``(begin, end)``, around each batch of them (one loop wake-up's worth)."""
        self._token = anyio.lowlevel.current_token()
        self._on_done = on_done
        self._on_delivery = on_delivery
        self._pending: deque[tuple[Attempt, Callable[[], Any]]] = deque()
        self._wake: SimpleQueue[bool] = SimpleQueue()
        """One ``True`` per wake-up of a sleeping thread, one ``False`` per exit."""
        self._lock = threading.Lock()
        self._idle = 0
        """Threads asleep on ``_wake`` that no one has woken yet."""
        self._searching = 0
        """Threads awake and about to look at ``_pending`` (woken, started, or done with
        a body): while a call waits, at least one."""
        self._threads: list[threading.Thread] = []
        self._done: list[tuple[Attempt | None, bool, Any]] = []
        """Ends reported, and calls announced (``(None, True, call)``), in order."""
        self._delivery_pending = False

    def submit(self, att: Attempt, call: Callable[[], Any]) -> None:
        with self._lock:
            self._pending.append((att, call))
            if self._searching:
                return
            self._searching += 1
            if self._idle:
                self._idle -= 1
                self._wake.put(True)
                return
        self._spawn()

    def _spawn(self) -> None:
        """Start a thread (already counted as searching)."""
        t = threading.Thread(target=self._main, name="queue-core body", daemon=True)
        self._threads.append(t)
        t.start()

    def _take(self) -> tuple[Attempt, Callable[[], Any]] | None:
        """As a searching thread: the next waiting call, or ``None`` (then asleep)."""
        spawn = False
        with self._lock:
            self._searching -= 1
            if not self._pending:
                self._idle += 1
                return None
            item = self._pending.popleft()
            if self._pending and not self._searching:
                self._searching += 1
                if self._idle:
                    self._idle -= 1
                    self._wake.put(True)
                else:
                    spawn = True
        if spawn:
            self._spawn()
        return item

    def _main(self) -> None:
        wait, lock, token = self._wake.get, self._lock, self._token
        soon, deliver = token.backend_class.run_sync_soon, self._deliver
        while True:
            item = self._take()
            if item is None:
                if not wait():
                    return
                continue
            att, call = item
            try:
                result: tuple[Attempt | None, bool, Any] = (att, True, call())
            except BaseException as exc:  # noqa: BLE001 - carried back to the loop
                result = (att, False, exc)
            with lock:
                self._searching += 1
                self._done.append(result)
                if self._delivery_pending:
                    continue  # the scheduled delivery will take this end too
                self._delivery_pending = True
            try:
                soon(deliver, (), token.native_token)
            except Exception:  # noqa: BLE001 - the loop is gone: nothing to report to
                return

    def announce(
        self, call: Callable[[], None], then: Sequence[tuple[Attempt, Callable[[], Any]]] = ()
    ) -> None:
        """Have the loop run ``call`` before it takes any end reported after this (from
        any thread): the claim thread registers the attempts it starts this way, so
        their ends can never overtake their registration. The calls of ``then`` are
        submitted after ``call`` is queued but before the loop is woken for it: waking
        the loop hands it the GIL, which would hold those bodies back."""
        with self._lock:
            self._done.append((None, True, call))
            wake = not self._delivery_pending
            self._delivery_pending = True
        for att, body in then:
            self.submit(att, body)
        if wake:
            self._token.backend_class.run_sync_soon(self._deliver, (), self._token.native_token)

    def _deliver(self) -> None:
        """On the loop: hand every end reported so far over (one loop wake-up for many)."""
        with self._lock:
            ends, self._done = self._done, []
            self._delivery_pending = False
        hooks = self._on_delivery
        if hooks is None:
            self._each(ends)
            return
        hooks[0]()
        try:
            self._each(ends)
        finally:
            hooks[1]()

    def _each(self, ends: list[tuple[Attempt | None, bool, Any]]) -> None:
        for att, ok, value in ends:
            try:
                if att is None:
                    value()
                    continue
                self._on_done(att, ok, value)
            except Exception:  # noqa: BLE001 - one bad end must not drop the others
                what = "an announced call" if att is None else f"the end of job {att.ref.job_id}"
                log.exception("recording %s failed", what)

    def close(self) -> None:
        for _ in self._threads:
            self._wake.put(False)


class StorageThread:
    """A dedicated daemon thread for one kind of hot storage call (the claim; ends
    are written by :class:`~queue_core.worker.finishing.FinishThread`).

    A call costs a queue put and one loop wake-up, about a third of a ``to_thread``
    hop (no pool, limiter or cancel scope per call), and on its own thread a claim
    runs while ends are written. Like ``to_thread.run_sync``, the caller waits for the
    call to return even when cancelled meanwhile, so claimed jobs are never abandoned
    halfway.
    """

    def __init__(self, name: str) -> None:
        self._token = anyio.lowlevel.current_token()
        self._event = event_class()
        self._checkpoint = self._token.backend_class.checkpoint_if_cancelled
        self._calls: SimpleQueue[
            tuple[Callable[..., Any], tuple[Any, ...], list[Any], anyio.Event] | None
        ] = SimpleQueue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    async def call(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run ``func(*args)`` on this thread and return (or raise) what it did."""
        await self._checkpoint()  # anyio.lowlevel.checkpoint_if_cancelled, backend known
        done = self._event()
        box: list[Any] = []
        self._calls.put((func, args, box, done))
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await done.wait()
            raise
        ok, value = box
        if ok:
            return value
        raise value

    def _main(self) -> None:
        get, token = self._calls.get, self._token
        soon, native = token.backend_class.run_sync_soon, token.native_token
        while True:
            item = get()
            if item is None:
                return
            func, args, box, done = item
            try:
                box[:] = (True, func(*args))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                box[:] = (False, exc)
            try:
                soon(done.set, (), native)
            except Exception:  # noqa: BLE001 - the loop is gone: nobody is waiting
                return

    def close(self) -> None:
        self._calls.put(None)
