"""Redis backend (``redis://``, ``rediss://``, ``redis+cluster://``): see :class:`RedisStorage`."""

from backends.redis.storage import DEFAULT_PREFIX, DEFAULT_RETENTION_MS, RedisStorage

__all__ = ["DEFAULT_PREFIX", "DEFAULT_RETENTION_MS", "RedisStorage"]
