"""The dashboard's workers page in a real headless browser, against a SQLite queue whose
registry holds a running worker's record, a second live record and a stale one."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contrib.dashboard import create_app
from contrib.dashboard.data import fmt_time
from queue_core import Queue
from queue_core.records.workers import WorkerInfo
from queue_core.storage.abilities import SupportsWorkerRegistry
from queue_core.worker import Worker
from tests.contrib.dashboard.test_browser import shot


def test_workers_page_lists_live_workers_with_every_field(
    tmp_path: Path, serve: Callable[[Any], str], page: Any, artifacts: Path
) -> None:
    queue = Queue(f"sqlite:///{tmp_path / 'workers.db'}")
    queue.migrate()
    storage = queue.storage()
    now = int(time.time() * 1000)
    other = WorkerInfo(
        id="box-2:4242:abcd",
        host="box-2",
        pid=4242,
        queues=("mail",),
        slots=4,
        busy=3,
        stuck=1,
        started_at=now - 60_000,
        last_seen=now,
        ttl_ms=600_000,
    )
    stale = WorkerInfo(
        id="gone:1:dead",
        host="gone",
        pid=1,
        queues=("default",),
        slots=1,
        busy=0,
        stuck=0,
        started_at=now - 120_000,
        last_seen=now - 60_000,
    )
    registry = storage
    assert isinstance(registry, SupportsWorkerRegistry)
    registry.register_worker(other)
    registry.register_worker(stale)
    worker = Worker(queue, slots=2, queues="default,reports", install_signal_handlers=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while len(registry.list_workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        base = serve(create_app(queue))
        page.goto(base + "/")
        page.click("nav a[href$='/workers']")
        assert page.locator("h1").inner_text() == "Workers"
        rows = page.locator("#workers tbody tr")
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.worker)") == [
            other.id,
            worker.id,
        ]  # sorted by host; the stale record is not listed
        mine = page.locator(f"#workers tr[data-worker='{worker.id}']")
        cells = {
            f: mine.locator(f"td[data-field='{f}']").inner_text().strip()
            for f in ("pid", "queues", "slots", "busy", "stuck")
        }
        assert cells == {
            "pid": str(os.getpid()),
            "queues": "default, reports",
            "slots": "2",
            "busy": "0",
            "stuck": "0",
        }
        theirs = page.locator(f"#workers tr[data-worker='{other.id}']")
        assert theirs.locator("td[data-field='stuck']").inner_text() == "1"
        assert theirs.locator("td[data-field='busy']").inner_text() == "3"
        assert theirs.locator("td[data-field='started']").inner_text() == fmt_time(other.started_at)
        assert theirs.locator("td[data-field='last_seen']").inner_text() == fmt_time(now)
        shot(page, artifacts, "workers")
    finally:
        worker.stop()
        thread.join(30)
        # the stopped worker removed its record
        assert [w.id for w in registry.list_workers()] == [other.id]
        queue.close()
