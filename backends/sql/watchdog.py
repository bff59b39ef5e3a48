"""A bound on every PostgreSQL call: a call past it gets its socket cut.

psycopg has no client-side timeout on a statement: over a connection that stays open
but carries no bytes (a hung proxy or middlebox, which still ACKs, so TCP keepalives
and ``tcp_user_timeout`` see nothing wrong), a call would wait forever, and a worker's
claim or lease renewal with it. :class:`Watchdog` tracks the calls in progress (armed
when a scope opens, disarmed when it closes: a dict write each) and, from one daemon
thread, shuts down the socket of any call older than the bound. libpq then reports the
connection lost, which the backend raises as
:class:`~queue_core.records.errors.StorageUnavailable` and the thread reconnects next time.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import weakref
from typing import Any

__all__ = ["Watchdog", "cut"]


class Watchdog:
    """Cuts the connection of a call running longer than ``bound_s`` seconds."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self._active: dict[int, tuple[float, Any]] = {}
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.cuts = 0
        """How many calls were cut (for tests and logs)."""
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _forget(ref))

    def arm(self, conn: Any) -> None:
        """A call on ``conn`` starts now."""
        self._active[id(conn)] = (time.monotonic() + self.bound_s, conn)
        if self._thread is None:
            self._start()

    def disarm(self, conn: Any) -> None:
        """The call on ``conn`` is over."""
        self._active.pop(id(conn), None)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                ref = weakref.ref(self)
                self._thread = threading.Thread(
                    target=_watch,
                    args=(ref, min(1.0, self.bound_s / 4)),
                    name="queue-core sql watchdog",
                    daemon=True,
                )
                self._thread.start()

    def check(self, now: float) -> None:
        """Cut every call whose deadline is before ``now``."""
        for key, (deadline, conn) in list(self._active.items()):
            if deadline < now and self._active.get(key, (None, None))[1] is conn:
                self._active.pop(key, None)
                self.cuts += 1
                cut(conn)


def _forget(ref: weakref.ref[Watchdog]) -> None:
    """In a forked child: the parent's watch thread is gone; start afresh on next use."""
    dog = ref()
    if dog is not None:
        dog._active = {}
        dog._thread = None
        dog._lock = threading.Lock()


def _watch(ref: weakref.ref[Watchdog], every: float) -> None:
    while True:
        time.sleep(every)
        dog = ref()
        if dog is None:
            return
        dog.check(time.monotonic())
        del dog


def cut(conn: Any) -> None:
    """Shut down ``conn``'s socket both ways (the fd stays libpq's to close)."""
    try:
        fd = conn.fileno()
    except Exception:  # noqa: BLE001 - already closed: nothing to cut
        return
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()
