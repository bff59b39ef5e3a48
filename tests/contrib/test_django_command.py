"""contrib.django: ``queue_core_worker`` runs a burst worker for settings.QUEUE_CORE_APP
(or --app) with a minimal ``settings.configure()``, and refuses without a queue."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TASKS = """
from queue_core import Queue, TaskError

queue = Queue({url!r})


@queue.task(name="dj.add")
def add(a, b):
    return a + b


@queue.task(name="dj.boom", max_retries=1, retry_backoff="10ms")
def boom():
    raise ValueError("boom")
"""

SCRIPT = """
import sys
import django
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

settings.configure(INSTALLED_APPS=["contrib.django"], **({settings!s}))
django.setup()
try:
    call_command("queue_core_worker", *sys.argv[1:])
except CommandError as exc:
    print("CommandError:", exc)
    sys.exit(3)
"""


def _run(tmp_path: Path, settings: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "run_command.py"
    script.write_text(SCRIPT.format(settings=settings))
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUE_CORE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(tmp_path)])
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_runs_a_burst_worker_for_the_settings_queue(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dj.db'}"
    (tmp_path / "djtasks.py").write_text(TASKS.format(url=url))
    sys.path.insert(0, str(tmp_path))
    try:
        import djtasks  # type: ignore[import-not-found]

        ok = djtasks.add.delay(2, 3)
        bad = djtasks.boom.delay()
        done = _run(tmp_path, "dict(QUEUE_CORE_APP='djtasks:queue')", "--burst", "--slots", "2")
        assert done.returncode == 0, done.stdout + done.stderr
        assert ok.result(timeout=5) == 5
        assert [d.reason for d in djtasks.queue.dead_letters()] == ["retries_exhausted"]
        assert len(bad.attempts()) == 2
        # --app wins over the setting; --queues limits the worker
        later = djtasks.add.delay(1, 1)
        other = _run(
            tmp_path,
            "dict(QUEUE_CORE_APP='nowhere:queue')",
            "--app",
            "djtasks:queue",
            "--queues",
            "default",
            "--burst",
        )
        assert other.returncode == 0, other.stdout + other.stderr
        assert later.result(timeout=5) == 2
        djtasks.queue.close()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("djtasks", None)


def test_the_command_names_what_is_missing(tmp_path: Path) -> None:
    missing = _run(tmp_path, "dict()", "--burst")
    assert missing.returncode == 3
    assert "QUEUE_CORE_APP" in missing.stdout and "--app MODULE:ATTR" in missing.stdout
    bad = _run(tmp_path, "dict(QUEUE_CORE_APP='nosuchmodule:queue')", "--burst")
    assert bad.returncode == 3
    assert "no module named 'nosuchmodule'" in bad.stdout
