"""``queue-core worker --log-format text|json`` and the formatters behind it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contrib.logformat import JsonFormatter, TextFormatter, configure_logging
from queue_core import ConfigError, JobState
from tests.contrib.conftest import App


def _record(msg: str, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("inner")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.getLogger("queue_core.worker").makeRecord(
        "queue_core.worker", logging.WARNING, __file__, 1, msg, (), exc_info
    )


@pytest.mark.parametrize("exc", [False, True])
def test_text_formatter_prints_what_the_stdlib_format_prints(exc: bool) -> None:
    stdlib = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    ours = TextFormatter()
    for rec in (_record("first", exc), _record("second", exc)):
        assert ours.format(rec) == stdlib.format(rec)


def test_json_formatter_puts_event_fields_on_the_line() -> None:
    rec = _record("hello", exc=True)
    rec.event = {"event": "attempt_end", "job_id": "j1", "duration_s": 0.5, "duration_ms": 500.0}
    data = json.loads(JsonFormatter().format(rec))
    assert data["message"] == "hello" and data["level"] == "WARNING"
    assert data["job_id"] == "j1" and data["duration_ms"] == 500.0
    assert "duration_s" not in data and "ValueError: inner" in data["exc"]
    assert data["ts"].endswith("+00:00")


def test_bad_format_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        configure_logging("INFO", "xml")
    assert info.value.code == "invalid_log_format" and "'xml'" in str(info.value)


def _worker(app: App, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("queue-core")
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_CORE_URL"}
    return subprocess.run(
        [str(script), "worker", app.spec, "--burst", *args],
        cwd=app.dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_json_worker_log_has_one_object_per_line_with_the_event_fields(app: App) -> None:
    ok = app.module.add.delay(1, 2)
    dead = app.module.flaky_forever.delay()
    proc = _worker(app, "--log-format", "json")
    assert proc.returncode == 0, proc.stderr
    assert ok.status() is JobState.SUCCEEDED and dead.status() is JobState.DEAD
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    ends = [line for line in lines if line.get("event") == "attempt_end"]
    by_job = {(e["job_id"], e["attempt"]): e for e in ends}
    assert set(by_job) == {(ok.id, 1), (dead.id, 1), (dead.id, 2)}
    first = by_job[(ok.id, 1)]
    assert first["task"] == "app.add" and first["outcome"] == "succeeded"
    assert first["reason"] is None and first["queue"] == "default"
    assert first["level"] == "INFO" and first["duration_ms"] >= 0
    assert first["worker_id"] and all(e["worker_id"] == first["worker_id"] for e in ends)
    last = by_job[(dead.id, 2)]
    assert last["level"] == "WARNING" and last["outcome"] == "failed"
    assert last["reason"] == "error" and last["dead_reason"] == "retries_exhausted"
    assert last["error_class"] == "ValueError"
    # the lines the worker says besides attempt ends are JSON too
    assert any(line["message"].startswith("worker ") for line in lines if "event" not in line)


def test_text_is_the_default(app: App) -> None:
    ok = app.module.add.delay(1, 2)
    proc = _worker(app)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if f"job {ok.id} attempt 1" in x)
    assert " INFO queue_core.worker: app.add job " in line
    assert line.endswith(" s") and not line.startswith("{")
