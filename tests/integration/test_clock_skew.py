"""A worker whose clock is 2 minutes ahead cannot steal a lease or run a delayed job
early on the backends that judge time by the server's clock (PostgreSQL ``now()``,
Redis ``TIME``, also on a cluster): SPEC §4, "one clock judges expiry".

The skewed worker is this process with ``time.time``/``time.time_ns`` moved 120 s ahead
while it calls its own storage with ``now=None`` (what the worker does). Each test also
runs the same call with an explicit ``now`` 120 s ahead, which must take the job or the
lease: so a backend that read the local clock would fail the test. SQLite has no server
clock; its case shows that the local clock is what it judges by.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from queue_core.app.config import open_storage
from queue_core.records.jobs import NewJob
from queue_core.storage.abilities import SupportsWakeup
from queue_core.storage.protocol import Storage

SKEW_S = 120
SERVER_CLOCK = ["postgresql", "redis", "redis-cluster"]
FIXTURES = {
    "postgresql": "postgres_url",
    "redis": "redis_url",
    "redis-cluster": "redis_cluster_url",
}


@pytest.fixture
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue(FIXTURES[request.param]))


@pytest.fixture
def honest(url: str) -> Iterator[Storage]:
    s = open_storage(url)
    migrate = getattr(s, "migrate", None)
    if migrate is not None:
        migrate()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def skewed_storage(url: str, honest: Storage) -> Iterator[Storage]:
    s = open_storage(url)
    try:
        yield s
    finally:
        s.close()


@contextmanager
def clock_ahead(monkeypatch: pytest.MonkeyPatch, seconds: int) -> Iterator[None]:
    """This process's wall clock ``seconds`` ahead (monotonic time is left alone)."""
    real_time, real_ns = time.time, time.time_ns
    with monkeypatch.context() as m:
        m.setattr(time, "time", lambda: real_time() + seconds)
        m.setattr(time, "time_ns", lambda: real_ns() + seconds * 1_000_000_000)
        assert abs(time.time() - real_time() - seconds) < 1
        yield


def _job(job_id: str, delay_ms: int = 0) -> NewJob:
    return NewJob(
        id=job_id, task_name="t", queue="skew", payload=b"[]", delay_ms=delay_ms, max_attempts=3
    )


@pytest.mark.parametrize("url", SERVER_CLOCK, indirect=True)
def test_a_skewed_worker_does_not_run_a_delayed_job_early(
    honest: Storage, skewed_storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest.enqueue([_job("delayed", delay_ms=60_000)])
    job = honest.get_job("delayed")
    assert job is not None
    wakes = isinstance(skewed_storage, SupportsWakeup)
    if wakes:  # the first wait may return at once (PostgreSQL starts to LISTEN)
        skewed_storage.wait_for_jobs(["skew"], 0.01)
    with clock_ahead(monkeypatch, SKEW_S):
        assert skewed_storage.claim("skewed", ["skew"], 10, 30_000) == []
        if wakes:  # an idle skewed worker is not woken for the job either
            assert skewed_storage.wait_for_jobs(["skew"], 0.05) is False
    # the same claim judged by a clock 2 minutes ahead would take it
    ahead = job.run_at - 60_000 + SKEW_S * 1000
    got = skewed_storage.claim("skewed", ["skew"], 10, 30_000, now=ahead)
    assert [c.id for c in got] == ["delayed"]


@pytest.mark.parametrize("url", SERVER_CLOCK, indirect=True)
def test_a_skewed_worker_cannot_steal_a_lease(
    honest: Storage, skewed_storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest.enqueue([_job("leased")])
    (claimed,) = honest.claim("honest", ["skew"], 1, 30_000)
    with clock_ahead(monkeypatch, SKEW_S):
        assert skewed_storage.reap() == []
        assert skewed_storage.claim("skewed", ["skew"], 10, 30_000) == []
    renewed = honest.renew([claimed.ref], 30_000)
    assert renewed.lost == []
    job = honest.get_job("leased")
    assert job is not None and job.state.value == "running" and job.attempts == 1
    # a reaper judging by a clock 2 minutes ahead would take the lease
    ahead = claimed.lease_expires_at + SKEW_S * 1000
    reaped = skewed_storage.reap(now=ahead)
    assert [(r.job_id, r.attempt) for r in reaped] == [("leased", 1)]


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_sqlite_judges_by_the_local_clock(
    honest: Storage, skewed_storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No server clock: a process whose clock is ahead sees delayed jobs as due (one
    machine has one clock, which is why SQLite needs none of the above)."""
    honest.enqueue([_job("delayed", delay_ms=60_000)])
    assert skewed_storage.claim("skewed", ["skew"], 10, 30_000) == []
    with clock_ahead(monkeypatch, SKEW_S):
        got = skewed_storage.claim("skewed", ["skew"], 10, 30_000)
    assert [c.id for c in got] == ["delayed"]
