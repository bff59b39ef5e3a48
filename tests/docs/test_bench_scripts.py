"""The benchmark scripts import only names that exist in this repository.

They are run by hand and by ``nox -s bench``, not by the test suite, and most import
their helpers inside ``main``: a helper renamed in ``tests/servers`` or the library
would break them unseen (``bench/sqs_requests.py`` and ``bench/sqs_history.py`` imported
``tests.servers.moto._free_port`` for a while after it moved to
``tests.servers.ports.free_port``).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("queue_core", "backends", "contrib", "tests", "bench")
SCRIPTS = sorted((ROOT / "bench").glob("*.py"))
SIBLINGS = {p.stem for p in SCRIPTS}
"""Scripts import each other by their bare names (``from drain import storage_url``)."""


def _imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from <ours> import name`` in ``path``, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module
            if module.split(".")[0] in SIBLINGS:
                module = f"bench.{module}"
            if module.split(".")[0] in OURS:
                found.extend((module, a.name) for a in node.names if a.name != "*")
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_a_bench_script_imports_names_that_exist(script: Path) -> None:
    missing = []
    for module, name in _imports(script):
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    assert not missing, f"{script.name} imports what does not exist: {missing}"
