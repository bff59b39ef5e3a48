"""The installed ``queue-core`` console script, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from queue_core import JobState
from tests.contrib.conftest import App


def _script() -> str:
    path = Path(sys.executable).with_name("queue-core")
    assert path.exists(), f"console script not installed next to {sys.executable}: pip install -e ."
    return str(path)


def _run(app: App, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_CORE_URL"}
    return subprocess.run(
        [_script(), *args], cwd=app.dir, env=env, capture_output=True, text=True, timeout=90
    )


def test_console_script_worker_dlq_and_errors(app: App):
    ok = app.queue.enqueue("app.add", args=(1, 2))
    doomed = app.queue.enqueue("app.explode", args=(7,))

    # APP is found from the working directory, as with celery/rq.
    worker = _run(app, "worker", app.spec, "--burst", "--slots", "2")
    assert worker.returncode == 0, worker.stderr
    # the start line says what the worker runs (issue 23 item 6)
    assert (
        f"starting: app {app.spec}, storage {app.url}, queues default, slots 2, "
        "scheduler off, 3 tasks:\n  app.add (queue default)\n"
    ) in worker.stderr
    assert "stopped after 2 attempts" in worker.stderr
    assert app.queue.job(ok.id).result(timeout=1) == 3
    assert app.queue.job(doomed.id).status() is JobState.DEAD

    listed = _run(app, "dlq", "list", "--json", "--url", app.url)
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)
    assert (entry["job_id"], entry["reason"], entry["args"]) == (doomed.id, "fatal", [7])

    retried = _run(app, "dlq", "retry", entry["id"], "--url", app.url)
    assert retried.returncode == 0, retried.stderr
    said, _, new_id = retried.stdout.strip().rpartition(" ")
    assert said == f"replayed {entry['id']} as job"
    assert app.queue.job(new_id).info().replay_of == entry["id"]

    missing = _run(app, "dlq", "show", entry["id"], "--url", app.url)  # replayed: gone
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        f"Error: no dead-letter entry with id {entry['id']!r} or an id starting with it ({app.url})"
    ]

    bad_app = _run(app, "worker", "no_such_module_here:queue", "--burst")
    assert bad_app.returncode == 2
    assert "no module named 'no_such_module_here'" in bad_app.stderr
    assert "Traceback" not in bad_app.stderr


def test_python_m_queue_core_runs_the_command_line(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_CORE_URL"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    version = run("queue_core", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("queue-core, version ")
    url = f"sqlite:///{tmp_path / 'm.db'}"
    migrated = run("queue_core", "migrate", "--url", url)
    assert migrated.returncode == 0, migrated.stderr
    assert "Schema created, version" in migrated.stdout  # a new database
    usage = run("queue_core", "no-such-command")
    assert usage.returncode == 2 and "no-such-command" in usage.stderr
    # importing the package still loads no contrib module
    probe = (
        "import sys, queue_core; print(sorted(m for m in sys.modules if m.startswith('contrib')))"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert imported.stdout.strip() == "[]", imported.stdout + imported.stderr
