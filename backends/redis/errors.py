"""The one place where redis-py exceptions become queue-core's own."""

from __future__ import annotations

from types import TracebackType

import redis.exceptions as rex

from queue_core.records.errors import StorageError, StorageUnavailable

__all__ = ["translate_errors"]


_UNAVAILABLE = (
    rex.ConnectionError,
    rex.TimeoutError,
    rex.ClusterDownError,
    rex.TryAgainError,
    rex.SlotNotCoveredError,
)
_DRIVER = (rex.RedisError, rex.RedisClusterException)


class translate_errors:  # noqa: N801 - used like the function it was: `with translate_errors(...)`
    """Translate driver exceptions raised inside the block.

    Connection problems (refused, reset, timed out, server loading its data set; on a
    cluster also a cluster that is down, a slot being migrated or not covered) become
    :class:`~queue_core.records.errors.StorageUnavailable`; any other redis-py error becomes
    :class:`~queue_core.records.errors.StorageError`. Library errors pass through untouched.

    A class rather than a ``@contextmanager`` generator: entering and leaving it is about
    a microsecond cheaper, paid by every call of the backend (a single enqueue included).

    Args:
        what: the operation, named in the message (``"claim"``, ``"enqueue"``, ...).
    """

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            return
        what = self.what
        if isinstance(exc, _UNAVAILABLE):
            raise StorageUnavailable(f"redis unavailable during {what}: {exc}") from exc
        if isinstance(exc, _DRIVER):
            if _caused_by_connection(exc):  # e.g. "Redis Cluster cannot be connected"
                raise StorageUnavailable(f"redis unavailable during {what}: {exc}") from exc
            raise StorageError(f"redis error during {what}: {exc}") from exc


def _caused_by_connection(exc: BaseException) -> bool:
    seen: BaseException | None = exc.__cause__ or exc.__context__
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, (rex.ConnectionError, rex.TimeoutError, OSError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
