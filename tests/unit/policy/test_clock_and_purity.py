"""The system clock, and the rule that the scheduling core reads no clock of its own."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

import queue_core.rules
from queue_core.app.clock import Clock, SystemClock

POLICY_DIR = Path(queue_core.rules.__file__).parent
ALLOWED_LAYERS = ("queue_core.rules", "queue_core.records")
"""The pure rules import only each other and the records below them."""


def test_system_clock_reads_real_time() -> None:
    clock = SystemClock()
    assert isinstance(clock, Clock)
    before = time.time_ns() // 1_000_000
    now = clock.now_ms()
    after = time.time_ns() // 1_000_000
    assert isinstance(now, int)
    assert before <= now <= after
    m1 = clock.monotonic()
    m2 = clock.monotonic()
    assert isinstance(m1, float) and m1 <= m2


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    "path", sorted(POLICY_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(POLICY_DIR))
)
def test_policy_modules_import_no_clock_randomness_or_io(path: Path) -> None:
    for name in _imports(path):
        root = name.split(".")[0]
        assert root not in {"time", "random", "anyio", "asyncio", "socket", "threading"}, name
        if root == "queue_core":
            assert name.startswith(ALLOWED_LAYERS), name
