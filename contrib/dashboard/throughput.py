"""The queues page's "last hour" column: per queue, jobs finished per minute as an inline
SVG sparkline (no script, no build step) and the hour's totals, from storage's
per-minute counts (:class:`queue_core.SupportsThroughput`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from queue_core import SupportsThroughput, ThroughputCount
from queue_core.rules.throughput import ENQUEUED, THROUGHPUT_RESOLUTION_MS, bucket_start

__all__ = ["MINUTES", "QueueThroughput", "queue_throughput", "spark_points"]

MINUTES = 60
"""Minutes shown: the current one and the 59 before it."""
WIDTH, HEIGHT = 120, 24
"""The sparkline's SVG viewBox."""
_FAILED = frozenset({"dead", "timed_out"})


@dataclass(frozen=True, slots=True)
class QueueThroughput:
    """One queue's last hour: totals per kind and the per-minute series."""

    queue: str
    totals: dict[str, int]
    """``enqueued`` and each final state (only the non-zero ones)."""
    finished: list[int]
    """Jobs finished in each of the :data:`MINUTES` minutes, oldest first."""
    failed: list[int]
    """Of those, ``dead`` or ``timed_out``."""

    @property
    def done(self) -> int:
        return sum(self.finished)

    @property
    def peak(self) -> int:
        return max(self.finished, default=0)

    @property
    def points(self) -> str:
        return spark_points(self.finished, self.peak)

    @property
    def failed_points(self) -> str:
        return spark_points(self.failed, self.peak)

    @property
    def title(self) -> str:
        parts = [f"{k.replace('_', ' ')} {n}" for k, n in sorted(self.totals.items())]
        return f"last hour: {', '.join(parts) or 'nothing'}; peak {self.peak}/min"


def spark_points(series: Sequence[int], peak: int) -> str:
    """The ``points`` of an SVG polyline drawing ``series`` in the viewBox, scaled to
    ``peak`` (a flat line at the bottom when ``peak`` is 0)."""
    step = WIDTH / max(len(series) - 1, 1)
    top = max(peak, 1)
    return " ".join(
        f"{i * step:.1f},{HEIGHT - 1 - (HEIGHT - 2) * n / top:.1f}" for i, n in enumerate(series)
    )


def _fold(counts: Sequence[ThroughputCount], first: int) -> dict[str, QueueThroughput]:
    out: dict[str, QueueThroughput] = {}
    totals: dict[str, Counter[str]] = {}
    for c in counts:
        row = out.get(c.queue)
        if row is None:
            row = out[c.queue] = QueueThroughput(c.queue, {}, [0] * MINUTES, [0] * MINUTES)
            totals[c.queue] = Counter()
        totals[c.queue][c.kind] += c.count
        i = (c.bucket - first) // THROUGHPUT_RESOLUTION_MS
        if c.kind != ENQUEUED and 0 <= i < MINUTES:
            row.finished[i] += c.count
            if c.kind in _FAILED:
                row.failed[i] += c.count
    for queue, t in totals.items():
        out[queue].totals.update(t)
    return out


def queue_throughput(storage: object, now_ms: int) -> dict[str, QueueThroughput] | None:
    """Each queue's last hour up to ``now_ms``; ``None`` when the storage cannot say."""
    if not isinstance(storage, SupportsThroughput):
        return None
    first = bucket_start(now_ms, THROUGHPUT_RESOLUTION_MS) - (MINUTES - 1) * (
        THROUGHPUT_RESOLUTION_MS
    )
    return _fold(storage.throughput(first, now=now_ms), first)
