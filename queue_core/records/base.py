"""A base for frozen dataclasses whose ``__eq__``, ``__hash__`` and ``__repr__`` are shared.

``@dataclass`` builds each generated method by compiling its source (``exec``) when the
class is created: on Python 3.11 that is most of the time ``import queue_core`` takes, and
a worker's start-up is its imports. A class declared ``@dataclass(frozen=True, eq=False,
repr=False)`` on top of :class:`Record` gets these three as plain inherited functions
instead, with the behaviour the generated ones have: equal when of the same class with
equal field values (``NotImplemented`` against another class), hashed on the same tuple,
shown as ``Name(field=value, ...)``. Only ``__init__`` and the frozen
``__setattr__``/``__delattr__`` are still generated per class.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields
from datetime import datetime
from enum import Enum
from operator import attrgetter
from typing import Any

__all__ = ["Record"]  # and _MappingMixin, for the records modules

_Getter = Callable[[Any], tuple[Any, ...]]
_compared: dict[type, _Getter] = {}
_shown: dict[type, tuple[str, ...]] = {}


def _values(obj: Any) -> tuple[Any, ...]:
    """The compared field values of dataclass ``obj``, in field order."""
    getter = _compared.get(obj.__class__)
    if getter is None:
        getter = _compared[obj.__class__] = _getter(tuple(f.name for f in fields(obj) if f.compare))
    return getter(obj)


def _getter(names: tuple[str, ...]) -> _Getter:
    if len(names) > 1:
        return attrgetter(*names)  # a tuple of the values
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


class Record:
    """Shared ``__eq__``/``__hash__``/``__repr__`` of a frozen dataclass (module docstring)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return _values(self) == _values(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(_values(self))

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        names = _shown.get(self.__class__)
        if names is None:
            names = _shown[self.__class__] = tuple(f.name for f in fields(self) if f.repr)  # type: ignore[arg-type]
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{self.__class__.__qualname__}({shown})"


class _MappingMixin(Record, Mapping[str, Any]):
    """Lets a frozen dataclass be read like a mapping: ``entry["task_name"]``."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        if key in self._field_names():
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._field_names())

    def __len__(self) -> int:
        return len(self._field_names())

    @classmethod
    def _field_names(cls) -> tuple[str, ...]:
        names: tuple[str, ...] | None = cls.__dict__.get("_names_cache")
        if names is None:
            names = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
            type.__setattr__(cls, "_names_cache", names)
        return names

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (datetimes as ISO 8601, enums as values)."""
        return {k: _jsonable(getattr(self, k)) for k in self._field_names()}


def _jsonable(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, _MappingMixin):
        return v.to_dict()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v
