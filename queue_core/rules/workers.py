"""The rule for a "live" worker and how often a worker refreshes its record."""

from __future__ import annotations

from collections.abc import Sequence

from queue_core.records.workers import WorkerInfo

__all__ = ["is_live", "live_workers", "refresh_interval"]


def is_live(info: WorkerInfo, now: int) -> bool:
    """Whether ``info`` counts as a live worker at ``now`` (epoch ms): refreshed within
    its ``ttl_ms``. The one rule for "live"; every backend filters with it."""
    return now < info.last_seen + info.ttl_ms


def live_workers(infos: Sequence[WorkerInfo], now: int) -> tuple[list[WorkerInfo], list[str]]:
    """Split ``infos`` into the live ones (sorted by host, pid, id) and the ids of the
    dead ones (for storage to delete)."""
    live = sorted((i for i in infos if is_live(i, now)), key=lambda i: (i.host, i.pid, i.id))
    return live, [i.id for i in infos if not is_live(i, now)]


def refresh_interval(ttl_ms: int) -> float:
    """Seconds between a worker's refreshes of its record: a third of its ``ttl_ms``, so
    two refreshes may fail before it drops out."""
    return ttl_ms / 3000.0
