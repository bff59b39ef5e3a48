"""The one place where redis-py exceptions become queue-core's own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis.exceptions as rex

from queue_core.errors import StorageError, StorageUnavailable

__all__ = ["translate_errors"]


@contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Translate driver exceptions raised inside the block.

    Connection problems (refused, reset, timed out, server loading its data set; on a
    cluster also a cluster that is down, a slot being migrated or not covered) become
    :class:`~queue_core.errors.StorageUnavailable`; any other redis-py error becomes
    :class:`~queue_core.errors.StorageError`. Library errors pass through untouched.

    Args:
        what: the operation, named in the message (``"claim"``, ``"enqueue"``, ...).
    """
    try:
        yield
    except (
        rex.ConnectionError,
        rex.TimeoutError,
        rex.ClusterDownError,
        rex.TryAgainError,
        rex.SlotNotCoveredError,
    ) as exc:
        raise StorageUnavailable(f"redis unavailable during {what}: {exc}") from exc
    except (rex.RedisError, rex.RedisClusterException) as exc:
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
