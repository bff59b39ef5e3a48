"""Job text never drives the operator's terminal: an error message, a result and a task
name full of escape sequences (clear screen, window title, carriage return, an 8-bit CSI,
a bidirectional override) are shown as escapes by every ``queue-core`` command that
prints them -- ``dlq list|show``, ``jobs list|show``, ``flow show`` and the worker's
own log -- run as real subprocesses on a real SQLite file; ``--json``
keeps the exact values, as JSON escapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from queue_core import Queue

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "queue-core")

HOSTILE = "boom\x1b[2J\x1b]0;pwned\x07\rX\x9b31m\u202eevil\x00end"
"""Clear the screen, retitle the window (OSC ... BEL), go back to column 0, an 8-bit CSI,
a right-to-left override, a NUL."""
RAW = ["\x1b", "\x07", "\r", "\x9b", "\u202e", "\x00"]
SHOWN = "boom\\x1b[2J\\x1b]0;pwned\\x07"
"""How it starts once shown (a table cell turns the carriage return into a space)."""

APP = f"""
from queue_core import Queue

queue = Queue("sqlite:///{{db}}")
HOSTILE = {HOSTILE!r}


@queue.task(name="term.fail")
def fail() -> None:
    raise ValueError(HOSTILE)


@queue.task(name="term.ok" + {HOSTILE[4:12]!r})
def ok() -> str:
    return HOSTILE


flow = queue.flow("term-flow")


@flow.step()
def first() -> None:
    raise RuntimeError(HOSTILE)
"""


def _cli(app_dir: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUE_CORE_")}
    env["PYTHONPATH"] = f"{ROOT}:{app_dir}"
    result = subprocess.run(
        [CLI, *args], cwd=app_dir, env=env, capture_output=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    return result.stdout.decode("utf-8") + result.stderr.decode("utf-8")


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A SQLite file with a dead job, a succeeded job and a failed flow execution, all
    carrying :data:`HOSTILE`, and the worker's log of running them."""
    app_dir = tmp_path_factory.mktemp("term")
    db = app_dir / "term.db"
    (app_dir / "termapp.py").write_text(APP.replace("{db}", str(db)))
    sys.path.insert(0, str(app_dir))
    try:
        import termapp  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(app_dir))
    queue: Queue = termapp.queue
    dead = queue.tasks["term.fail"].delay().id
    done = next(t for n, t in queue.tasks.items() if n.startswith("term.ok")).delay().id
    execution = termapp.flow.start({}).id
    queue.close()
    sys.modules.pop("termapp", None)
    log = _cli(app_dir, "worker", "termapp:queue", "--burst")
    return {"dir": str(app_dir), "dead": dead, "done": done, "execution": execution, "log": log}


def _check(output: str) -> None:
    raw = [c for c in RAW if c in output]
    assert not raw, f"raw control characters {raw!r} reach the terminal: {output!r}"


TASK_SHOWN = "term.ok\\x1b[2J\\x1b]0"


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["dlq", "list"], SHOWN),
        (["dlq", "show", "{dead_id}"], SHOWN),
        (["jobs", "list"], TASK_SHOWN),
        (["jobs", "show", "{dead}"], SHOWN),
        (["jobs", "show", "{done}"], SHOWN),
        (["flow", "show", "{execution}"], SHOWN),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else "",
)
def test_tables_show_control_characters_as_escapes(
    stored: dict[str, str], args: list[str], shown: str
) -> None:
    app_dir = Path(stored["dir"])
    if "{dead_id}" in args:
        listed = json.loads(_cli(app_dir, "dlq", "list", "--json", "--app", "termapp:queue"))
        dead_id = next(e["id"] for e in listed if e["job_id"] == stored["dead"])
        stored = {**stored, "dead_id": dead_id}
    output = _cli(app_dir, *[a.format(**stored) for a in args], "--app", "termapp:queue")
    _check(output)
    assert shown in output  # the text is there, written as escapes


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("args", [["dlq", "list", "--json"], ["jobs", "show", "{dead}", "--json"]])
def test_json_keeps_the_values_and_escapes_them(stored: dict[str, str], args: list[str]) -> None:
    output = _cli(
        Path(stored["dir"]), *[a.format(**stored) for a in args], "--app", "termapp:queue"
    )
    _check(output)
    assert any(HOSTILE in s for s in _strings(json.loads(output)))


def test_the_worker_log_shows_control_characters_as_escapes(stored: dict[str, str]) -> None:
    log = stored["log"]
    assert "ValueError: boom" in log, log
    _check(log)
    assert "\\x1b[2J" in log
