"""Promises of SECURITY.md that hold today, each tested on real storage.

* Values reach SQL and Lua only as parameters: ids and queue names made of SQL and Lua
  syntax are stored verbatim and harm nothing else.
* The default serializer never unpickles: a pickle written straight into storage is
  dead-lettered ``bad_payload`` and its code does not run.
* A recorded error message and traceback are size-capped (thread isolation).
* Credentials stay out of reprs and errors (Redis and Redis Cluster URLs).
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from queue_core import JobState, Queue
from queue_core.errors import StorageUnavailable
from queue_core.model import NewJob
from queue_core.registry import open_storage
from tests.servers.redis import RedisServer

BACKENDS = ["sqlite", "postgresql", "redis"]
FIXTURES = {"postgresql": "postgres_url", "redis": "redis_url"}
HOSTILE = [
    "x'); DROP TABLE qc_jobs; --",
    'q" OR 1=1 --',
    "a]]..redis.call('FLUSHALL')..[[b",
    "{qc}:j:*",
    "tab\tnew\nline",
]


@pytest.fixture
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue(FIXTURES[request.param]))


@pytest.mark.parametrize("url", BACKENDS, indirect=True)
def test_sql_and_lua_syntax_in_values_is_stored_verbatim(url: str) -> None:
    storage = open_storage(url)
    try:
        migrate = getattr(storage, "migrate", None)
        if migrate is not None:
            migrate()
        storage.enqueue([NewJob(id="bystander", task_name="t", queue="plain", payload=b"[]")])
        jobs = [
            NewJob(id=f"{text}#{k}", task_name=text, queue=text, payload=text.encode())
            for k, text in enumerate(HOSTILE)
        ]
        storage.enqueue(jobs)
        for job in jobs:
            got = storage.get_job(job.id)
            assert got is not None
            assert (got.task_name, got.queue, got.payload) == (
                job.task_name,
                job.queue,
                job.payload,
            )
            (claimed,) = storage.claim("w", [job.queue], 5, 30_000)
            assert claimed.id == job.id
        bystander = storage.get_job("bystander")
        assert bystander is not None and bystander.state is JobState.QUEUED
        assert {s.queue for s in storage.stats()} == {"plain", *HOSTILE}
    finally:
        storage.close()


class _Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, ...]]:
        return (os.mkdir, (self.marker,))


@pytest.mark.parametrize("url", ["sqlite", "redis"], indirect=True)
def test_a_pickle_in_storage_is_never_unpickled_by_default(url: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    q = Queue(url)
    try:
        q.migrate()

        @q.task(name="victim")
        def victim(*args: object) -> None:
            raise AssertionError("the body must not run")

        payload = pickle.dumps(((_Exploit(str(marker)),), {}))
        q.storage().enqueue([NewJob(id="evil", task_name="victim", queue="default",
                                    payload=payload, max_attempts=3)])  # fmt: skip
        q.run_worker(burst=True, install_signal_handlers=False)
        job = q.storage().get_job("evil")
        assert job is not None
        assert (job.state, job.reason) == (JobState.DEAD, "bad_payload")
        assert not marker.exists()
    finally:
        q.close()


def test_recorded_error_messages_and_tracebacks_are_capped(tmp_path: Path) -> None:
    q = Queue(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        q.migrate()

        @q.task(name="loud")
        def loud() -> None:
            raise RuntimeError("x" * 1_000_000)

        handle = loud.apply()
        q.run_worker(burst=True, install_signal_handlers=False)
        (attempt,) = handle.attempts()
        assert attempt.message is not None and attempt.traceback is not None
        assert 0 < len(attempt.message) <= 8 * 1024
        assert 0 < len(attempt.traceback) <= 32 * 1024
    finally:
        q.close()


def test_redis_and_cluster_credentials_stay_out_of_reprs_and_errors(
    redis_server: RedisServer,
) -> None:
    secret = "pw-9f3e1c"
    s = open_storage(f"redis://user:{secret}@127.0.0.1:{redis_server.port}/0")
    try:
        assert secret not in repr(s)
    finally:
        s.close()
    with pytest.raises(StorageUnavailable) as info:
        open_storage(f"redis+cluster://user:{secret}@127.0.0.1:1/?socket_connect_timeout=0.5")
    assert secret not in str(info.value)
    assert secret not in repr(info.value)
