"""Connection loss, concurrent processes on one SQLite file, and wake-ups."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from backends.sql import SQLStorage
from queue_core.records.errors import StorageUnavailable
from queue_core.testing import T0, new_job
from tests.servers.postgres import PostgresServer


def test_postgres_restart_raises_unavailable_then_recovers(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    storage = SQLStorage(postgres_url)
    try:
        storage.enqueue([new_job()], now=T0)
        postgres_server.stop()
        try:
            with pytest.raises(StorageUnavailable):
                storage.enqueue([new_job()], now=T0)
        finally:
            postgres_server.start()
        recovered = False
        for _ in range(3):  # the first call may still meet a pooled dead connection
            try:
                storage.enqueue([new_job()], now=T0)
                recovered = True
                break
            except StorageUnavailable:
                continue
        assert recovered
        assert len(storage.claim("w", ["default"], 10, 1000, now=T0)) == 2
    finally:
        storage.close()


def test_postgres_storage_built_while_the_server_is_down_works_once_it_is_up(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """A worker started while PostgreSQL is down builds its storage, and waits: each call
    is ``StorageUnavailable`` until the server is up, then the same storage works (the
    engine's first connection, the schema check, the prepared statements all happen on
    a call that succeeds, not at build)."""
    postgres_server.stop()
    try:
        storage = SQLStorage.from_url(postgres_url)
        with pytest.raises(StorageUnavailable):
            storage.enqueue([new_job()], now=T0)
        with pytest.raises(StorageUnavailable):
            storage.claim("w", ["default"], 10, 1000, now=T0)
    finally:
        postgres_server.start()
    try:
        storage.enqueue([new_job()], now=T0)
        assert (
            len(storage.claim("w", ["default"], 10, 1000, now=T0)) == 1
        )  # the failed one wrote nothing
    finally:
        storage.close()


_CLAIMER = textwrap.dedent(
    """
    import sys
    from backends.sql import SQLStorage
    from queue_core.records.jobs import (
        Action,
        AttemptEnd,
        Decision,
        Outcome,
    )
    s = SQLStorage(sys.argv[1])
    got = []
    while True:
        batch = s.claim(sys.argv[2], ["default"], 4, 60_000)
        if not batch:
            break
        got.extend(c.id for c in batch)
        s.finish([AttemptEnd(ref=c.ref, outcome=Outcome.SUCCEEDED,
                             decision=Decision(action=Action.COMPLETE)) for c in batch])
    s.close()
    print("\\n".join(got))
    """
)


def test_sqlite_processes_claim_each_job_exactly_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    storage = SQLStorage(url)
    jobs = [new_job() for _ in range(400)]
    storage.enqueue(jobs)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CLAIMER, url, f"w{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[3],
        )
        for i in range(4)
    ]
    claimed: list[str] = []
    for p in procs:
        out, err = p.communicate(timeout=100)
        assert p.returncode == 0, err.decode()
        claimed.extend(line for line in out.decode().split() if line)
    try:
        assert sorted(claimed) == sorted(j.id for j in jobs)
        assert all(s.succeeded == 400 for s in storage.stats())
    finally:
        storage.close()


def _enqueue_later(url: str, delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        other = SQLStorage(url)
        other.enqueue([new_job()])
        other.close()

    th = threading.Thread(target=run)
    th.start()
    return th


def test_sqlite_wait_for_jobs_wakes_on_an_enqueue_from_another_connection(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    storage = SQLStorage(url)
    try:
        storage.migrate()
        assert storage.wait_for_jobs(["default"], 0.05) is False
        th = _enqueue_later(url, 0.2)
        assert storage.wait_for_jobs(["default"], 30.0) is True
        th.join()
        assert storage.wait_for_jobs(["default"], 0.01) is True  # ready now: at once
        assert storage.wait_for_jobs(["other"], 0.05) is False
    finally:
        storage.close()


def test_postgres_wait_for_jobs_wakes_on_notify(postgres_url: str) -> None:
    storage = SQLStorage(postgres_url)
    try:
        storage.wait_for_jobs(["default"], 0.0)  # starts listening
        assert storage.wait_for_jobs(["default"], 0.05) is False
        th = _enqueue_later(postgres_url, 0.2)
        assert storage.wait_for_jobs(["default"], 30.0) is True
        th.join()
    finally:
        storage.close()
