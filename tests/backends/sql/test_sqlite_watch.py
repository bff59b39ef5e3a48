"""SQLite's idle waiter on Linux: a write to the database's directory (a commit's
``-wal`` frames) ends a poll's pause at once (backends/sql/sqlite_watch.py)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from backends.sql import SQLStorage, wakeup
from backends.sql.sqlite_watch import DirWatch
from queue_core.testing.fixtures import new_job

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


def test_a_write_in_the_directory_ends_the_wait(tmp_path: Path) -> None:
    watch = DirWatch.open(str(tmp_path))
    assert watch is not None
    try:
        assert watch.wait(0.01) is False  # nothing written
        (tmp_path / "f").write_bytes(b"x")
        begun = time.monotonic()
        assert watch.wait(30.0) is True  # written before the call: at once
        assert time.monotonic() - begun < 5.0
        assert watch.wait(0.01) is False  # the events were read
    finally:
        watch.close()
        watch.close()  # idempotent


def test_no_watch_on_a_missing_directory(tmp_path: Path) -> None:
    assert DirWatch.open(str(tmp_path / "missing")) is None


def test_a_commit_from_another_connection_wakes_the_waiter_before_its_next_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With polls 60 s apart, only the watch can end the wait on time."""
    monkeypatch.setattr(wakeup, "poll_interval", lambda quiet: 60.0)
    url = f"sqlite:///{tmp_path / 'q.db'}"
    waiter, other = SQLStorage(url), SQLStorage(url)
    try:
        waiter.migrate()
        assert waiter.wait_for_jobs(["default"], 0.05) is False  # listening from here

        def enqueue() -> None:
            time.sleep(0.2)
            other.enqueue([new_job()], now=None)

        th = threading.Thread(target=enqueue)
        th.start()
        begun = time.monotonic()
        assert waiter.wait_for_jobs(["default"], 120.0) is True
        assert time.monotonic() - begun < 30.0
        th.join()
    finally:
        waiter.close()
        other.close()
