"""Promises of SECURITY.md that hold today, each tested on real storage.

* Values reach SQL and Lua only as parameters: ids and queue names made of SQL and Lua
  syntax are stored verbatim and harm nothing else.
* The default serializer never unpickles: a pickle written straight into storage is
  dead-lettered ``bad_payload`` and its code does not run.
* A recorded error message and traceback are size-capped (thread isolation).
* Credentials stay out of reprs and errors (Redis and Redis Cluster URLs) and out of a
  worker's output, when it connects and when the password is refused.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from queue_core import JobState, Queue
from queue_core.app.config import open_storage
from queue_core.records.errors import StorageUnavailable
from queue_core.records.jobs import NewJob
from tests.servers.redis import RedisServer, start_redis_server, stop_redis_server

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "queue-core")

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


def loud() -> None:
    """Module level, so a process child can import it."""
    _loud(300)


def _loud(depth: int) -> None:
    if depth:
        _loud(depth - 1)
    raise RuntimeError("x" * 1_000_000)


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_recorded_error_messages_and_tracebacks_are_capped(tmp_path: Path, isolation: str) -> None:
    """A 1 MB message 300 frames deep: the message keeps its first 4 KiB, the traceback its
    last 8 KiB (naming the raise), for a thread body and a process-isolated one alike."""
    q = Queue(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        q.migrate()
        handle = q.task(name="loud", isolation=isolation, max_retries=0)(loud).apply()
        q.run_worker(burst=True, install_signal_handlers=False)
        (attempt,) = handle.attempts()
        assert attempt.message is not None and attempt.traceback is not None
        assert attempt.message.startswith("xxx") and len(attempt.message) == 4 * 1024 + 1
        assert len(attempt.traceback) <= 8 * 1024 + 20
        # the frames survive the huge message: it is cut inside the traceback too
        assert "in _loud" in attempt.traceback
        assert attempt.traceback.rstrip().endswith("RuntimeError: " + "x" * 4082 + "…")
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
    cluster = open_storage(f"redis+cluster://user:{secret}@127.0.0.1:1/?socket_connect_timeout=0.5")
    try:
        assert secret not in repr(cluster)
        with pytest.raises(StorageUnavailable) as info:  # connects at its first call
            cluster.stats()
    finally:
        cluster.close()
    assert secret not in str(info.value)
    assert secret not in repr(info.value)


_RETRIED = "failed during the storage outage"
"""What a refused worker logs at debug level on each retry (``queue_core.worker.outage``)."""


def _output_of(proc: subprocess.Popen[str], timeout: float = 8.0) -> str:
    """Everything ``proc`` prints until it exits, or -- a refused worker retries until
    stopped -- until it logged three retries (or ``timeout`` passed) and was terminated."""
    assert proc.stdout is not None
    lines: list[str] = []
    retried = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if sum(_RETRIED in seen for seen in lines) >= 3:
                retried.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    end = time.monotonic() + timeout
    while proc.poll() is None and not retried.is_set() and time.monotonic() < end:
        retried.wait(0.05)
    if proc.poll() is None:
        proc.terminate()
    proc.wait(20)
    reader.join(20)
    proc.stdout.close()
    return "".join(lines)


def test_a_worker_never_logs_the_storage_password(tmp_path: Path) -> None:
    """A worker at debug level, on a Redis that requires a password, then on the same URL
    with a wrong password (every connection refused): its output never shows either."""
    secret, wrong = "pw-5d1e7a9b", "pw-0bad0bad"
    server = start_redis_server()
    try:
        admin = redis.Redis(host="127.0.0.1", port=server.port)
        admin.config_set("requirepass", secret)
        admin.close()
        app = tmp_path / "secapp.py"
        app.write_text(
            "import os\n"
            "from queue_core import Queue\n"
            "queue = Queue(os.environ['QC_SEC_URL'])\n"
            "@queue.task(name='hello')\n"
            "def hello() -> str:\n"
            "    return 'hi'\n"
        )
        for password in (secret, wrong):
            url = f"redis://default:{password}@127.0.0.1:{server.port}/0?prefix=sec"
            env = dict(os.environ, QC_SEC_URL=url, PYTHONPATH=f"{ROOT}:{tmp_path}")
            proc = subprocess.Popen(
                [CLI, "worker", "secapp:queue", "--burst", "--log-level", "debug"],
                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip
            output = _output_of(proc)
            assert output, "the worker printed nothing: the test would prove nothing"
            assert password not in output, output[-2000:]
            if password == wrong:  # the retries' lines were read too
                assert output.count(_RETRIED) >= 3, output[-2000:]
    finally:
        stop_redis_server(server)
