"""A storage without the ``SupportsFlows`` ability, for the tests of the refusals (every
in-repo SQL, memory and Redis backend has it)."""

from __future__ import annotations

from typing import Any

from queue_core.storage.abilities import SupportsFlows
from queue_core.storage.protocol import Storage

__all__ = ["NoFlows"]

_HIDDEN = frozenset(n for n in dir(SupportsFlows) if not n.startswith("_"))


class NoFlows:
    """Every operation of ``inner`` except the flow ones (a third-party storage, say)."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in _HIDDEN:
            raise AttributeError(name)
        return getattr(self._inner, name)
