"""docs/architecture.md stays true: its picture is what tools/draw_architecture.py draws,
and every module and package it names exists."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "architecture.md").read_text()


def test_the_layers_picture_is_the_one_the_tool_draws() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "draw_architecture.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


MODULES = sorted(set(re.findall(r"`(queue_core(?:\.[a-z_]+)+)`", PAGE)))


@pytest.mark.parametrize("name", MODULES)
def test_every_module_the_page_names_exists(name: str) -> None:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):  # a module, or a name in one
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        obj: object = module
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return
    raise AssertionError(f"docs/architecture.md names {name}, which does not exist")


def test_the_page_names_the_layers_of_the_import_contract() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    layers = re.search(r'layers = \["testing", ([^\]]+)\]', pyproject)
    assert layers is not None
    for layer in re.findall(r'"([a-z_ :]+)"', "[" + layers.group(1) + "]"):
        for name in layer.split(":"):
            assert f"`queue_core.{name.strip()}`" in PAGE, name
