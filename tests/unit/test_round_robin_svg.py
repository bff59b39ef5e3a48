"""docs/guides/images/round-robin.svg is what tools/round_robin_svg.py draws today (the
claim order of memory://, the reference storage)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_picture_is_the_claim_order_of_today() -> None:
    spec = importlib.util.spec_from_file_location(
        "round_robin_svg", ROOT / "tools" / "round_robin_svg.py"
    )
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.claim_order("round_robin")[:4] == ["A", "B", "C", "A"]
    assert tool.claim_order(None)[:13] == ["A"] * 12 + ["B"]
    assert (ROOT / "docs" / "guides" / "images" / "round-robin.svg").read_text() == tool.draw(), (
        "stale picture: run python tools/round_robin_svg.py --write"
    )
