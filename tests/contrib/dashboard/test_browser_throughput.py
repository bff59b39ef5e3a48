"""The queues page's "last hour" throughput column in a real headless browser, against a
SQLite queue with jobs finished over the last half hour at known minutes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contrib.dashboard import create_app
from queue_core import Queue
from queue_core.rules.throughput import bucket_start
from queue_core.testing import complete_end, dead_end, new_job
from tests.contrib.dashboard.test_browser import shot

MIN = 60_000


def _finish_at(queue: Queue, name: str, t: int, ok: int, dead: int) -> None:
    """Enqueue ``ok + dead`` jobs on queue ``name`` at ``t`` and end them at ``t``."""
    storage = queue.storage()
    storage.enqueue([new_job(queue=name) for _ in range(ok + dead)], now=t)
    got = storage.claim("w", [name], ok + dead, MIN, now=t)
    ends = [complete_end(c.ref) for c in got[:ok]] + [dead_end(c.ref) for c in got[ok:]]
    assert storage.finish(ends, now=t) == [True] * len(ends)


def test_queues_page_draws_the_last_hour(
    tmp_path: Path, serve: Callable[[Any], str], page: Any, artifacts: Path
) -> None:
    queue = Queue(f"sqlite:///{tmp_path / 'tp.db'}")
    queue.migrate()
    now = int(time.time() * 1000)
    start = bucket_start(now, MIN) - 30 * MIN
    per_minute = {m: (m % 7 + 1, 2 if m % 5 == 0 else 0) for m in range(30)}
    for m, (ok, dead) in per_minute.items():
        _finish_at(queue, "mail", start + m * MIN + 5_000, ok, dead)
    queue.storage().enqueue([new_job(queue="old")], now=now - 2 * 60 * MIN)  # idle for an hour
    done = sum(ok + dead for ok, dead in per_minute.values())

    page.goto(serve(create_app(queue)) + "/")
    cell = page.locator("td[data-throughput='mail']")
    assert cell.locator("[data-kind=finished]").inner_text() == str(done)
    assert cell.locator("[data-kind=enqueued]").inner_text() == str(done)
    line = cell.locator("polyline.done").get_attribute("points").split()
    assert len(line) == 60
    ys = [float(p.split(",")[1]) for p in line]
    peak = max(ok + dead for ok, dead in per_minute.values())
    # minute m of the seed is point 29 + m (the current minute is the last point)
    for m, (ok, dead) in per_minute.items():
        assert abs(ys[29 + m] - (23 - 22 * (ok + dead) / peak)) < 0.11, m
    assert ys[:29] == [23.0] * 29  # nothing before the seed
    assert cell.locator("polyline.failed").count() == 1
    title = cell.locator("svg title").text_content() or ""
    assert f"succeeded {done - 12}" in title and "dead 12" in title
    assert page.locator("td[data-throughput='old']").inner_text().strip() == "idle"
    shot(page, artifacts, "queues_throughput")
    queue.close()
