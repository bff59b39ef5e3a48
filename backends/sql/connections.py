"""One DBAPI connection per thread, held until the storage closes.

Every operation of the SQL backend runs on its thread's own connection (sqlite3 or
psycopg, opened by the dialect class), so no pool checkout or SQLAlchemy machinery sits
on the path of a statement. SQLAlchemy is used for the schema and migrations only.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["ThreadConnections"]


class ThreadConnections:
    """One DBAPI connection per thread, kept checked out until :meth:`close_all`.

    ``connect`` opens a new DBAPI connection (through the engine, so its ``connect``
    event runs). A connection is forgotten and closed by :meth:`discard` (after an
    error) or when its thread has ended (checked whenever a thread opens one). A forked
    child forgets the parent's connections without touching them and opens its own.
    """

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self.shared = False
        """``True`` when ``connect`` hands every thread the same connection (SQLite in
        memory): it is then closed by :meth:`close_all` only."""
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: dict[int, tuple[threading.Thread, Any]] = {}
        forget = weakref.WeakMethod(self._forget_after_fork)
        os.register_at_fork(after_in_child=lambda: _call(forget))

    def _forget_after_fork(self) -> None:
        """In a forked child: drop (never use, never close) the parent's connections."""
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open = {}

    def current(self) -> Any:
        """This thread's connection, or ``None`` before the first :meth:`get`."""
        return getattr(self._local, "conn", None)

    def get(self) -> Any:
        """This thread's connection (opened on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        conn = self._connect()
        me = threading.current_thread()
        stale: list[Any] = []
        with self._lock:
            for key, (thread, other) in list(self._open.items()):
                if not thread.is_alive():
                    stale.append(other)
                    del self._open[key]
            self._open[id(conn)] = (me, conn)
        for other in stale:
            if not self.shared:
                _close_quietly(other)
        self._local.conn = conn
        return conn

    def discard(self, conn: Any) -> None:
        """Forget and close ``conn`` (it saw an error); the thread reconnects next time."""
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            self._open.pop(id(conn), None)
        if not self.shared:
            _close_quietly(conn)

    def close_all(self) -> None:
        """Close every connection handed out (idempotent)."""
        with self._lock:
            conns = [c for _, c in self._open.values()]
            self._open.clear()
        for conn in conns:
            _close_quietly(conn)


def _call(ref: weakref.WeakMethod[Callable[[], None]]) -> None:
    method = ref()
    if method is not None:
        method()


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a broken connection is best effort
        pass
