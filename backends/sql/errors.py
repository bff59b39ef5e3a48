"""The one place where driver exceptions become queue-core exceptions.

Every database call of the SQL backend runs inside :func:`translate_errors`:

* duplicate keys and other integrity errors -> :class:`~queue_core.errors.StorageError`;
* connection refused / reset / lost, pool exhaustion, "database is locked" ->
  :class:`~queue_core.errors.StorageUnavailable` (transient: workers retry);
* anything else from the driver or SQLAlchemy -> :class:`~queue_core.errors.StorageError`.

Messages name the masked URL and the driver's own first line, never the SQL parameters
(payloads) and never a password; the cause chained is the driver's exception (whose text
holds no statement parameters). queue-core's own exceptions pass through unchanged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc

from queue_core.errors import QueueCoreError, StorageError, StorageUnavailable

__all__ = ["translate_errors"]

_SQLITE_TRANSIENT = ("locked", "busy", "unable to open", "disk i/o", "readonly")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _scrub(message: str, secret: str | None) -> str:
    if secret:
        message = message.replace(secret, "***")
    return message


def _is_unavailable(orig: BaseException) -> bool:
    if isinstance(orig, sqlite3.OperationalError):
        msg = str(orig).lower()
        return any(word in msg for word in _SQLITE_TRANSIENT)
    if isinstance(orig, (ConnectionError, TimeoutError)):
        return True
    module = type(orig).__module__
    if module.startswith("psycopg"):
        import psycopg

        return isinstance(orig, (psycopg.OperationalError, psycopg.InterfaceError))
    return False


@contextmanager
def translate_errors(where: str, *, secret: str | None = None) -> Iterator[None]:
    """Translate driver errors raised inside the block.

    Args:
        where: what the messages name, e.g. the masked URL.
        secret: a password to scrub from messages, if the URL has one.

    Raises:
        StorageUnavailable: the database cannot be reached or is busy beyond the timeout.
        StorageError: any other driver or SQLAlchemy failure.
    """
    try:
        yield
    except QueueCoreError:
        raise
    except sa_exc.DBAPIError as exc:
        orig = exc.orig if isinstance(exc.orig, BaseException) else exc
        message = _scrub(f"{where}: {type(orig).__name__}: {_first_line(orig)}", secret)
        if exc.connection_invalidated or _is_unavailable(orig):
            raise StorageUnavailable(message) from orig
        if isinstance(exc, sa_exc.IntegrityError):
            raise StorageError(f"{message} (duplicate id or constraint violation)") from orig
        raise StorageError(message) from orig
    except sa_exc.TimeoutError as exc:  # connection pool exhausted
        raise StorageUnavailable(_scrub(f"{where}: {_first_line(exc)}", secret)) from exc
    except sa_exc.SQLAlchemyError as exc:
        raise StorageError(_scrub(f"{where}: {_first_line(exc)}", secret)) from exc
    except (sqlite3.Error, OSError) as exc:
        message = _scrub(f"{where}: {type(exc).__name__}: {_first_line(exc)}", secret)
        if isinstance(exc, OSError) or _is_unavailable(exc):
            raise StorageUnavailable(message) from exc
        raise StorageError(message) from exc
    except Exception as exc:
        if type(exc).__module__.startswith("psycopg"):
            message = _scrub(f"{where}: {type(exc).__name__}: {_first_line(exc)}", secret)
            if _is_unavailable(exc):
                raise StorageUnavailable(message) from exc
            raise StorageError(message) from exc
        raise
