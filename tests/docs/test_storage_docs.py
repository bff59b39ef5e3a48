"""The normative docstrings of ``Storage`` and every ``Supports*`` ability stay tied to
the published contract suite.

Each operation's docstring ends with a ``Contract:`` section naming the contract classes
(``ReapContract``) or cases (``ReapContract.test_reaped_job_with_lost_delay_0_keeps_its_
place_in_line``) that pin what it says. These tests check that every operation has one,
that every name exists in ``queue_core.testing.suite`` (a renamed or deleted case fails
here, pointing at the docstring to update), that every contract class is cited by some
docstring, and that every object a docstring cross-references (``:func:`...```) exists.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import queue_core.testing.suite as suite
from queue_core.storage.protocol import Storage

CONTRACT = re.compile(r"^(\s*)Contract:\s*\n((?:\1    .*\n?)+)", re.MULTILINE)
NAME = re.compile(r"\b([A-Z]\w*Contract)(?:\.(test_\w+))?")
ROLE = re.compile(r":(?:func|meth|class|mod|data|attr):`~?([\w.]+)(?:\s*<([\w.]+)>)?`")
NOT_STORAGE = {"SupportsTimers"}  # an ability of a Clock (queue_core.app.clock), not of storage


def _abilities() -> dict[str, type]:
    """Every ``Supports*`` protocol of ``queue_core``'s storage layer (the abilities live
    there: ``queue_core.storage.abilities``; importing a module of an optional extra,
    such as the flow files' YAML schema, would need that extra installed)."""
    found: dict[str, type] = {}
    storage = importlib.import_module("queue_core.storage")
    for info in pkgutil.walk_packages(storage.__path__, "queue_core.storage."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                name.startswith("Supports")
                and name not in NOT_STORAGE
                and inspect.isclass(obj)
                and obj.__module__ == info.name
                and getattr(obj, "_is_protocol", False)
            ):
                found[name] = obj
    return found


def _contract_classes() -> dict[str, type]:
    """Every contract class of the published suite, by name."""
    found: dict[str, type] = {}
    for info in pkgutil.iter_modules(suite.__path__, f"{suite.__name__}."):
        for name, obj in vars(importlib.import_module(info.name)).items():
            if name.endswith("Contract") and inspect.isclass(obj):
                found[name] = obj
    return found


ABILITIES = _abilities()
PROTOCOLS = {"Storage": Storage, **ABILITIES}
CONTRACTS = _contract_classes()
AGGREGATES = {"StorageContract", "FlowContract"}  # made of the others


def _operations(protocol: type) -> list[str]:
    return [
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    ]


def _cited(doc: str) -> list[tuple[str, str | None]]:
    return (
        [
            (cls, case)
            for match in CONTRACT.finditer(doc)
            for cls, case in NAME.findall(match.group(2))
            if cls
        ]
        if doc
        else []
    )


def _resolve(path: str) -> Any:
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def test_the_abilities_are_found() -> None:
    expected = {"SupportsFlows", "SupportsSchedules", "SupportsUniqueJobs", "SupportsRateLimits"}
    assert expected | {"SupportsWorkerRegistry", "SupportsThroughput"} <= set(ABILITIES)


@pytest.mark.parametrize(
    ("protocol", "operation"),
    [(p, op) for p, cls in PROTOCOLS.items() for op in _operations(cls)],
)
def test_every_operation_names_the_contract_cases_that_pin_it(
    protocol: str, operation: str
) -> None:
    doc = inspect.getdoc(getattr(PROTOCOLS[protocol], operation)) or ""
    cited = _cited(doc + "\n")
    assert cited, f"{protocol}.{operation}: its docstring has no 'Contract:' section"
    for cls, case in cited:
        mixin = CONTRACTS.get(cls)
        assert mixin is not None, f"{protocol}.{operation} cites {cls}: no such class"
        if case:
            assert callable(getattr(mixin, case, None)), (
                f"{protocol}.{operation} cites {cls}.{case}: no such contract case"
            )


def test_every_contract_class_is_cited_by_some_docstring() -> None:
    cited = {
        cls
        for protocol in PROTOCOLS.values()
        for obj in [protocol, *(getattr(protocol, op) for op in _operations(protocol))]
        for cls, _ in _cited((inspect.getdoc(obj) or "") + "\n")
    }
    missing = sorted(set(CONTRACTS) - AGGREGATES - cited - {"ContractBase"})
    assert missing == [], f"contract classes no docstring cites: {missing}"


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_every_cross_reference_in_the_docstrings_exists(protocol: str) -> None:
    cls = PROTOCOLS[protocol]
    docs = [inspect.getdoc(cls) or ""] + [
        inspect.getdoc(getattr(cls, op)) or "" for op in _operations(cls)
    ]
    for doc in docs:
        for shown, target in ROLE.findall(doc):
            path = target or shown
            # absolute, in the module, or a method of the class itself
            for candidate in (
                path,
                f"{cls.__module__}.{path}",
                f"{cls.__module__}.{protocol}.{path}",
            ):
                try:
                    _resolve(candidate)
                    break
                except (ImportError, AttributeError):
                    continue
            else:
                pytest.fail(f"{protocol}: a docstring refers to {path}, which does not exist")


def test_the_storage_reference_page_is_generated_from_the_docstrings_of_today() -> None:
    """docs/reference/storage.md carries the tables ``tools/storage_reference.py``
    renders, so it reads on disk and cannot drift from the docstrings."""
    tools = Path(__file__).resolve().parents[2] / "tools"
    sys.path.insert(0, str(tools))
    try:
        import storage_reference
    finally:
        sys.path.remove(str(tools))
    assert set(storage_reference.abilities()) == set(ABILITIES)
    assert not storage_reference.stale(), (
        "docs/reference/storage.md is stale: run `python tools/storage_reference.py --write`"
    )
    page = storage_reference.PAGE.read_text()
    for name in PROTOCOLS:
        for operation in _operations(PROTOCOLS[name]):
            assert f"`{operation}(" in page, f"{name}.{operation} is not in the tables"
