"""``queue-core workers`` against real worker processes (issue 14's acceptance): two live
workers are listed; after one is SIGKILLed it drops out within its ttl; the other
removes its record when it stops cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

from contrib.cli.workers import WORKER_COLUMNS
from tests.contrib.conftest import App
from tests.contrib.test_cli_ops_subprocess import _env, _run, _script

TTL = 2.0


def _listed(app: App) -> list[dict[str, Any]]:
    res = _run(app, "workers", "--json", "--url", app.url)
    assert res.returncode == 0, res.stderr
    rows: list[dict[str, Any]] = json.loads(res.stdout)
    return rows


def _until(what: str, check: Any, timeout: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if check():
            return time.monotonic() - began
        time.sleep(0.1)
    raise AssertionError(f"never happened within {timeout} s: {what}")


def test_workers_lists_live_workers_and_drops_a_killed_one_within_the_ttl(app: App) -> None:
    app.queue.migrate()
    env = {**_env(), "QUEUE_CORE_WORKER_TTL": f"{TTL}s"}
    procs = [
        subprocess.Popen(
            [
                _script(),
                "worker",
                app.spec,
                "--slots",
                str(n),
                "-Q",
                "default,mail",
                "--log-level",
                "WARNING",
            ],
            cwd=app.dir,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        for n in (2, 3)
    ]
    try:
        _until("two workers listed", lambda: len(_listed(app)) == 2, 60)
        rows = {r["pid"]: r for r in _listed(app)}
        assert set(rows) == {p.pid for p in procs}
        first, second = rows[procs[0].pid], rows[procs[1].pid]
        assert (first["slots"], second["slots"]) == (2, 3)
        assert first["queues"] == ["default", "mail"]
        assert (first["busy"], first["stuck"], first["ttl_ms"]) == (0, 0, 2000)
        assert first["last_seen"] >= first["started_at"]
        human = _run(app, "workers", "--url", app.url)
        assert human.stdout.splitlines()[0].split() == [
            w for col in WORKER_COLUMNS for w in col.split()
        ]
        assert str(procs[1].pid) in human.stdout

        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=10)
        killed_at = time.monotonic()
        _until("the killed worker dropped out", lambda: len(_listed(app)) == 1, TTL + 10)
        gone_after = time.monotonic() - killed_at
        assert [r["pid"] for r in _listed(app)] == [procs[1].pid]
        # its record was refreshed at most a third of the ttl before the kill, so it is
        # gone TTL after the kill at the latest (plus one CLI start-up for the last read)
        assert gone_after <= TTL + 3.0, gone_after

        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(timeout=30) == 0
        assert _listed(app) == []  # a clean stop removes the record at once
        assert "No live workers" in _run(app, "workers", "--url", app.url).stdout
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
