"""Session fixture for a real redis server (owned by the redis backend).

One ``redis-server`` per test session on a free loopback port, without persistence,
stopped at the end. A server that does not start is an error, never a skip. Tests isolate
cheaply with a fresh key prefix (``redis_url``) or, when they count keys, a database of
their own emptied with FLUSHDB.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest

from tests.servers.ports import free_port

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


@dataclass(frozen=True)
class RedisServer:
    """A running redis-server."""

    host: str
    port: int
    process: subprocess.Popen[bytes]
    workdir: str

    def url(self, db: int = 0, **query: str) -> str:
        """A ``redis://`` URL of this server (query parameters appended)."""
        q = "&".join(f"{k}={v}" for k, v in query.items())
        return f"redis://{self.host}:{self.port}/{db}" + (f"?{q}" if q else "")



def start_redis_server(
    port: int | None = None, workdir: str | None = None, extra_args: Sequence[str] = ()
) -> RedisServer:
    """Start redis-server on loopback (no RDB, no AOF) and wait until it answers PING.

    ``extra_args`` are appended to the command line and override the defaults (e.g.
    ``["--appendonly", "yes"]`` for a server whose data survives a restart).

    Without ``port``, a free one; a port taken meanwhile (parallel test processes pick
    theirs at the same time) is retried on another, up to 5 times.

    Raises:
        RuntimeError: the server did not come up within 10 s (its log is in the message).
    """
    if port is not None:
        return _start_redis_server(port, workdir, extra_args)
    for attempt in range(5):
        try:
            return _start_redis_server(free_port(), workdir, extra_args)
        except RuntimeError:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


def _start_redis_server(port: int, workdir: str | None, extra_args: Sequence[str]) -> RedisServer:
    workdir = workdir or tempfile.mkdtemp(prefix="qc-redis-")
    proc = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", workdir,
            "--databases", "16",
            "--logfile", f"{workdir}/redis.log",
            *extra_args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"redis-server exited with {proc.returncode}: {err}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"INFO server\r\n")
                if f"process_id:{proc.pid}\r".encode() in _reply(s):  # ours, not a neighbour's
                    return RedisServer("127.0.0.1", port, proc, workdir)
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"redis-server did not answer on port {port} within 10 s")


def _reply(s: socket.socket) -> bytes:
    """One bulk-string reply (``$<n>`` then the bytes), read whole."""
    data = s.recv(65536)
    head, _, body = data.partition(b"\r\n")
    size = int(head[1:]) if head.startswith(b"$") else 0
    while len(body) < size:
        more = s.recv(65536)
        if not more:
            break
        body += more
    return body


def stop_redis_server(server: RedisServer) -> None:
    """Stop the server and wait for it to exit."""
    server.process.terminate()
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    if server.process.stderr:
        server.process.stderr.close()
    shutil.rmtree(server.workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the whole session."""
    server = start_redis_server()
    try:
        yield server
    finally:
        stop_redis_server(server)


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """A URL of the session server with a key prefix no other test uses."""
    return redis_server.url(prefix=f"t{uuid.uuid4().hex[:12]}")
