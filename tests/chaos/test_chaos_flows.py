"""The chaos drain with flows on the backends with ``SupportsFlows``: SQLite, PostgreSQL,
Redis and SQS+DynamoDB (memory keeps no state across processes). See
tests/chaos/flows_driver.py for what is checked.

Size: ``QC_CHAOS_FLOWS`` diamond executions, default a tenth of ``QC_CHAOS_JOBS`` (so 100
in the bounded form ``nox -s soak`` runs, 1,000 under ``nox -s chaos``); on SQS+DynamoDB,
whose moto server handles one DynamoDB request at a time, a 20th of that (at least 20).
3 worker processes, one SIGKILLed every 1-3 s (4-8 s on SQS).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.flows_driver import run_flow_chaos

EXECUTIONS = int(
    os.environ.get(
        "QC_CHAOS_FLOWS", str(max(50, int(os.environ.get("QC_CHAOS_JOBS", "1000")) // 10))
    )
)
SIZES = {
    "sqlite": EXECUTIONS,
    "postgresql": EXECUTIONS,
    "redis": EXECUTIONS,
    "sqs": max(20, EXECUTIONS // 20),
}
# seconds between kills (uniform in the range); moto drains slowly, so SQS is killed less
KILL_EVERY = {"sqs": (4.0, 8.0)}
FIXTURES = {"postgresql": "postgres_url", "redis": "redis_url", "sqs": "sqs_url"}


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
def test_chaos_flows_every_execution_ends_and_each_step_succeeds_once(
    url: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    backend = request.node.callspec.id
    report = run_flow_chaos(
        url,
        backend,
        SIZES[backend],
        tmp_path / "chaos",
        kill_every=KILL_EVERY.get(backend, (1.0, 3.0)),
        timeout=1800,
    )
    print(report.line())
    assert report.kills >= 1, "no worker was killed: the drain ended too soon to test anything"
    assert report.stalled == 0
    assert report.violations == [], "\n".join(report.violations[:20])
    assert report.lost_attempts >= 1, "the kills hit no running step"
