"""``queue-core schedules [--json]`` and ``queue-core worker --no-scheduler`` (SPEC §11)."""

from __future__ import annotations

import importlib
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from contrib.cli import cli
from queue_core.testing import new_job

APP = """
from queue_core import Queue

queue = Queue({url!r})


@queue.periodic(every="5m", name="app.report")
def report():
    return "r"


@queue.periodic(cron="0 9 * * 1-5", tz="Europe/Berlin", name="app.standup")
def standup():
    return "s"
"""


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[str, ModuleType]]:
    name = f"sched_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP.format(url=f"sqlite:///{tmp_path / 'q.db'}"))
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(name)
        module.queue.migrate()
        yield f"{name}:queue", module
        module.queue.close()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_schedules_json_lists_every_or_cron_tz_last_and_next(
    app: tuple[str, ModuleType],
) -> None:
    spec, module = app
    result = CliRunner().invoke(cli, ["schedules", "--app", spec, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["task"] for r in rows] == ["app.report", "app.standup"]
    report, standup = rows
    assert (report["every"], report["cron"], report["tz"], report["last"]) == (
        300.0,
        None,
        "UTC",
        None,
    )
    assert (standup["every"], standup["cron"], standup["tz"]) == (
        None,
        "0 9 * * 1-5",
        "Europe/Berlin",
    )
    assert report["next"].endswith(":00+00:00") and report["next"][14:16] in {
        f"{m:02d}" for m in range(0, 60, 5)
    }
    storage = module.queue.storage()
    storage.enqueue_tick("app.report", 1_700_000_100_000, new_job(task_name="app.report"))
    again = json.loads(CliRunner().invoke(cli, ["schedules", "--app", spec, "--json"]).output)
    assert again[0]["last"] == "2023-11-14T22:15:00+00:00"


def test_schedules_table_shows_each_schedule(app: tuple[str, ModuleType]) -> None:
    spec, _ = app
    result = CliRunner().invoke(cli, ["schedules", "--app", spec])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["TASK", "SCHEDULE", "TZ", "LAST", "NEXT"]
    assert "every 300s" in lines[2] and "app.report" in lines[2]
    assert "0 9 * * 1-5" in lines[3] and "Europe/Berlin" in lines[3]


def test_worker_help_offers_no_scheduler() -> None:
    result = CliRunner().invoke(cli, ["worker", "--help"])
    assert "--no-scheduler" in result.output


TICKING_APP = """
from queue_core import Queue

queue = Queue({url!r})


@queue.periodic(every="1s", name="app.tick", queue="ticks")
def tick():
    return None
"""


def test_two_worker_processes_enqueue_each_one_second_tick_once(tmp_path: Path) -> None:
    """Real processes on one SQLite file: two schedule (one is SIGKILLed mid-run), a
    third runs --no-scheduler. The tick jobs stay queued (the workers serve another
    queue) so each can be counted: one per second, none twice, none lost."""
    import os
    import signal
    import subprocess
    import time

    from queue_core import Queue

    url = f"sqlite:///{tmp_path / 'q.db'}"
    (tmp_path / "ticking.py").write_text(TICKING_APP.format(url=url))
    script = str(Path(sys.executable).with_name("queue-core"))
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_CORE_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    base = [script, "worker", "ticking:queue", "-Q", "other", "--log-level", "INFO"]
    queue = Queue(url)
    queue.migrate()
    logs = [tmp_path / f"worker{i}.log" for i in range(3)]
    procs = []
    for extra, log in zip(([], [], ["--no-scheduler"]), logs, strict=True):
        with log.open("wb") as out:  # the child keeps its own copy of the descriptor
            procs.append(subprocess.Popen([*base, *extra], cwd=tmp_path, env=env, stderr=out))
    storage = queue.storage()

    def tick_count() -> int:
        return len(storage.list_jobs(queue="ticks", limit=100))  # type: ignore[attr-defined]

    def wait_for(ticks: int) -> None:
        deadline = time.monotonic() + 90  # a loaded machine starts Python slowly
        while time.monotonic() < deadline and not (
            all("starting" in log.read_text() for log in logs) and tick_count() >= ticks
        ):
            time.sleep(0.05)

    try:
        wait_for(2)
        time.sleep(0.3)  # the last one started has installed its signal handlers
        procs[1].kill()  # a scheduler dies mid-run, without a goodbye
        procs[1].wait(timeout=30)
        wait_for(tick_count() + 3)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=60)
    errors = [log.read_text()[-2000:] for log in logs]
    assert [p.returncode for p in procs] == [0, -signal.SIGKILL, 0], errors
    try:
        jobs = storage.list_jobs(queue="ticks", limit=100)  # type: ignore[attr-defined]
        ticks = sorted(j.run_at for j in jobs)
        # one job per second tick, none twice, none skipped between the first and last
        assert len(ticks) >= 5, errors
        assert ticks == list(range(ticks[0], ticks[-1] + 1, 1000))
        assert storage.schedule_ticks() == {"app.tick": ticks[-1]}  # type: ignore[attr-defined]
    finally:
        queue.close()
