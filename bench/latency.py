"""Idle-worker pick-up latency: enqueue -> body start, one job at a time.

For each backend one ``queue-core worker`` process (the app of
``tests/integration/helpers/drain_app.py``, 8 slots) is started and warmed up; then
``--n`` jobs are enqueued one at a time, each after the worker has gone idle again
(a random 10-30 ms pause, as ../shared/bench does), and the latency is the body's own
start timestamp minus the time just before the enqueue call. Same machine, same clock.
Prints p50/p99/mean/max in milliseconds per backend.

Servers are started here (PostgreSQL from initdb as in the test suite, a private
redis-server, a temp SQLite file) and torn down afterwards::

    python bench/latency.py [--n 200] [--backends postgresql,redis,sqlite] [--busy 0.05]

``--busy S``: every body sleeps ``S`` seconds, so with ``S`` above the 30 ms pause the
worker still runs a body when the next job comes: the pick-up of a busy worker.

PostgreSQL wakes idle workers with LISTEN/NOTIFY, Redis with its blocking wake-up,
SQLite (no push channel across processes) by polling.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from queue_core import Queue  # noqa: E402
from tests.integration.helpers.drain_app import register, spawn_workers, stop_all  # noqa: E402


@contextmanager
def _postgresql() -> Iterator[str]:
    from tests.servers.postgres import PostgresServer

    server = PostgresServer()
    try:
        server.start()
        server.create_database("qc_latency")
        yield server.url("qc_latency")
    finally:
        server.destroy()


@contextmanager
def _redis() -> Iterator[str]:
    from tests.servers.redis import start_redis_server, stop_redis_server

    server = start_redis_server()
    try:
        yield server.url(prefix="lat")
    finally:
        stop_redis_server(server)


@contextmanager
def _sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="qc-lat-") as d:
        yield f"sqlite:///{d}/jobs.db"


SERVERS: dict[str, Callable[[], AbstractContextManager[str]]] = {
    "postgresql": _postgresql,
    "redis": _redis,
    "sqlite": _sqlite,
}


class _LogTail:
    """Reads body-start lines (``S <i> <attempt> <pid> <time>``) as they are appended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.buf = b""

    def wait_start(self, i: int, timeout: float) -> float:
        end = time.monotonic() + timeout
        while True:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.offset)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            self.offset += len(data)
            self.buf += data
            *lines, self.buf = self.buf.split(b"\n")
            for line in lines:
                kind, arg, _attempt, _pid, t = line.decode().split()
                if kind == "S" and int(arg) == i:
                    return float(t)
            if time.monotonic() > end:
                raise RuntimeError(f"job {i} did not start within {timeout} s")
            time.sleep(0.0002)


def _pct(sorted_ms: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    k = max(0, min(len(sorted_ms) - 1, round(p / 100.0 * len(sorted_ms) + 0.5) - 1))
    return sorted_ms[k]


def measure(url: str, n: int, workdir: Path, seed: int = 1, busy: float = 0.0) -> list[float]:
    """Latencies in ms of ``n`` sequential jobs on one idle worker on ``url`` (bodies
    sleeping ``busy`` seconds)."""
    log = workdir / "executions.log"
    q = Queue(url)
    q.migrate()
    task = register(q)
    workers = spawn_workers(url, log, 1, sleep=busy)
    tail = _LogTail(log)
    rnd = random.Random(seed)
    try:
        for w in range(5):  # warm-up; the first one also waits for the worker to start
            task.delay(-1 - w)
            tail.wait_start(-1 - w, 90 if w == 0 else 30)
        lats = []
        for k in range(n):
            time.sleep(rnd.uniform(0.010, 0.030))  # let the worker go idle again
            t0 = time.time()
            task.delay(k)
            lats.append((tail.wait_start(k, 30) - t0) * 1000.0)
        return lats
    finally:
        stop_all(workers)
        q.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--backends", default="postgresql,redis,sqlite")
    ap.add_argument("--busy", type=float, default=0.0, help="seconds each body sleeps")
    a = ap.parse_args()
    print(f"idle-worker pick-up latency, enqueue -> body start, {a.n} sequential jobs")
    print(f"{'backend':<12}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'max ms':>9}")
    for name in a.backends.split(","):
        with SERVERS[name]() as url, tempfile.TemporaryDirectory(prefix="qc-lat-") as d:
            lats = sorted(measure(url, a.n, Path(d), busy=a.busy))
        print(
            f"{name:<12}{_pct(lats, 50):9.2f}{_pct(lats, 99):9.2f}"
            f"{statistics.fmean(lats):9.2f}{lats[-1]:9.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
