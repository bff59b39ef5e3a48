"""Linux: a commit by another process ends an idle SQLite waiter's pause at once.

SQLite has no push channel between processes: an idle worker's ``wait_for_jobs``
polls ``PRAGMA data_version`` (:meth:`~backends.sql.wakeup.SQLiteWakeup.wait_for_jobs`),
so a job enqueued by another process waited for the next poll (half a poll interval on
average). A commit in WAL mode writes the database's ``-wal`` file, so an inotify watch
(``IN_MODIFY``) on the database's directory says that something was written: the waiter
looks at ``data_version`` at once instead of at its next poll. The polls go on as before
(a filesystem that reports no events, such as a network one, still works): the watch
only ends a poll's sleep early. Off Linux, or when inotify is not available (out of
watches, no ``libc``), :meth:`DirWatch.open` returns ``None`` and the waiter just polls.
"""

from __future__ import annotations

import ctypes
import os
import select
import sys

__all__ = ["DirWatch"]

_IN_MODIFY = 0x00000002
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000


class DirWatch:
    """An inotify watch for writes to files in one directory."""

    __slots__ = ("_fd", "_poll")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    @classmethod
    def open(cls, directory: str) -> DirWatch | None:
        """A watch on ``directory``, or ``None`` where inotify is not available."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            init, add = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError):
            return None
        fd = init(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return None
        if add(fd, os.fsencode(directory), _IN_MODIFY) < 0:
            os.close(fd)
            return None
        return cls(fd)

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, less if a file in the directory is written
        meanwhile (or was since the last call): ``True`` then (the events are read)."""
        if not self._poll.poll(max(timeout, 0.0) * 1000.0):
            return False
        try:
            while os.read(self._fd, 65536):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        """Stop watching (idempotent)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
