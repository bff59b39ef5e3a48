"""The schema of YAML flow files and ``namespace.yaml`` (pydantic v2), and a strict loader.

Private: imported only by :mod:`queue_core.flows.files`, inside its functions, so that
``import queue_core`` works without PyYAML or pydantic installed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from queue_core.durations import parse_duration
from queue_core.errors import ConfigError

MAX_ATTEMPTS_LIMIT = 20
"""Flow files accept ``max_attempts`` from 1 to 20 (the flow system's range)."""


def _duration(value: Any) -> float | None:
    if value is None:  # null = not given, for optional fields
        return None
    try:
        return parse_duration(value)
    except ConfigError:
        raise PydanticCustomError(
            "invalid_duration",
            "invalid duration {value} — expected a duration greater than zero, such as "
            "'90s', '30m', '2h', '1h30m' or '250ms' (a bare number is seconds)",
            {"value": repr(value)},
        ) from None


Duration = Annotated[float, BeforeValidator(_duration)]
"""A duration in the file (``90s``, ``30m``, ``2h``), validated to float seconds."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RetryModel(_Strict):
    """``retry:`` of a flow, a task, or ``defaults`` of ``namespace.yaml``."""

    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS_LIMIT)] | None = None
    backoff: Literal["fixed", "exponential"] | None = None
    initial: Duration | None = None
    max: Duration | None = None


class ConcurrencyModel(_Strict):
    limit: Annotated[int, Field(ge=1, le=1_000_000)]
    behavior: Literal["queue", "skip"] = "queue"


class TaskModel(_Strict):
    id: str
    type: Literal["script", "task"]
    file: str | None = None
    task: str | None = None
    depends_on: list[str] = Field(default_factory=list)
    timeout: Duration | None = None
    retry: RetryModel | None = None


class FlowModel(_Strict):
    id: Annotated[str, Field(min_length=1)]
    concurrency: ConcurrencyModel | None = None
    max_parallel: Annotated[int, Field(ge=0)] = 0
    timeout: Duration | None = None
    retry: RetryModel | None = None
    tasks: Annotated[list[TaskModel], Field(min_length=1)]


class DefaultsModel(_Strict):
    retry: RetryModel | None = None
    timeout: Duration | None = None


class NamespaceModel(_Strict):
    defaults: DefaultsModel | None = None


class DuplicateKey(ValueError):
    """A mapping of the file names the same key twice (PyYAML would keep the last)."""


def _construct_mapping(loader: Any, node: Any, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: the constructor below reports it
            duplicate = False
        if duplicate:
            mark = key_node.start_mark
            raise DuplicateKey(
                f"duplicate key {key!r} at line {mark.line + 1}, column {mark.column + 1}"
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


# ``yaml.SafeLoader`` that refuses duplicate mapping keys instead of keeping the last one.
# Built with type() so that mypy --strict needs no PyYAML stubs.
StrictLoader: Any = type("StrictLoader", (yaml.SafeLoader,), {})
StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
