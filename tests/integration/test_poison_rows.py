"""Poison rows (issue 26 item 2): one corrupt field in a stored job is dead-lettered alone.

A job whose stored record has one field that cannot be read -- a Redis hash with
``ma=banana``, a SQLite row with ``run_at='yesterday'``, a PostgreSQL row with garbage in
a text column the code reads, a DynamoDB item whose number is a string -- ends ``dead``
with reason ``corrupt_record``; the healthy jobs claimed in the same batch run; the reaper
does not loop on it; and every read path shows it: ``Queue.job(id).info()``,
``list_jobs``, ``dead_letters``, the CLI's ``jobs list``, ``jobs show`` and ``dlq list``,
and the dashboard's job pages.

Each backend writes the corrupt value with its own client, straight into storage.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contrib.cli import cli
from queue_core import JobState, Queue
from queue_core.records.jobs import Reason
from tests.integration._backends import backend_url

Corrupt = Callable[[Queue, str], None]
"""Writes one corrupt field into the stored record of job ``id`` of a queue."""


def _sqlite(column: str, value: Any) -> Corrupt:
    def corrupt(q: Queue, job_id: str) -> None:
        path = q.url.split("sqlite:///", 1)[1].split("?", 1)[0]
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.execute(f"UPDATE qc_jobs SET {column} = ? WHERE id = ?", (value, job_id))

    return corrupt


def _postgres(column: str, value: Any) -> Corrupt:
    def corrupt(q: Queue, job_id: str) -> None:
        import psycopg

        with psycopg.connect(q.url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            conn.execute(f"UPDATE qc_jobs SET {column} = %s WHERE id = %s", (value, job_id))

    return corrupt


def _redis(field: str, value: Any) -> Corrupt:
    def corrupt(q: Queue, job_id: str) -> None:
        storage: Any = q.storage()
        (home,) = storage.store.homes.find([job_id])  # a queue's own on a cluster
        key = storage.keys.job(job_id, home)
        if value is None:
            storage.store.client.hdel(key, field)
        else:
            storage.store.client.hset(key, field, value)

    return corrupt


def _dynamo(attr: str, value: Any) -> Corrupt:
    def corrupt(q: Queue, job_id: str) -> None:
        from backends.sqs.codec import enc

        store: Any = q.storage().store  # type: ignore[attr-defined]
        key = store.keys.job(job_id)
        names = {"#a": attr}
        if value is None:
            store.ddb.update_item(TableName=store.table, Key=key, UpdateExpression="REMOVE #a",
                                  ExpressionAttributeNames=names)  # fmt: skip
        else:
            store.ddb.update_item(TableName=store.table, Key=key, UpdateExpression="SET #a = :v",
                                  ExpressionAttributeNames=names,
                                  ExpressionAttributeValues={":v": enc(value)})  # fmt: skip

    return corrupt


CASES: dict[str, tuple[str, Corrupt]] = {
    "sqlite-run_at": ("sqlite", _sqlite("run_at", "yesterday")),
    "sqlite-max_attempts": ("sqlite", _sqlite("max_attempts", "banana")),
    "sqlite-priority": ("sqlite", _sqlite("priority", "high")),
    "sqlite-enqueued_at": ("sqlite", _sqlite("enqueued_at", b"\x00\xff")),
    "sqlite-task_name": ("sqlite", _sqlite("task_name", b"\xff\xfe")),
    "sqlite-timeout_ms": ("sqlite", _sqlite("timeout_ms", "soon")),
    "postgres-options": ("postgres", _postgres("options", "{not json")),  # bad_payload
    "postgres-task_name": ("postgres", _postgres("task_name", "")),  # unknown_task
    "redis-ma": ("redis", _redis("ma", "banana")),
    "redis-att": ("redis", _redis("att", "x")),
    "redis-ma-bytes": ("redis", _redis("ma", b"\x80")),  # shown escaped: the record reads
    "redis-eq": ("redis", _redis("eq", None)),
    "redis-tn": ("redis", _redis("tn", b"\xff\xfe")),
    "redis-st": ("redis", _redis("st", "banana")),
    # a hash without its state: the claim dropped it as a deleted job while the queue's
    # count kept it queued, so a burst worker waited forever (found by nox -s fuzz)
    "redis-st-gone": ("redis", _redis("st", None)),
    "redis_cluster-st-gone": ("redis_cluster", _redis("st", None)),
    "redis_cluster-ma": ("redis_cluster", _redis("ma", "banana")),
    "redis_cluster-tn": ("redis_cluster", _redis("tn", b"\xff\xfe")),
    # another queue's name: the claim took it, its finish moved that queue's counts, and
    # its own queue's running count never dropped (a burst worker waited forever)
    "redis-q": ("redis", _redis("q", "banana")),
    "redis-q-gone": ("redis", _redis("q", None)),
    "redis_cluster-q": ("redis_cluster", _redis("q", "banana")),
    "sqs-ma": ("sqs", _dynamo("ma", "banana")),
    "sqs-pr": ("sqs", _dynamo("pr", "high")),
    "sqs-enq-gone": ("sqs", _dynamo("enq", None)),  # listed, not a KeyError
    "sqs-to": ("sqs", _dynamo("to", "soon")),  # the claim's deadline math: not a TypeError
    "sqs-task": ("sqs", _dynamo("task", None)),
    "sqs-pr-gone": ("sqs", _dynamo("pr", None)),  # the dashboard's counts: found by nox -s fuzz
    # a run time that is text: moto failed every claim and count over it (a burst worker
    # never ended, neighbours never ran); DynamoDB would hide the job forever
    "sqs-ra": ("sqs", _dynamo("ra", "soon")),
    "sqs-ra-bytes": ("sqs", _dynamo("ra", b"\x00")),
    # the dashboard's throughput filter compared it with numbers: moto failed the page
    "sqs-enq-text": ("sqs", _dynamo("enq", "x")),
}

EXPECTED = {"postgres-options": Reason.BAD_PAYLOAD, "postgres-task_name": Reason.UNKNOWN_TASK}
"""The reason of a case whose field reads but says something wrong (else corrupt_record)."""


def _body(x: int) -> int:
    return x * 2


def _queue(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> Queue:
    return Queue(backend_url(request, tmp_path, backend), lease=1.0)


def _cli(q: Queue, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--url", q.url, *args], catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.output,
        result.exception,
    )
    assert result.exit_code == 0, (args, result.output)
    return result.output


def _reads_survive(q: Queue, job_id: str) -> None:
    """Every read path shows the job (or its absence) without raising."""
    from contrib.dashboard import create_app
    from tests.contrib.dashboard.conftest import local_client

    q.job(job_id).info()
    q.job(job_id).status()
    assert job_id in {j.id for j in q.storage().list_jobs(limit=100)}
    q.dead_letters()
    assert job_id[:8] in _cli(q, "jobs", "list", "--limit", "100")
    assert job_id in _cli(q, "jobs", "show", job_id)
    _cli(q, "dlq", "list")
    client = local_client(create_app(q))
    assert client.get("/jobs").status_code == 200
    assert client.get(f"/jobs/{job_id}").status_code == 200
    assert client.get("/").status_code == 200


@pytest.mark.parametrize("case", list(CASES))
def test_a_corrupt_job_is_dead_lettered_alone_and_its_neighbours_run(
    case: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    backend, corrupt = CASES[case]
    q = _queue(request, tmp_path, backend)
    try:
        q.migrate()
        task = q.task(name="poison.body", max_retries=0)(_body)
        handles = [task.delay(n) for n in range(6)]
        bad = handles[2]
        corrupt(q, bad.id)
        _reads_survive(q, bad.id)  # before the worker: queued and corrupt
        q.run_worker(burst=True, install_signal_handlers=False, reap_interval=0.2, slots=6)
        for n, h in enumerate(handles):
            if h is not bad:
                assert h.status() is JobState.SUCCEEDED, (n, h.info())
                assert h.result(timeout=1) == 2 * n
        info = q.storage().get_job(bad.id)
        assert info is not None
        assert info.state is JobState.DEAD, info
        # a text column PostgreSQL keeps reads as text: the worker judges what it says
        reason = EXPECTED.get(case, Reason.CORRUPT_RECORD).value
        assert info.reason == reason, info
        assert info.error is not None, info
        if reason == Reason.CORRUPT_RECORD.value:
            assert "corrupt" in info.error.message, info
        assert [d.reason for d in q.dead_letters()] == [reason]
        assert q.storage().reap() == []
        _reads_survive(q, bad.id)
    finally:
        q.close()


INERT: dict[str, tuple[str, Corrupt]] = {
    "sqlite-state": ("sqlite", _sqlite("state", "banana")),
    "postgres-state": ("postgres", _postgres("state", "banana")),
}
"""A row whose state is no state at all is neither claimed nor reaped on SQL (finding
one would scan every row); the read paths show it, marked corrupt."""


@pytest.mark.parametrize("case", list(INERT))
def test_a_job_whose_state_is_garbage_is_shown_and_harms_no_neighbour(
    case: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    backend, corrupt = INERT[case]
    q = _queue(request, tmp_path, backend)
    try:
        q.migrate()
        task = q.task(name="poison.body", max_retries=0)(_body)
        handles = [task.delay(n) for n in range(4)]
        corrupt(q, handles[1].id)
        q.run_worker(burst=True, install_signal_handlers=False, reap_interval=0.2, slots=4)
        assert [h.status() for h in handles if h is not handles[1]] == [JobState.SUCCEEDED] * 3
        info = q.storage().get_job(handles[1].id)
        assert info is not None and info.reason == Reason.CORRUPT_RECORD.value, info
        assert info.error is not None and "banana" in info.error.message
        _reads_survive(q, handles[1].id)
    finally:
        q.close()


RUNNING: dict[str, tuple[str, Corrupt]] = {
    "sqlite-lease_expires_at": ("sqlite", _sqlite("lease_expires_at", "soon")),
    "sqlite-max_attempts": ("sqlite", _sqlite("max_attempts", "banana")),
    "sqlite-ahead_refunds": ("sqlite", _sqlite("ahead_refunds", "banana")),
    "redis-ma": ("redis", _redis("ma", "banana")),
    "redis-sa": ("redis", _redis("sa", "noon")),
    "redis_cluster-ma": ("redis_cluster", _redis("ma", "banana")),
    "sqs-ma": ("sqs", _dynamo("ma", "banana")),
}


@pytest.mark.parametrize("case", list(RUNNING))
def test_the_reaper_dead_letters_a_corrupt_running_job_once(
    case: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A running job whose record is corrupted while its worker is gone: one reap
    dead-letters it ``corrupt_record`` (no error, no loop); the next reap finds nothing."""
    backend, corrupt = RUNNING[case]
    q = _queue(request, tmp_path, backend)
    try:
        q.migrate()
        task = q.task(name="poison.body", max_retries=2)(_body)
        victim, neighbour = task.delay(1), task.delay(2)
        storage = q.storage()
        claimed = storage.claim("w-gone", ["default"], 1, 1000)
        assert [c.id for c in claimed] == [victim.id]
        corrupt(q, victim.id)
        _reads_survive(q, victim.id)
        later = claimed[0].lease_expires_at + 5_000
        reaped = storage.reap(now=later)
        assert [(r.job_id, r.state) for r in reaped] == [(victim.id, JobState.DEAD)]
        assert storage.reap(now=later + 1) == []
        info = storage.get_job(victim.id)
        assert info is not None and info.state is JobState.DEAD, info
        assert info.reason == Reason.CORRUPT_RECORD.value, info
        q.run_worker(burst=True, install_signal_handlers=False)
        assert neighbour.status() is JobState.SUCCEEDED
        _reads_survive(q, victim.id)
    finally:
        q.close()


