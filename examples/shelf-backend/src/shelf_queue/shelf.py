"""The file under ``shelf://``: one JSON document, read and rewritten whole by each
operation under an exclusive lock, and the one place driver errors are translated.

Atomicity comes from the lock: an operation holds ``<file>.lock`` (``flock``, so
separate processes and separate threads exclude each other) from its read to its write,
and the write replaces the file in one ``os.replace``, so a crash leaves either the old
document or the new one. POSIX only (``fcntl``).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from queue_core.records.errors import QueueCoreError, StorageError, StorageUnavailable

__all__ = ["Shelf", "translated"]

Document = dict[str, Any]


def _empty() -> Document:
    return {"version": 1, "seq": 0, "jobs": {}, "dead": {}}


@contextmanager
def translated(where: str) -> Iterator[None]:
    """Turn what the file system and the JSON decoder raise into the library's errors.

    ``QueueCoreError`` passes through untouched: the shared rules raise the library's
    own errors (``replay_job`` raises ``ConfigError``, which is a ``ValueError``), and a
    ``except ValueError`` below them would turn a refusal into a storage failure.
    """
    try:
        yield
    except QueueCoreError:
        raise
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise StorageUnavailable(f"shelf {where}: {exc.strerror or exc}") from exc
    except (OSError, ValueError) as exc:  # ValueError: a corrupt document
        raise StorageError(f"shelf {where}: {exc}") from exc


class Shelf:
    """The JSON document at ``path``, changed by one holder at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_path = path.with_name(path.name + ".lock")
        self._local = threading.Lock()  # threads of this process queue here first

    @contextmanager
    def change(self) -> Iterator[Document]:
        """Hold the lock, yield the document, and write it back when the block ends
        without an error (an error writes nothing)."""
        with self._locked():
            document = self._read()
            yield document
            with translated(str(self.path)):
                temporary = self.path.with_name(self.path.name + ".tmp")
                temporary.write_text(json.dumps(document, separators=(",", ":")))
                os.replace(temporary, self.path)

    @contextmanager
    def read(self) -> Iterator[Document]:
        """Hold the lock and yield the document, writing nothing."""
        with self._locked():
            yield self._read()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._local, translated(str(self.path)):
            with open(self._lock_path, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> Document:
        with translated(str(self.path)):
            if not self.path.exists():
                return _empty()
            document: Document = json.loads(self.path.read_text())
            return document
