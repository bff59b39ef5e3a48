"""contrib.metrics: the enqueued / finished counters count every process's jobs (they
come from storage's per-minute counts) and never decrease."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from prometheus_client import generate_latest

from backends.memory import MemoryStorage
from contrib.metrics import make_registry
from queue_core import Queue
from tests.contrib.dashboard.conftest import run_burst
from tests.contrib.dashboard.test_metrics import samples

_PRODUCER = """
import sys
from queue_core import Queue
q = Queue(sys.argv[1])
q.task(name="m.ok", queue="mail")(lambda i: i)
for i in range(int(sys.argv[2])):
    q.enqueue("m.ok", (i,))
q.close()
"""


def _produce(url: str, n: int) -> None:
    """Enqueue ``n`` jobs from another process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", _PRODUCER, url, str(n)], check=True, env=env, timeout=120)


def test_enqueued_and_finished_counters_count_other_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tp.db'}"
    q = Queue(url)
    q.migrate()
    q.task(name="m.ok", queue="mail")(lambda i: i)
    registry = make_registry(q)
    _produce(url, 30)
    text = generate_latest(registry).decode()
    assert samples(text, "queue_core_jobs_enqueued_total") == {(("queue", "mail"),): 30.0}
    assert samples(text, "queue_core_jobs_finished_total") == {}
    _produce(url, 12)
    run_burst(q, queues=["mail"])
    text = generate_latest(registry).decode()
    assert samples(text, "queue_core_jobs_enqueued_total") == {(("queue", "mail"),): 42.0}
    assert samples(text, "queue_core_jobs_finished_total") == {
        (("queue", "mail"), ("state", "succeeded")): 42.0
    }
    q.close()


def test_counters_do_not_drop_when_jobs_are_pruned() -> None:
    clock = [int(time.time() * 1000)]
    storage = MemoryStorage(retention_ms=0, clock=lambda: clock[0])
    q = Queue(storage=storage)
    q.task(name="t")(lambda: None)
    for _ in range(5):
        q.enqueue("t")
    run_burst(q)
    registry = make_registry(q)
    key = (("queue", "default"),)
    done = {(("queue", "default"), ("state", "succeeded")): 5.0}
    text = generate_latest(registry).decode()
    assert samples(text, "queue_core_jobs_enqueued_total") == {key: 5.0}
    assert samples(text, "queue_core_jobs_finished_total") == done
    assert storage.prune(limit=100) == 5  # the rows the counts were read from are gone
    text = generate_latest(registry).decode()
    assert samples(text, "queue_core_jobs_enqueued_total") == {key: 5.0}
    assert samples(text, "queue_core_jobs_finished_total") == done
    clock[0] += 60_000  # the next minute
    q.enqueue("t")
    q.enqueue("t")
    text = generate_latest(registry).decode()
    assert samples(text, "queue_core_jobs_enqueued_total") == {key: 7.0}
    assert samples(text, "queue_core_jobs_finished_total") == done
