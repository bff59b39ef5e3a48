"""The operations commands through the installed ``queue-core`` console script: piped
(as a script runs them) and on a pseudo-terminal (as a person does: prompt and bar)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from queue_core import JobState
from tests.contrib.conftest import App


def _script() -> str:
    path = Path(sys.executable).with_name("queue-core")
    assert path.exists(), f"console script not installed next to {sys.executable}: pip install -e ."
    return str(path)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "QUEUE_CORE_URL"}


def _run(app: App, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_script(), *args], cwd=app.dir, env=_env(), input=stdin, capture_output=True,
        text=True, timeout=90,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


def _on_a_terminal(app: App, args: list[str], answer: bytes) -> tuple[int, str]:
    """Run the script with stdin/stdout/stderr on a pty; answer the first ``[y/N]``."""
    main, child = pty.openpty()
    proc = subprocess.Popen([_script(), *args], cwd=app.dir, env=_env(),
                            stdin=child, stdout=child, stderr=child, close_fds=True)
    os.close(child)
    out = b""
    answered = False
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
            if not answered and b"[y/N]" in out:
                os.write(main, answer)
                answered = True
        return proc.wait(timeout=30), out.decode(errors="replace")
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()


def test_console_script_jobs_list_cancel_and_dlq_retry_all(app: App):
    ok = app.queue.enqueue("app.add", args=(1, 2))
    for i in range(3):
        app.queue.enqueue("app.explode", args=(i,))
    app.queue.run_worker(burst=True, slots=2)
    waiting = app.queue.enqueue("app.add", args=(5,))

    listed = _run(app, "jobs", "list", "--json", "--url", app.url)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert rows[0]["id"] == waiting.id  # newest first
    assert {r["id"]: r["result"] for r in rows}[ok.id] == 3

    cancelled = _run(app, "jobs", "cancel", waiting.id, "--url", app.url)
    assert cancelled.returncode == 0, cancelled.stderr
    assert app.queue.job(waiting.id).status() is JobState.CANCELLED
    unknown = _run(app, "jobs", "cancel", "nope", "--url", app.url)
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == (
        f"Error: no job with id 'nope' or an id starting with it ({app.url})"
    )

    # A script (stdin not a terminal) must say --yes; it is refused, not left waiting.
    refused = _run(app, "dlq", "retry", "--all", "--url", app.url)
    assert refused.returncode == 1
    assert "pass --yes" in refused.stderr
    piped = _run(app, "dlq", "retry", "--all", "--url", app.url, stdin="y\n")
    assert piped.returncode == 1  # an answer on a pipe is not a person's confirmation
    assert len(app.queue.dead_letters()) == 3

    retried = _run(app, "dlq", "retry", "--all", "--task", "app.explode", "--yes",
                   "--url", app.url)
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == (
        "Retried 3 dead-letter entries of task 'app.explode' as new jobs.")
    assert retried.stderr == ""  # no progress bar: stderr is a pipe
    assert app.queue.dead_letters() == []


def test_console_script_on_a_terminal_asks_and_shows_progress(app: App):
    for i in range(4):
        app.queue.enqueue("app.explode", args=(i,))
    app.queue.run_worker(burst=True, slots=2)
    args = ["dlq", "purge", "--url", app.url]

    code, out = _on_a_terminal(app, args, b"n\n")
    assert code == 1, out
    assert f"Delete 4 dead-letter entries from {app.url}? [y/N]" in out
    assert len(app.queue.dead_letters()) == 4

    code, out = _on_a_terminal(app, args, b"y\n")
    assert code == 0, out
    assert "Purging" in out and "4/4" in out  # the bar, at its end
    assert "Purged 4 dead-letter entries." in out
    assert app.queue.dead_letters() == []
