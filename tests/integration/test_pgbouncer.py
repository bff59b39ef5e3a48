"""PostgreSQL behind PgBouncer in transaction pooling mode (``?pgbouncer=true``).

The contract suite runs through the bouncer in tests/contract/test_pgbouncer.py; here:
real worker processes drain through it (each job exactly once), an idle worker notices a
job without ``LISTEN`` (it polls), and what goes wrong without the URL option.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from backends.sql import SQLStorage
from backends.sql.wakeup import PGBOUNCER_POLL_S
from queue_core import ConfigError, JobState, Queue, StorageError
from queue_core.testing import new_job
from tests.integration.helpers.drain_app import (
    read_log,
    register,
    spawn_workers,
    stop_all,
    wait_all,
    wait_for,
)
from tests.servers.pgbouncer import PgBouncer

JOBS = 600


@pytest.fixture
def bouncer_url(pgbouncer_server: PgBouncer, postgres_url: str) -> str:
    return pgbouncer_server.url_for(postgres_url)


@pytest.mark.timeout(180)
def test_two_workers_drain_through_pgbouncer_each_job_exactly_once(
    bouncer_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    q = Queue(bouncer_url)
    try:
        register(q).map([(i,) for i in range(JOBS)])
        t0 = time.monotonic()
        workers = spawn_workers(bouncer_url, log, 2, "--burst")
        try:
            wait_all(workers, log, timeout=150)
        finally:
            stop_all(workers)
        print(f"pgbouncer: drained {JOBS} with 2 workers in {time.monotonic() - t0:.2f} s")
        runs = read_log(log)
        assert sorted(runs) == list(range(JOBS))
        assert all(len(execs) == 1 and execs[0].attempt == 1 for execs in runs.values())
        (s,) = q.stats()
        assert (s.succeeded, s.ready, s.running, s.dead) == (JOBS, 0, 0, 0)
    finally:
        q.close()


@pytest.mark.timeout(60)
def test_an_idle_worker_behind_pgbouncer_polls_and_runs_a_later_job(
    bouncer_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    q = Queue(bouncer_url)
    workers = spawn_workers(bouncer_url, log, 1)
    try:
        time.sleep(1.0)  # the worker is up and idle (a real process: real time)
        handle = register(q).delay(7)
        wait_for(lambda: handle.status() is JobState.SUCCEEDED, 20, "the job ran", workers, log)
        assert [e.attempt for e in read_log(log)[7]] == [1]
    finally:
        stop_all(workers)
        q.close()


def test_wait_for_jobs_behind_pgbouncer_times_out_then_sees_a_ready_job(
    bouncer_url: str,
) -> None:
    storage = SQLStorage.from_url(bouncer_url)
    other = SQLStorage.from_url(bouncer_url)
    try:
        t0 = time.monotonic()
        assert storage.wait_for_jobs(["q"], 0.5) is False  # type: ignore[attr-defined]
        assert 0.45 <= time.monotonic() - t0 < 0.5 + 3 * PGBOUNCER_POLL_S
        timer = threading.Timer(0.3, lambda: other.enqueue([new_job(queue="q")], now=None))
        timer.start()
        t0 = time.monotonic()
        assert storage.wait_for_jobs(["q"], 10.0) is True  # type: ignore[attr-defined]
        assert time.monotonic() - t0 < 0.3 + 3 * PGBOUNCER_POLL_S
        timer.join()
    finally:
        storage.close()
        other.close()


def test_pgbouncer_option_must_be_a_boolean(postgres_url: str) -> None:
    with pytest.raises(ConfigError) as info:
        SQLStorage.from_url(postgres_url + "?pgbouncer=maybe")
    assert info.value.code == "invalid_option"
    assert "pgbouncer='maybe'" in str(info.value)
    assert "pgbouncer=true" in str(info.value)


def test_without_the_option_prepared_statements_collide_behind_pgbouncer(
    pgbouncer_server: PgBouncer, postgres_url: str
) -> None:
    """Why the option exists: psycopg prepares a statement on one server connection and
    the next transaction runs on another. The failure is a library error, not a hang."""
    url = pgbouncer_server.url_for(postgres_url).replace("?pgbouncer=true", "")
    stores = [SQLStorage.from_url(url) for _ in range(3)]
    failures: list[StorageError] = []
    try:
        for _ in range(10):
            for s in stores:
                try:
                    s.enqueue([new_job(queue="q")], now=None)
                    s.claim("w", ["q"], 1, 30_000)
                except StorageError as exc:
                    failures.append(exc)
    finally:
        for s in stores:
            s.close()
    assert failures, "no prepared-statement error without ?pgbouncer=true"
    assert "prepared statement" in str(failures[0])
    assert "add ?pgbouncer=true to the URL" in str(failures[0])


@pytest.mark.soak
@pytest.mark.timeout(300)
def test_measure_a_drain_direct_and_through_pgbouncer(
    pgbouncer_server: PgBouncer, postgres_url: str, tmp_path: Path
) -> None:
    """One burst worker drains 2,000 jobs straight to PostgreSQL, then 2,000 through the
    bouncer (the same database); prints both rates (see docs/backends/sql.md)."""
    n = 2000
    rates: dict[str, float] = {}
    bounced = pgbouncer_server.url_for(postgres_url)
    plain = postgres_url + "?pgbouncer=true"  # direct, but nothing prepared and no SET
    for name, url in (
        ("direct", postgres_url),
        ("pgbouncer", bounced),
        ("direct unprepared", plain),
        ("direct, no watchdog", postgres_url + "?socket_timeout=0"),
        ("direct again", postgres_url),
    ):
        log = tmp_path / f"{name}.log"
        q = Queue(url)
        try:
            register(q).map([(i,) for i in range(n)])
            t0 = time.monotonic()
            workers = spawn_workers(url, log, 1, "--burst")
            try:
                wait_all(workers, log, timeout=250)
            finally:
                stop_all(workers)
            runs = read_log(log)
            assert sorted(runs) == list(range(n))
            first = min(e.started for execs in runs.values() for e in execs)
            last = max(e.ended or 0.0 for execs in runs.values() for e in execs)
            rates[name] = n / (last - first)
            print(f"{name}: {time.monotonic() - t0:.2f} s from spawn")
        finally:
            q.close()
    print(
        f"drain of {n}, 1 worker, first start to last end: "
        + ", ".join(f"{k} {v:,.0f} jobs/s" for k, v in rates.items())
    )
