"""contrib.metrics: the scrape-time collector agrees with what storage holds."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from backends.memory import MemoryStorage
from contrib.dashboard import create_app
from contrib.metrics import OTHER, STATS_STATES, StorageCollector, make_registry
from queue_core import ConfigError, Queue, StorageError, TaskError
from tests.contrib.dashboard.conftest import Populated, local_client, run_burst


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """``{sorted label pairs: value}`` of one metric in Prometheus text output."""
    found: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                found[tuple(sorted(s.labels.items()))] = s.value
    return found


def scrape(target: Any, **options: Any) -> str:
    return generate_latest(make_registry(target, **options)).decode()


def attempts_in_storage(q: Queue) -> Counter[tuple[str, str, str, str]]:
    storage = q.storage()
    counts: Counter[tuple[str, str, str, str]] = Counter()
    offset = 0
    while True:
        page = storage.list_jobs(limit=500, offset=offset)  # type: ignore[attr-defined]
        for job in page:
            for a in storage.list_attempts(job.id):
                outcome = a.outcome.value if a.outcome is not None else "running"
                counts[(job.queue, job.task_name, outcome, a.reason or "")] += 1
        offset += len(page)
        if len(page) < 500:
            return counts


def test_metrics_after_a_1000_job_drain_equal_storage(tmp_path: Path) -> None:
    q = Queue(f"sqlite:///{tmp_path / 'drain.db'}")

    @q.task(name="m.ok")
    def ok(i: int) -> int:
        return i

    @q.task(name="m.fatal")
    def fatal(i: int) -> None:
        raise TaskError.fatal(f"no {i}")

    @q.task(name="m.retry", max_retries=2, retry_backoff="1ms", retry_jitter=0)
    def retry(i: int) -> None:
        raise ValueError(f"again {i}")

    @q.task(name="m.other", queue="side")
    def other(i: int) -> int:
        return -i

    ok.map([(i,) for i in range(850)])
    fatal.map([(i,) for i in range(50)])
    retry.map([(i,) for i in range(50)])
    other.map([(i,) for i in range(50)])
    run_burst(q, slots=8)

    # served by the dashboard at /metrics, with both scans turned on
    scans = {"scan_attempts": True, "scan_dead_letters": True}
    text = local_client(create_app(q, metrics_options=scans)).get("/metrics").text

    jobs = samples(text, "queue_core_jobs")
    expected_jobs = {
        (("queue", s.queue), ("state", state)): float(getattr(s, state))
        for s in q.stats()
        for state in STATS_STATES
    }
    assert jobs == expected_jobs
    assert jobs[(("queue", "default"), ("state", "succeeded"))] == 850
    assert jobs[(("queue", "default"), ("state", "dead"))] == 100

    attempts = samples(text, "queue_core_attempts")
    expected_attempts = {
        (("outcome", o), ("queue", qn), ("reason", r), ("task", t)): float(n)
        for (qn, t, o, r), n in attempts_in_storage(q).items()
    }
    assert attempts == expected_attempts
    by_outcome: Counter[str] = Counter()
    for labels, n in attempts.items():
        by_outcome[dict(labels)["outcome"]] += int(n)
    assert by_outcome == {"succeeded": 900, "failed": 50 + 150}
    assert samples(text, "queue_core_attempts_scan_jobs") == {(): 1000.0}
    assert samples(text, "queue_core_attempts_scan_truncated") == {(): 0.0}

    dead = samples(text, "queue_core_dead_letters")
    assert dead == {(("task", "m.fatal"),): 50.0, (("task", "m.retry"),): 50.0}
    assert samples(text, "queue_core_storage_up") == {(): 1.0}
    q.close()


def _queue_with_tasks(n_tasks: int, per_task: list[int]) -> Queue:
    q = Queue(storage=MemoryStorage())
    for t in range(n_tasks):
        name = f"t{t}"

        def body() -> None:
            raise TaskError.fatal("x")

        q.task(name=name)(body)
        for _ in range(per_task[t]):
            q.enqueue(name)
    run_burst(q)
    return q


def test_task_labels_are_capped_and_the_rest_folded_into_other() -> None:
    q = _queue_with_tasks(6, [6, 5, 4, 3, 2, 1])
    text = scrape(q, max_tasks=3, scan_attempts=True, scan_dead_letters=True)
    dead = samples(text, "queue_core_dead_letters")
    assert dead == {
        (("task", "t0"),): 6.0,
        (("task", "t1"),): 5.0,
        (("task", "t2"),): 4.0,
        (("task", OTHER),): 6.0,
    }
    attempts = samples(text, "queue_core_attempts")
    tasks = {dict(k)["task"] for k in attempts}
    assert tasks == {"t0", "t1", "t2", OTHER}
    assert sum(attempts.values()) == 21
    # no cap reached: no "other"
    no_cap = scrape(q, scan_dead_letters=True)
    assert {dict(k)["task"] for k in samples(no_cap, "queue_core_dead_letters")} == {
        f"t{i}" for i in range(6)
    }


def test_queue_labels_are_capped() -> None:
    q = Queue(storage=MemoryStorage())
    for i, n in enumerate([3, 2, 1]):
        for _ in range(n):
            q.enqueue("x", queue=f"q{i}", delay=3600, allow_unregistered=True)
    jobs = samples(scrape(q, max_queues=1), "queue_core_jobs")
    assert jobs[(("queue", "q0"), ("state", "scheduled"))] == 3
    assert jobs[(("queue", OTHER), ("state", "scheduled"))] == 3
    assert {dict(k)["queue"] for k in jobs} == {"q0", OTHER}


def test_scan_limits_are_reported() -> None:
    q = _queue_with_tasks(2, [5, 5])
    scans = {"scan_attempts": True, "scan_dead_letters": True}
    text = scrape(q, max_scan_jobs=4, max_scan_dead=3, **scans)
    assert samples(text, "queue_core_attempts_scan_jobs") == {(): 4.0}
    assert samples(text, "queue_core_attempts_scan_truncated") == {(): 1.0}
    assert sum(samples(text, "queue_core_attempts").values()) == 4
    assert samples(text, "queue_core_dead_letters_scan_truncated") == {(): 1.0}
    assert sum(samples(text, "queue_core_dead_letters").values()) == 3
    exact = scrape(q, max_scan_jobs=10, max_scan_dead=10, **scans)
    assert samples(exact, "queue_core_attempts_scan_truncated") == {(): 0.0}
    assert samples(exact, "queue_core_dead_letters_scan_truncated") == {(): 0.0}


def test_both_scans_are_off_by_default(populated: Populated) -> None:
    text = scrape(populated.queue)
    names = {f.name for f in text_string_to_metric_families(text)}
    assert not {n for n in names if "attempts" in n or "dead_letters" in n}, names
    assert samples(text, "queue_core_jobs")
    assert "queue_core_attempts" in scrape(populated.queue, scan_attempts=True)
    assert "queue_core_dead_letters" in scrape(populated.queue, scan_dead_letters=True)


def test_a_running_attempt_counts_as_running(populated: Populated) -> None:
    attempts = samples(scrape(populated.queue, scan_attempts=True), "queue_core_attempts")
    running = {k: v for k, v in attempts.items() if dict(k)["outcome"] == "running"}
    assert running == {
        (("outcome", "running"), ("queue", "held"), ("reason", ""), ("task", "dash.held")): 1.0
    }


class _Exploding(MemoryStorage):
    calls = 0

    def stats(self, *, now: int | None = None) -> Any:
        type(self).calls += 1
        raise StorageError("down")


def test_registration_reads_nothing_and_a_failing_storage_reports_down() -> None:
    storage = _Exploding()
    registry = make_registry(storage)  # describe() at registration must not read storage
    assert _Exploding.calls == 0
    text = generate_latest(registry).decode()
    assert _Exploding.calls == 1
    assert samples(text, "queue_core_storage_up") == {(): 0.0}
    assert samples(text, "queue_core_jobs") == {}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_tasks": 0}, "max_tasks"),
        ({"max_queues": "5"}, "max_queues"),
        ({"max_scan_jobs": -1}, "max_scan_jobs"),
        ({"max_scan_dead": True}, "max_scan_dead"),
    ],
)
def test_bad_caps_raise_config_error(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        StorageCollector(MemoryStorage(), **kwargs)
    assert info.value.field == field
    assert "expected an integer" in str(info.value)


def test_metric_names_start_with_queue_core(populated: Populated) -> None:
    names = {f.name for f in text_string_to_metric_families(scrape(populated.queue))}
    assert names and all(n.startswith("queue_core_") for n in names)