LATE: dict[str, tuple[str, Corrupt]] = {
    "sqlite": ("sqlite", _sqlite("schedule_to_start_ms", -220583854)),
    "postgres": ("postgres", _postgres("schedule_to_start_ms", -220583854)),
    "redis": ("redis", _redis("ss", "-220583854")),
    "redis_cluster": ("redis_cluster", _redis("ss", "-220583854")),
    "sqs": ("sqs", _dynamo("s2s", -220583854)),
}


@pytest.mark.parametrize("case", list(LATE))
def test_a_start_bound_written_after_enqueue_ends_the_job_and_the_burst(
    case: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A queued job given a schedule-to-start bound that has passed, written into its
    record after it was enqueued (so no index knows it): a burst worker ends, the
    neighbours run, and the job ends -- run (SQL and SQS read the bound from their
    indexed expiry, which the write did not move) or ``schedule_to_start`` (Redis reads
    it from the record). On Redis the claim left it in place for a reaper that never
    heard of it, so the burst waited forever (found by ``nox -s fuzz``)."""
    backend, corrupt = LATE[case]
    q = _queue(request, tmp_path, backend)
    try:
        q.migrate()
        task = q.task(name="poison.body", max_retries=0)(_body)
        handles = [task.delay(n) for n in range(3)]
        corrupt(q, handles[1].id)
        q.run_worker(burst=True, install_signal_handlers=False, reap_interval=0.2, slots=3)
        assert handles[0].status() is handles[2].status() is JobState.SUCCEEDED
        info = q.storage().get_job(handles[1].id)
        assert info is not None
        assert (info.state, info.reason) in {
            (JobState.SUCCEEDED, None),
            (JobState.DEAD, "schedule_to_start"),
        }, info
    finally:
        q.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_expiry_written_apart_from_the_bound_is_put_back_and_the_job_runs(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A queued job with no schedule-to-start bound whose ``expires_at`` says it expired:
    the claims passed it by and the reaper, judging by the bound, left it -- queued
    forever, a burst worker waiting on it (found by ``nox -s fuzz``). The reaper now puts
    the expiry back from the bound and the job runs."""
    corrupt = _sqlite if backend == "sqlite" else _postgres
    q = _queue(request, tmp_path, backend)
    try:
        q.migrate()
        task = q.task(name="poison.body", max_retries=0)(_body)
        handles = [task.delay(n) for n in range(3)]
        corrupt("expires_at", -39517)(q, handles[1].id)
        q.run_worker(burst=True, install_signal_handlers=False, reap_interval=0.2, slots=3)
        assert [h.status() for h in handles] == [JobState.SUCCEEDED] * 3
        assert handles[1].result(timeout=1) == 2
    finally:
        q.close()
