"""Worker-side Prometheus metrics: ``WorkerMetrics`` and ``queue-core worker --metrics-port``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contrib.worker_metrics import WorkerMetrics
from queue_core import ConfigError, JobState, Queue
from tests.contrib.conftest import App
from tests.servers.ports import free_port


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _attempts_by_outcome(samples: dict[str, list[tuple[dict[str, str], float]]]) -> Counter[str]:
    got: Counter[str] = Counter()
    for labels, value in samples.get("queue_core_worker_attempts_total", []):
        got[f"{labels['task']}/{labels['outcome']}/{labels['reason']}"] += int(value)
    return got


def _stored(jobs: list[object]) -> Counter[str]:
    want: Counter[str] = Counter()
    for job in jobs:
        for a in job.attempts():  # type: ignore[attr-defined]
            want[f"{job.info().task_name}/{a.outcome}/{a.reason or ''}"] += 1  # type: ignore[attr-defined]
    return want


def test_counts_equal_the_attempts_in_storage_and_labels_are_capped() -> None:
    from prometheus_client import generate_latest

    queue = Queue("memory://")
    names = [f"t{i}" for i in range(4)]
    tasks = {}
    for name in names:

        def body(fail: bool) -> None:
            if fail:
                raise ValueError("no")

        tasks[name] = queue.task(name=name, max_retries=1, retry_backoff="1ms", retry_jitter=0)(
            body
        )
    jobs = [tasks[n].delay(i % 3 == 0) for i, n in enumerate(names * 5)]
    metrics = WorkerMetrics(max_tasks=2)
    queue.run_worker(burst=True, install_signal_handlers=False, listeners=[metrics])
    samples = _samples(generate_latest(metrics.registry).decode())
    want = _stored(jobs)
    # two tasks keep their names; the other two are counted under "other"
    folded: Counter[str] = Counter()
    kept = {labels["task"] for labels, _ in samples["queue_core_worker_attempts_total"]}
    assert len(kept - {"other"}) == 2 and "other" in kept
    for key, n in want.items():
        task, rest = key.split("/", 1)
        folded[f"{task if task in kept else 'other'}/{rest}"] += n
    assert _attempts_by_outcome(samples) == folded
    assert sum(folded.values()) == sum(1 for j in jobs for _ in j.attempts()) > len(jobs)
    count = sum(v for _, v in samples["queue_core_worker_attempt_duration_seconds_count"])
    assert count == sum(folded.values())
    picked = sum(v for _, v in samples["queue_core_worker_pickup_latency_seconds_count"])
    assert picked == count  # memory:// reports run_at
    assert [v for _, v in samples["queue_core_worker_busy_slots"]] == [0.0]  # stopped
    assert all(j.status() in (JobState.SUCCEEDED, JobState.DEAD) for j in jobs)


def test_bad_cap_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        WorkerMetrics(max_tasks=0)
    assert info.value.code == "invalid_option" and "max_tasks 0" in str(info.value)


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())


def test_worker_metrics_port_serves_what_it_recorded(app: App) -> None:
    ok = [app.module.add.delay(i, 1) for i in range(30)]
    bad = [app.module.flaky_forever.delay() for _ in range(5)]
    fatal = [app.module.explode.delay(i) for i in range(3)]
    jobs = ok + bad + fatal
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_CORE_URL"}
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("queue-core")),
            "worker",
            app.spec,
            "--metrics-port",
            str(port),
            "--reap-interval",
            "0.2",
        ],
        cwd=app.dir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(j.status() in (JobState.SUCCEEDED, JobState.DEAD) for j in jobs):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the worker did not finish the jobs")
        want = _stored(jobs)
        # the worker counts an end when it records it: the scrape may precede the last
        # one by a moment, never the other way round
        while True:
            got = _attempts_by_outcome(_samples(_scrape(port)))
            if got == want or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert got == want
        assert want["app.add/succeeded/"] == 30 and want["app.flaky_forever/failed/error"] == 10
        assert sum(n for k, n in want.items() if k.startswith("app.explode/failed/")) == 3, want
        samples = _samples(_scrape(port))
        assert [v for _, v in samples["queue_core_worker_slots"]] == [8.0]
        assert sum(v for _, v in samples["queue_core_worker_pickup_latency_seconds_count"]) == 43
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"metrics at http://127.0.0.1:{port}/metrics" in err


def test_port_in_use_is_a_usage_error(app: App) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k != "QUEUE_CORE_URL"}
        proc = subprocess.run(
            [
                str(Path(sys.executable).with_name("queue-core")),
                "worker",
                app.spec,
                "--burst",
                "--metrics-port",
                str(port),
            ],
            cwd=app.dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2 and f"invalid --metrics-port {port}" in proc.stderr
