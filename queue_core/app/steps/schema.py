"""The schema of YAML flow files and ``namespace.yaml`` (pydantic v2), and a strict loader.

Private: imported only by :mod:`queue_core.app.steps.files`, inside its functions, so that
``import queue_core`` works without PyYAML or pydantic installed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from queue_core.records.durations import parse_duration
from queue_core.records.errors import ConfigError

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
    behavior: Literal["queue", "skip", "round_robin", "cancel_in_progress", "latest"] = "queue"


class TaskModel(_Strict):
    id: str
    type: Literal["script", "task", "http"]
    file: str | None = None
    task: str | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    url: str | None = None
    method: str | None = None
    headers: dict[str, str] | None = None
    body: Any = None
    expect: Any = None
    """A status code or a list of them (checked when the step is built)."""
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


MAX_DEPTH = 64
"""Nesting of mappings and lists a flow file may have (deeper is refused before it is
built, so a deeply nested file cannot exhaust the stack)."""


class DuplicateKey(ValueError):
    """A mapping of the file names the same key twice (PyYAML would keep the last)."""


class UnsafeYaml(ValueError):
    """The file uses an alias or an anchor (``*a``, ``&a``: a few hundred bytes of aliases
    expand to gigabytes), or nests deeper than :data:`MAX_DEPTH`."""


def _where(event: Any) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _compose_node(loader: Any, parent: Any, index: Any) -> Any:
    """``Composer.compose_node`` that refuses aliases, anchors and deep nesting as it
    meets them, before anything is expanded or built."""
    event = loader.peek_event()
    if isinstance(event, yaml.AliasEvent):
        raise UnsafeYaml(
            f"YAML aliases are not accepted in flow files: *{event.anchor} at {_where(event)} "
            "(write the value out in full)"
        )
    if getattr(event, "anchor", None) is not None:
        raise UnsafeYaml(
            f"YAML anchors are not accepted in flow files: &{event.anchor} at {_where(event)} "
            "(write the value out in full)"
        )
    depth = loader.__dict__.get("_qc_depth", 0) + 1
    if depth > MAX_DEPTH:
        raise UnsafeYaml(
            f"the file nests mappings and lists deeper than {MAX_DEPTH} levels (at {_where(event)})"
        )
    loader._qc_depth = depth
    try:
        return yaml.composer.Composer.compose_node(loader, parent, index)
    finally:
        loader._qc_depth = depth - 1


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


def _fetch_flow_collection_start(loader: Any, token_class: Any) -> None:
    """The scanner meets ``[`` or ``{``: refuse flow-style nesting past :data:`MAX_DEPTH`
    here already, as PyYAML scans nested flow collections ahead in quadratic time."""
    if loader.flow_level >= MAX_DEPTH:
        mark = loader.get_mark()
        raise UnsafeYaml(
            f"the file nests mappings and lists deeper than {MAX_DEPTH} levels (at line "
            f"{mark.line + 1}, column {mark.column + 1})"
        )
    yaml.scanner.Scanner.fetch_flow_collection_start(loader, token_class)


# ``yaml.SafeLoader`` that refuses duplicate mapping keys instead of keeping the last one,
# and aliases, anchors and deep nesting (:class:`UnsafeYaml`). Built with type() so that
# mypy --strict needs no PyYAML stubs.
StrictLoader: Any = type(
    "StrictLoader",
    (yaml.SafeLoader,),
    {
        "compose_node": _compose_node,
        "fetch_flow_collection_start": _fetch_flow_collection_start,
    },
)
StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
