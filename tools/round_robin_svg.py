"""Draw docs/guides/images/round-robin.svg: the claims of three tenants' jobs, one claim
at a time, with ``Concurrency(..., behavior="queue")`` and with ``"round_robin"``.

The order is not drawn by hand: both timelines are what ``memory://`` (the reference
storage) hands out for the same jobs -- tenant A enqueues 12 jobs, then B enqueues 3 and
C 2 --, claimed one at a time at explicit times, so the picture is deterministic and
shows the rule as implemented. ``tests/unit/test_round_robin_svg.py`` checks that the file
in the repository is what this script draws today.

    python tools/round_robin_svg.py           # exit 1 when the file is stale
    python tools/round_robin_svg.py --write   # draw it
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backends.memory import MemoryStorage  # noqa: E402
from queue_core.records.jobs import Action, AttemptEnd, Decision, NewJob, Outcome  # noqa: E402

OUT = ROOT / "docs" / "guides" / "images" / "round-robin.svg"
T0 = 1_700_000_000_000
JOBS = {"A": 12, "B": 3, "C": 2}
COLORS = {"A": "#4e79a7", "B": "#f28e2b", "C": "#59a14f"}
CELL, GAP, LEFT, TOP = 22, 4, 175, 34


def claim_order(behavior: str | None) -> list[str]:
    """The tenants of the jobs in the order memory:// claims them, one at a time."""
    storage = MemoryStorage()
    tenant_of: dict[str, str] = {}
    t = T0
    for tenant, n in JOBS.items():
        jobs = [
            NewJob(
                id=uuid.UUID(int=len(tenant_of) + i + 1).hex,
                task_name="report",
                queue="default",
                payload=b"{}",
                concurrency_key=f"report:{tenant}",
                concurrency_limit=100,
                concurrency_behavior=behavior,
                concurrency_group="report" if behavior else None,
            )
            for i in range(n)
        ]
        tenant_of.update((j.id, tenant) for j in jobs)
        storage.enqueue(jobs, now=t)
        t += 1
    order = []
    done = Decision(action=Action.COMPLETE)
    for k in range(sum(JOBS.values())):
        (job,) = storage.claim("w", ["default"], 1, 30_000, now=T0 + 1000 + k)
        order.append(tenant_of[job.id])
        end = AttemptEnd(ref=job.ref, outcome=Outcome.SUCCEEDED, decision=done)
        storage.finish([end], now=T0 + 1000 + k)
    return order


def _row(y: int, label: str, order: list[str]) -> list[str]:
    out = [f'<text x="8" y="{y + 15}" class="label">{label}</text>']
    for i, tenant in enumerate(order):
        x = LEFT + i * (CELL + GAP)
        out.append(
            f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" rx="3" '
            f'fill="{COLORS[tenant]}"><title>claim {i + 1}: tenant {tenant}</title></rect>'
            f'<text x="{x + CELL / 2}" y="{y + 15}" class="cell">{tenant}</text>'
        )
    return out


def draw() -> str:
    """The SVG text."""
    fifo, fair = claim_order(None), claim_order("round_robin")
    n = len(fifo)
    width = LEFT + n * (CELL + GAP) + 40
    height = TOP + 2 * (CELL + 20) + 60
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        "<style>.label{fill:#333}.cell{fill:#fff;text-anchor:middle;font-weight:bold}"
        ".axis{fill:#666;font-size:11px}</style>",
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        '<text x="8" y="18" font-size="13" font-weight="bold">Claims, one at a time: '
        "A enqueued 12 jobs, then B 3 and C 2</text>",
    ]
    parts += _row(TOP, 'behavior="queue"', fifo)
    parts += _row(TOP + CELL + 20, 'behavior="round_robin"', fair)
    axis_y = TOP + 2 * (CELL + 20) + 4
    parts.append(f'<text x="{LEFT}" y="{axis_y}" class="axis">claim 1</text>')
    parts.append(
        f'<text x="{LEFT + (n - 1) * (CELL + GAP)}" y="{axis_y}" class="axis">claim {n}</text>'
    )
    b_fifo, b_fair = fifo.index("B") + 1, fair.index("B") + 1
    parts.append(
        f'<text x="8" y="{axis_y + 22}" class="label">B\'s first job: claim {b_fifo} '
        f"without round_robin, claim {b_fair} with it (one round of claims).</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> int:
    text = draw()
    if "--write" in sys.argv:
        OUT.write_text(text)
        return 0
    if not OUT.exists() or OUT.read_text() != text:
        print(f"{OUT.relative_to(ROOT)} is stale: run python tools/round_robin_svg.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
