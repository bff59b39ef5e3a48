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

    Connection problems (refused, reset, timed out, server loading its data set) become
    :class:`~queue_core.errors.StorageUnavailable`; any other redis-py error becomes
    :class:`~queue_core.errors.StorageError`. Library errors pass through untouched.

    Args:
        what: the operation, named in the message (``"claim"``, ``"enqueue"``, ...).
    """
    try:
        yield
    except (rex.ConnectionError, rex.TimeoutError) as exc:
        raise StorageUnavailable(f"redis unavailable during {what}: {exc}") from exc
    except rex.RedisError as exc:
        raise StorageError(f"redis error during {what}: {exc}") from exc
