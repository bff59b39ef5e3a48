"""Static check that every in-repo backend class is a
:class:`~queue_core.storage.protocol.StorageFactory`.

The URL registry names backends by ``"module:Class"`` strings (so ``import queue_core``
imports no driver), which mypy cannot follow. This module gives mypy the same fact in
typed form: if a backend's ``from_url`` goes missing or stops returning a ``Storage``,
``mypy --strict backends`` fails here. Everything is under ``TYPE_CHECKING``: importing
this module at run time imports nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backends.memory import MemoryStorage
    from backends.redis import RedisStorage
    from backends.sql import SQLStorage
    from backends.sqs import SQSStorage
    from queue_core.storage.protocol import StorageFactory

    FACTORIES: tuple[StorageFactory, ...] = (MemoryStorage, SQLStorage, RedisStorage, SQSStorage)
