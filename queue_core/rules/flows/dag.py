"""The step graph of a flow: validation and order (SPEC §7).

Pure: plain data in, plain data out. Every refusal is a
:class:`~queue_core.records.errors.ConfigError` with ``code="invalid_flow"`` whose message names
the path of the bad value the way the user wrote it (``tasks[1].depends_on[0]`` for a flow
file, ``steps[1].depends_on[0]`` for a flow in code) and whose ``field`` is that path.

Rules:

- a step id is a non-empty string of letters, digits, ``_``, ``-`` and ``.`` (at most
  128 characters), unique in the flow (the *second* occurrence is named);
- every dependency names a step of the flow, at most once per step, and not the step itself;
- the graph has no cycle (the cycle is named, each step depending on the next:
  ``a -> b -> c -> a``);
- a step whose dependency results arrive as keyword parameters (code steps and
  ``type: task`` steps) cannot depend on a step named ``input`` or ``ctx``, the
  parameters of the execution input and the context. Any other id is free: a parameter
  named after a dependency receives its result, and an id that is not an identifier
  (``fetch-users``) is simply never taken as a parameter (SPEC §7).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from queue_core.records.errors import ConfigError

__all__ = [
    "RESERVED_PARAMETERS",
    "Node",
    "check_next",
    "dependents",
    "find_cycle",
    "topological_order",
    "validate",
]

RESERVED_PARAMETERS: Final = frozenset({"input", "ctx"})
"""Parameter names a step body receives for other purposes; no dependency may use them."""

_ID: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")


@dataclass(frozen=True, slots=True)
class Node:
    """One step as the graph sees it."""

    id: str
    depends_on: tuple[str, ...] = ()
    results_as_parameters: bool = True
    """``True`` when the step receives its dependencies' results as keyword parameters
    (code and ``type: task`` steps): no dependency of it may be named ``input`` or
    ``ctx``."""


def _refuse(path: str, message: str, value: object = None) -> ConfigError:
    return ConfigError(f"{path}: {message}", code="invalid_flow", field=path, value=value)


def validate(nodes: Sequence[Node], *, collection: str = "steps") -> None:
    """Refuse a graph that cannot run; return ``None`` when it is sound.

    Args:
        nodes: the steps in definition order.
        collection: the name of the list in messages (``"tasks"`` for flow files).

    Raises:
        ConfigError: ``code="invalid_flow"`` for the first problem found, in this order:
            no steps, a bad or duplicate id, a bad, unknown, repeated or self dependency,
            a dependency named ``input`` or ``ctx`` of a step that takes results as
            parameters, a cycle.
    """
    if not nodes:
        raise _refuse(collection, "a flow needs at least one step", [])
    seen: dict[str, int] = {}
    for i, node in enumerate(nodes):
        _check_id(i, node, seen, collection)
        seen[node.id] = i
    for i, node in enumerate(nodes):
        _check_deps(i, node, seen, collection)
    cycle = find_cycle(nodes)
    if cycle is not None:
        first = seen[cycle[0]]
        j = nodes[first].depends_on.index(cycle[1])
        raise _refuse(
            f"{collection}[{first}].depends_on[{j}]",
            f"dependency cycle: {' -> '.join(cycle)} (each step depends on the next)",
            cycle,
        )


def check_next(node: Node, seen: Mapping[str, int], *, collection: str = "steps") -> None:
    """Refuse ``node`` as the next step of a sound graph whose step ids are ``seen``
    (id -> index); the same refusal :func:`validate` gives the grown graph, in O(the
    step's dependencies). A graph grown this way has no cycle: a new step's dependencies
    are steps that exist, and none of them depends on it.

    Raises:
        ConfigError: ``code="invalid_flow"``, as :func:`validate`.
    """
    i = len(seen)
    _check_id(i, node, seen, collection)
    _check_deps(i, node, seen, collection)


def _check_id(i: int, node: Node, seen: Mapping[str, int], collection: str) -> None:
    path = f"{collection}[{i}].id"
    if not isinstance(node.id, str) or not _ID.fullmatch(node.id):
        raise _refuse(
            path,
            f"invalid step id {node.id!r} — expected 1 to 128 letters, digits, '_', "
            "'-' or '.', not starting with '-' or '.'",
            node.id,
        )
    if node.id in seen:
        raise _refuse(
            path,
            f"duplicate step id {node.id!r} (first used by {collection}[{seen[node.id]}])",
            node.id,
        )


def _check_deps(i: int, node: Node, seen: Mapping[str, int], collection: str) -> None:
    listed: set[str] = set()
    for j, dep in enumerate(node.depends_on):
        path = f"{collection}[{i}].depends_on[{j}]"
        if dep == node.id:
            raise _refuse(path, f"step {node.id!r} depends on itself", dep)
        if dep not in seen:
            ids = seen if node.id in seen else (*seen, node.id)  # check_next: not yet in
            known = ", ".join(repr(k) for k in ids)
            raise _refuse(path, f"unknown step id {dep!r} — the steps are {known}", dep)
        if dep in listed:
            raise _refuse(path, f"dependency {dep!r} is listed twice", dep)
        listed.add(dep)
        if node.results_as_parameters and dep in RESERVED_PARAMETERS:
            raise _refuse(
                path,
                f"step {node.id!r} receives its dependencies' results as parameters, "
                f"and {dep!r} is the parameter of the "
                f"{'execution input' if dep == 'input' else 'job context'}: rename "
                f"step {dep!r}",
                dep,
            )


def find_cycle(nodes: Sequence[Node]) -> list[str] | None:
    """A dependency cycle as a closed path (``["a", "b", "a"]``), or ``None``.

    Reads "a -> b" as "a depends on b". Deterministic: the search starts from the steps
    in definition order and follows dependencies in the order they are listed, so the
    same graph always names the same cycle. Unknown dependency ids are ignored.
    """
    deps: dict[str, tuple[str, ...]] = {n.id: n.depends_on for n in nodes}
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(deps, white)
    for root in deps:
        if color[root] != white:
            continue
        # iterative DFS: a stack of (node, index of the next dependency to follow)
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[str] = [root]
        color[root] = grey
        while stack:
            node, k = stack[-1]
            children = deps[node]
            if k == len(children):
                stack.pop()
                path.pop()
                color[node] = black
                continue
            stack[-1] = (node, k + 1)
            child = children[k]
            if child not in color:
                continue
            if color[child] == grey:
                return path[path.index(child) :] + [child]
            if color[child] == white:
                color[child] = grey
                stack.append((child, 0))
                path.append(child)
    return None


def topological_order(nodes: Sequence[Node]) -> list[str]:
    """Step ids with every step after its dependencies.

    Stable: among steps whose dependencies are all placed, definition order decides
    (Kahn's algorithm with the definition index as the tie-break).

    Raises:
        ConfigError: ``invalid_flow`` naming the cycle when there is one.
    """
    index = {n.id: i for i, n in enumerate(nodes)}
    remaining = {n.id: len(set(n.depends_on)) for n in nodes}
    users = dependents(nodes)
    ready = sorted((i for i, n in enumerate(nodes) if remaining[n.id] == 0))
    order: list[str] = []
    while ready:
        i = ready.pop(0)
        step_id = nodes[i].id
        order.append(step_id)
        for user in users[step_id]:
            remaining[user] -= 1
            if remaining[user] == 0:
                ready.append(index[user])
        ready.sort()
    if len(order) != len(nodes):
        cycle = find_cycle(nodes) or []
        raise _refuse("steps", f"dependency cycle: {' -> '.join(cycle)}", cycle)
    return order


def dependents(nodes: Sequence[Node]) -> Mapping[str, tuple[str, ...]]:
    """For each step id, the ids of the steps that depend on it, in definition order."""
    users: dict[str, list[str]] = {n.id: [] for n in nodes}
    for node in nodes:
        for dep in dict.fromkeys(node.depends_on):
            if dep in users:
                users[dep].append(node.id)
    return {k: tuple(v) for k, v in users.items()}
