"""The chaos drain on every backend (see tests/chaos/driver.py for what is checked).

Sizes: ``QC_CHAOS_JOBS`` jobs (default 1,000, the bounded form ``nox -s soak`` runs in CI;
``nox -s chaos`` sets 10,000) on SQLite, PostgreSQL, Redis and a Redis Cluster, a 20th of
that (at least 100) on SQS+DynamoDB, whose moto server handles one DynamoDB request at a
time. Each drain runs 3 worker processes and SIGKILLs one every 1-3 s (4-8 s on SQS).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.driver import ChaosReport, run_chaos

JOBS = int(os.environ.get("QC_CHAOS_JOBS", "1000"))
SIZES = {
    "sqlite": JOBS,
    "postgresql": JOBS,
    "redis": JOBS,
    "redis-cluster": JOBS,
    "sqs": max(100, JOBS // 20),
}
# seconds between kills (uniform in the range); moto drains 100 jobs in ~20 s, so SQS is
# killed every 1-2 s: with fewer kills (2-4 s: ~5 in a drain) all once landed on idle
# workers, and even aimed at a worker storage shows running (driver.busy_pids) a kill can
# come after a 50-150 ms body ended, moto's reads being slow
KILL_EVERY = {"sqs": (1.0, 2.0)}
FIXTURES = {
    "postgresql": "postgres_url",
    "redis": "redis_url",
    "redis-cluster": "redis_cluster_url",
    "sqs": "sqs_url",
}


@pytest.fixture
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    backend = request.param
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue(FIXTURES[backend]))


@pytest.mark.soak
@pytest.mark.chaos
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("url", list(SIZES), indirect=True)
def test_chaos_drain_loses_nothing(
    url: str, request: pytest.FixtureRequest, tmp_path: Path, chaos_reports: list[ChaosReport]
) -> None:
    backend = request.node.callspec.id
    kill_every = KILL_EVERY.get(backend, (1.0, 3.0))
    report = run_chaos(
        url, backend, SIZES[backend], tmp_path / "chaos", kill_every=kill_every, timeout=3000
    )
    chaos_reports.append(report)
    assert report.kills >= 1, "no worker was killed: the drain ended too soon to test anything"
    assert report.jobs_lost == 0
    assert report.violations == [], "\n".join(report.violations[:20])
    assert report.lost_attempts >= 1, "the kills hit no running attempt"
