"""The one place where driver exceptions become queue-core exceptions.

Every database call of the SQL backend runs inside :func:`translate_errors`:

* duplicate keys and other integrity errors -> :class:`~queue_core.records.errors.StorageError`;
* connection refused / reset / lost, pool exhaustion, "database is locked" ->
  :class:`~queue_core.records.errors.StorageUnavailable` (transient: workers retry);
* anything else from the driver or SQLAlchemy -> :class:`~queue_core.records.errors.StorageError`.

Messages name the masked URL and the driver's own first line, never the SQL parameters
(payloads) and never a password; the cause chained is the driver's exception (whose text
holds no statement parameters). queue-core's own exceptions pass through unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from queue_core.records.errors import QueueCoreError, StorageError, StorageUnavailable
from queue_core.storage.urls import redact

__all__ = ["translate_errors", "translated"]

_SQLITE_TRANSIENT = ("locked", "busy", "unable to open", "disk i/o", "readonly")
_PREPARED_ERRORS = ("DuplicatePreparedStatement", "InvalidSqlStatementName")
_PGBOUNCER_HINT = (
    "(server-side prepared statements failed: behind PgBouncer in transaction pooling "
    "mode? add ?pgbouncer=true to the URL)"
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _scrub(message: str, secret: str | None) -> str:
    return redact(message, secret)


def _is_sqlite(exc: BaseException, kind: str = "Error") -> bool:
    """``exc`` is a ``sqlite3.<kind>``. sqlite3 is looked up, not imported: only the SQLite
    dialect imports it (a PostgreSQL worker never loads it), and no sqlite3 error exists
    before that."""
    sqlite3 = sys.modules.get("sqlite3")
    return sqlite3 is not None and isinstance(exc, getattr(sqlite3, kind))


def _is_unavailable(orig: BaseException) -> bool:
    if _is_sqlite(orig, "OperationalError"):
        msg = str(orig).lower()
        return any(word in msg for word in _SQLITE_TRANSIENT)
    if isinstance(orig, (ConnectionError, TimeoutError)):
        return True
    module = type(orig).__module__
    if module.startswith("psycopg"):
        import psycopg

        return isinstance(orig, (psycopg.OperationalError, psycopg.InterfaceError))
    return False


def translated(
    exc: BaseException, where: str, *, secret: str | None = None
) -> tuple[BaseException, BaseException] | None:
    """The queue-core exception for a driver error ``exc`` and the cause to chain to it,
    or ``None`` when ``exc`` passes unchanged (queue-core's own, or not a database error).

    Args:
        exc: the exception raised by a database call.
        where: what the messages name, e.g. the masked URL.
        secret: the storage URL: every credential in it (password, ``?password=``...)
            is scrubbed from messages (:func:`queue_core.storage.urls.redact`).
    """
    if isinstance(exc, QueueCoreError):
        return None
    # SQLAlchemy is imported only to migrate the schema: no SQLAlchemy error exists before.
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(exc, sa_exc.SQLAlchemyError):
        return _translated_sqlalchemy(exc, sa_exc, where, secret)
    driver = (
        isinstance(exc, OSError)
        or _is_sqlite(exc)
        or (isinstance(exc, Exception) and type(exc).__module__.startswith("psycopg"))
    )
    if not driver:
        return None
    message = _scrub(f"{where}: {type(exc).__name__}: {_first_line(exc)}", secret)
    if isinstance(exc, OSError) or _is_unavailable(exc):
        return StorageUnavailable(message), exc
    if _is_sqlite(exc, "IntegrityError") or type(exc).__name__ == "UniqueViolation":
        return StorageError(f"{message} (duplicate id or constraint violation)"), exc
    if type(exc).__name__ in _PREPARED_ERRORS:
        return StorageError(f"{message} {_PGBOUNCER_HINT}"), exc
    return StorageError(message), exc


def _translated_sqlalchemy(
    exc: BaseException, sa_exc: Any, where: str, secret: str | None
) -> tuple[BaseException, BaseException]:
    """:func:`translated` of an error raised by SQLAlchemy (schema engine only)."""
    if isinstance(exc, sa_exc.DBAPIError):
        orig = exc.orig if isinstance(exc.orig, BaseException) else exc
        message = _scrub(f"{where}: {type(orig).__name__}: {_first_line(orig)}", secret)
        if exc.connection_invalidated or _is_unavailable(orig):
            return StorageUnavailable(message), orig
        if isinstance(exc, sa_exc.IntegrityError):
            return StorageError(f"{message} (duplicate id or constraint violation)"), orig
        return StorageError(message), orig
    if isinstance(exc, sa_exc.TimeoutError):  # connection pool exhausted
        return StorageUnavailable(_scrub(f"{where}: {_first_line(exc)}", secret)), exc
    return StorageError(_scrub(f"{where}: {_first_line(exc)}", secret)), exc


@contextmanager
def translate_errors(where: str, *, secret: str | None = None) -> Iterator[None]:
    """Translate driver errors raised inside the block (see :func:`translated`).

    Raises:
        StorageUnavailable: the database cannot be reached or is busy beyond the timeout.
        StorageError: any other driver or SQLAlchemy failure.
    """
    try:
        yield
    except BaseException as exc:
        pair = translated(exc, where, secret=secret)
        if pair is None:
            raise
        raise pair[0] from pair[1]
