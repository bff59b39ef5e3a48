"""Soak (``nox -s soak``): console-script workers share one SQLite file under load and SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from queue_core import JobState
from tests.contrib.conftest import App


def _worker(app: App, *extra: str) -> subprocess.Popen[str]:
    script = Path(sys.executable).with_name("queue-core")
    assert script.exists(), "console script missing: pip install -e ."
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_CORE_URL"}
    return subprocess.Popen(
        [str(script), "worker", app.spec, "--slots", "4", "--reap-interval", "1",
         "--log-level", "WARNING", *extra],
        cwd=app.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


@pytest.mark.soak
def test_workers_drain_a_mixed_load_and_stop_gracefully_on_sigterm(app: App):
    q = app.queue
    adds = [q.enqueue("app.add", args=(i, 1)).id for i in range(150)]
    explodes = [q.enqueue("app.explode", args=(i,)).id for i in range(30)]
    flakies = [q.enqueue("app.flaky_forever").id for _ in range(20)]

    # A long-running worker is stopped with SIGTERM part-way through...
    long_running = _worker(app)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = sum(s.succeeded + s.dead for s in q.stats())
        if done >= 20:
            break
        time.sleep(0.05)
    long_running.send_signal(signal.SIGTERM)
    _out, err = long_running.communicate(timeout=60)
    assert long_running.returncode == 0, err

    # ... and two burst workers finish the rest side by side.
    bursts = [_worker(app, "--burst") for _ in range(2)]
    for proc in bursts:
        _out, err = proc.communicate(timeout=110)
        assert proc.returncode == 0, err

    for i, job_id in enumerate(adds):
        assert q.job(job_id).result(timeout=1) == i + 1
        records = q.job(job_id).attempts()
        assert [r.outcome.value for r in records if r.outcome][-1] == "succeeded"
        assert sum(1 for r in records if r.outcome and r.outcome.value == "succeeded") == 1
    for job_id in explodes:
        info = q.job(job_id).info()
        assert (info.state, info.reason) == (JobState.DEAD, "fatal")
    for job_id in flakies:
        info = q.job(job_id).info()
        assert (info.state, info.reason) == (JobState.DEAD, "retries_exhausted")
    dead = q.dead_letters(limit=1000)
    assert sorted(d.job_id for d in dead) == sorted(explodes + flakies)
    assert all(s.running == 0 and s.ready == 0 for s in q.stats())
