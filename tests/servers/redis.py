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

    Raises:
        RuntimeError: the server did not come up within 10 s (its log is in the message).
    """
    port = port or free_port()
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
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return RedisServer("127.0.0.1", port, proc, workdir)
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"redis-server did not answer on port {port} within 10 s")


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
