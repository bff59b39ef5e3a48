"""Draw docs/img/layers.svg, the picture of docs/architecture.md (run it after a layer moves).

    python tools/draw_architecture.py          # rewrites docs/img/layers.svg
    python tools/draw_architecture.py --check  # exit 1 when the file is not what it draws

The picture is plain SVG, written from the table below, so it renders in the docs site
and on a forge, needs no drawing program, and a test keeps it in step with the code's
packages (tests/docs/test_architecture.py).
"""

from __future__ import annotations

import sys
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img" / "layers.svg"

# (package, what it holds) from the top layer down: each imports only those below it
QUEUE_CORE = [
    ("queue_core.testing", "the published contract suite (StorageContract, ...)"),
    ("queue_core.queue + .flows", "the facade: Queue, the flows API (Flow, ExecutionHandle)"),
    ("queue_core.worker", "runs tasks: claim loop, runner, process isolation, recorder, services"),
    ("queue_core.app", "what an application declares: Task, options, JobHandle, serializer, steps"),
    ("queue_core.storage", "the Storage protocol, every Supports* ability, flow records, registry"),
    ("queue_core.rules", "pure rules: retry, classify, decide, leases, outcomes, flows (plan)"),
    ("queue_core.records", "records that cross boundaries: jobs, flows, workers, errors"),
]
BACKENDS = ["memory", "sql", "redis", "sqs"]
CONTRIB = "contrib: CLI, dashboard, metrics, OpenTelemetry, Django"

W, PAD, ROW, GAP = 860, 20, 44, 10
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"


def _box(x: int, y: int, w: int, h: int, fill: str, title: str, note: str = "") -> str:
    text = (
        f"<text x='{x + 12}' y='{y + 18}' {FONT} font-size='14' font-weight='bold'>"
        f"{escape(title)}</text>"
    )
    if note:
        text += (
            f"<text x='{x + 12}' y='{y + 35}' {FONT} font-size='12' fill='#333'>"
            f"{escape(note)}</text>"
        )
    return (
        f"<rect x='{x}' y='{y}' width='{w}' height='{h}' rx='6' fill='{fill}' "
        f"stroke='#555'/>" + text
    )


def _arrow(x: int, y1: int, y2: int) -> str:
    return (
        f"<line x1='{x}' y1='{y1}' x2='{x}' y2='{y2 - 6}' stroke='#444' stroke-width='2'/>"
        f"<polygon points='{x - 6},{y2 - 8} {x + 6},{y2 - 8} {x},{y2}' fill='#444'/>"
    )


def draw() -> str:
    parts: list[str] = []
    y = PAD
    parts.append(_box(PAD, y, W - 2 * PAD, ROW, "#f3e8fd", CONTRIB))
    y += ROW + GAP
    parts.append(_arrow(W // 2, y, y + 24))
    y += 24
    bw = (W - 2 * PAD - 3 * GAP) // 4
    for i, name in enumerate(BACKENDS):
        x = PAD + i * (bw + GAP)
        parts.append(_box(x, y, bw, ROW, "#e6f4ea", f"backends.{name}", "a store + one part each"))
    y += ROW + GAP
    parts.append(_arrow(W // 2, y, y + 24))
    parts.append(
        f"<text x='{W // 2 + 14}' y='{y + 17}' {FONT} font-size='12' fill='#333'>"
        "backends import records, rules and storage only</text>"
    )
    y += 24
    inner_top = y
    y += 30
    for name, note in QUEUE_CORE:
        fill = "#fff7e0" if name in ("queue_core.rules", "queue_core.records") else "#e8f0fe"
        parts.append(_box(PAD + 20, y, W - 2 * PAD - 40, ROW, fill, name, note))
        y += ROW + 6
    parts.insert(
        len(parts) - len(QUEUE_CORE),
        f"<rect x='{PAD}' y='{inner_top}' width='{W - 2 * PAD}' height='{y - inner_top + 4}' "
        f"rx='8' fill='none' stroke='#888' stroke-dasharray='6 4'/>"
        f"<text x='{PAD + 12}' y='{inner_top + 20}' {FONT} font-size='13' fill='#555'>"
        "queue_core -- each layer imports only the layers below it (import-linter)</text>",
    )
    height = y + PAD
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{height}' "
        f"viewBox='0 0 {W} {height}'>"
        f"<rect width='{W}' height='{height}' fill='white'/>" + "".join(parts) + "</svg>\n"
    )


def main(argv: list[str]) -> int:
    svg = draw()
    if "--check" in argv:
        same = OUT.exists() and OUT.read_text() == svg
        if not same:
            print(f"{OUT.relative_to(ROOT)} is stale: run python tools/draw_architecture.py")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(svg)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
