"""``queue-core pause|resume``, the pauses in ``stats`` and progress in ``jobs show``
(SPEC §13), on a memory:// app run in-process (one storage for every command)."""

from __future__ import annotations

import importlib
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

MEMORY_APP = """
from queue_core import JobContext, Queue

queue = Queue("memory://")


@queue.task(name="app.send", queue="emails")
def send(n):
    return n


@queue.task(name="app.copy")
def copy(ctx: JobContext = JobContext.INJECTED):
    ctx.progress(0.4, "40 of 100 files")
"""


@pytest.fixture
def mem_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, ModuleType]]:
    name = f"fcapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(MEMORY_APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("QUEUE_CORE_URL", raising=False)
    module = importlib.import_module(name)
    try:
        yield f"{name}:queue", module
    finally:
        sys.modules.pop(name, None)


def test_pause_is_listed_by_stats_and_resume_undoes_it(run: Any, mem_app: Any) -> None:
    spec, module = mem_app
    module.send.delay(1)
    paused = run("pause", "--queue", "emails", "--task", "app.copy", "--app", spec)
    assert paused.exit_code == 0, paused.output
    assert "queue" in paused.stdout and "emails" in paused.stdout and "app.copy" in paused.stdout
    table = run("stats", "--app", spec).stdout
    assert "emails (paused)" in table
    assert "Paused" in table and "app.copy" in table
    rows = json.loads(run("stats", "--json", "--app", spec).stdout)
    emails = next(r for r in rows if r["queue"] == "emails")
    assert emails["paused"] is True and emails["queued"] == 1
    task = next(r for r in rows if r["queue"] is None)
    assert (task["kind"], task["name"], task["paused"]) == ("task", "app.copy", True)
    listed = json.loads(run("resume", "--queue", "emails", "--json", "--app", spec).stdout)
    assert [(p["kind"], p["name"]) for p in listed] == [("task", "app.copy")]
    rows = json.loads(run("stats", "--json", "--app", spec).stdout)
    assert next(r for r in rows if r["queue"] == "emails")["paused"] is False


def test_a_paused_queue_without_jobs_has_a_row(run: Any, mem_app: Any) -> None:
    spec, _ = mem_app
    run("pause", "--queue", "quiet", "--app", spec)
    rows = json.loads(run("stats", "--json", "--app", spec).stdout)
    assert [r for r in rows if r["queue"] == "quiet"][0]["paused"] is True


def test_pause_without_a_target_is_a_usage_error(run: Any, mem_app: Any) -> None:
    spec, _ = mem_app
    result = run("pause", "--app", spec)
    assert result.exit_code == 2
    assert "queue=, task= or flow=" in result.stderr


_SHELF_APP = """
import sys
sys.path.insert(0, {src!r})
from shelf_queue.storage import ShelfStorage
from queue_core import Queue
queue = Queue(storage=ShelfStorage({path!r}))
"""


def test_pause_on_a_storage_that_cannot_is_refused_naming_the_ability(
    run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the example third-party backend (examples/shelf-backend) has no SupportsPause
    src = Path(__file__).resolve().parents[2] / "examples" / "shelf-backend" / "src"
    name = f"shelfapp_{uuid.uuid4().hex[:8]}"
    app = _SHELF_APP.format(src=str(src), path=str(tmp_path / "q.json"))
    (tmp_path / f"{name}.py").write_text(app)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        result = run("pause", "--queue", "q", "--app", f"{name}:queue")
    finally:
        sys.modules.pop(name, None)
    assert result.exit_code == 2
    assert "SupportsPause" in result.stderr


def test_pause_on_sqlite_is_stored(run: Any, tmp_path: Path) -> None:
    result = run("pause", "--queue", "q", "--url", f"sqlite:///{tmp_path / 'x.db'}")
    assert result.exit_code == 0, result.output
    assert "q" in result.stdout


def test_jobs_show_prints_the_latest_progress(run: Any, mem_app: Any) -> None:
    spec, module = mem_app
    handle = module.copy.delay()
    module.queue.run_worker(burst=True, install_signal_handlers=False)
    shown = run("jobs", "show", handle.id, "--app", spec).stdout
    assert "progress" in shown and "40% 40 of 100 files" in shown
    data = json.loads(run("jobs", "show", handle.id, "--json", "--app", spec).stdout)
    assert data["progress"]["fraction"] == 0.4
    assert data["progress"]["message"] == "40 of 100 files"
