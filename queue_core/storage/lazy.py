"""One way to defer work until first use: a storage part built (and its modules imported)
the first time it is needed.

A worker's start-up is mostly its imports. A backend whose storage has a part that many
workers never use (flows, schedules, the dashboard's scans) builds it lazily instead of
keeping per-backend import shims::

    def _flows(storage: MyStorage) -> MyFlows:
        from my_backend.flows import MyFlows  # imported with the first flow operation

        return MyFlows(storage.store, storage.jobs)

    class MyStorage(Storage):
        flows = Lazy(_flows)

``storage.flows`` is built once per storage object, on first access, under a lock (two
threads never build two parts), and then is a plain attribute.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

__all__ = ["Lazy"]

T = TypeVar("T")
_BUILD = threading.Lock()


class Lazy(Generic[T]):
    """A per-instance attribute built by ``build(instance)`` on first access.

    Args:
        build: makes the value from the instance that owns it (import inside it what
            only the value needs).
    """

    def __init__(self, build: Callable[[Any], T]) -> None:
        self._build = build
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Lazy[T]: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> T | Lazy[T]:
        if obj is None:
            return self
        cache = obj.__dict__
        try:
            return cache[self._name]  # type: ignore[no-any-return]
        except KeyError:
            pass
        with _BUILD:
            if self._name not in cache:
                cache[self._name] = self._build(obj)
        return cache[self._name]  # type: ignore[no-any-return]

    def built(self, obj: object) -> T | None:
        """``obj``'s value if it was built already, else ``None`` (nothing is built)."""
        return obj.__dict__.get(self._name)
