"""The shape of a drain: how big the claims are and how busy the claim and finish threads
keep, at a given ``prefetch`` (and slots).

For ``postgres`` (default), ``redis`` or ``sqlite``: starts a throwaway server
(``tests/servers/``; a temp file for SQLite), bulk-enqueues N no-op jobs, drains them
with one in-process burst ``Worker`` (8 slots unless ``QUEUE_CORE_WORKER_SLOTS`` says
otherwise), and prints the rate, the CPU the server (the postmaster and its children from ``/proc``,
Redis from ``INFO cpu``) and this process (``os.times``) spent per job, and per storage
call (``claim``, ``claim_ahead``, ``start_claimed``, ``start_and_finish``, ``finish``):
calls, the share of the drain's time spent in them, their mean duration, the mean limit
asked for and jobs got, and the gaps between one claim and the next::

    QUEUE_CORE_WORKER_PREFETCH=64 python bench/claim_shape.py [postgres|redis|sqlite] [-n 20000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import queue_core  # noqa: E402
from queue_core.worker import Worker  # noqa: E402

_CALLS = ("claim", "claim_ahead", "start_claimed", "start_and_finish", "finish")


@contextmanager
def _server(backend: str) -> Iterator[tuple[str, Callable[[], float]]]:
    """A throwaway store of ``backend``: its URL and a reading of its server's CPU (s)."""
    if backend == "postgres":
        from pg_drain_cpu import server_cpu

        from tests.servers.postgres import PostgresServer

        pg = PostgresServer()
        pg.start()
        assert pg.proc is not None
        postmaster = pg.proc.pid
        try:
            yield pg.url(), lambda: server_cpu(postmaster)
        finally:
            pg.stop()
    elif backend == "redis":
        import redis

        from tests.servers.redis import start_redis_server, stop_redis_server

        server = start_redis_server()
        client = redis.Redis.from_url(server.url(0))

        def cpu() -> float:
            info = client.info("cpu")
            return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

        try:
            yield server.url(0), cpu
        finally:
            client.close()
            stop_redis_server(server)
    else:  # sqlite: the worker's own process is the server
        with tempfile.TemporaryDirectory() as d:
            yield f"sqlite:///{d}/shape.db", lambda: 0.0


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def _timed(storage: Any, log: dict[str, list[tuple[float, float, int, int]]]) -> None:
    """Wrap the storage class's calls of interest to log (start, end, limit, got)."""
    cls = type(storage)
    for name in _CALLS:
        f = getattr(cls, name, None)
        if f is None:
            continue

        def wrap(f: Any = f, name: str = name) -> Any:
            def timed(self: Any, *a: Any, **k: Any) -> Any:
                t0 = time.perf_counter()
                got = f(self, *a, **k)
                limit = a[2] if name.startswith("claim") else len(a[-1])
                log[name].append((t0, time.perf_counter(), limit, len(got or ())))
                return got

            return timed

        setattr(cls, name, wrap())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "backend", nargs="?", default="postgres", choices=("postgres", "redis", "sqlite")
    )
    ap.add_argument("-n", type=int, default=20_000)
    args = ap.parse_args()
    n = args.n
    with _server(args.backend) as (url, server_cpu):
        queue = queue_core.Queue(url)

        @queue.task()
        def noop(i: int) -> None:
            pass

        queue.migrate()
        noop.map([(i,) for i in range(n)])
        log: dict[str, list[tuple[float, float, int, int]]] = defaultdict(list)
        _timed(queue.storage(), log)
        worker = Worker(queue, burst=True, install_signal_handlers=False, scheduler=False)
        server0, own0, t = server_cpu(), _own_cpu(), time.perf_counter()
        worker.run()
        dt = time.perf_counter() - t
        server_us, own_us = ((server_cpu() - server0) / n * 1e6, (_own_cpu() - own0) / n * 1e6)
        print(f"{args.backend}: {n / dt:,.0f} jobs/s ({dt:.2f} s); CPU per job: server "
              f"{server_us:.0f} µs, worker {own_us:.0f} µs")  # fmt: skip
        for name, rows in log.items():
            busy, k = sum(b - a for a, b, _, _ in rows), len(rows)
            limit, got = sum(r[2] for r in rows) / k, sum(r[3] for r in rows) / k
            print(f"  {name:17s} {k:5d} calls, busy {busy / dt:4.0%}, "
                  f"{busy / k * 1000:.2f} ms each, limit {limit:.1f}, got {got:.1f}")  # fmt: skip
        claims = sorted(log["claim"] + log["claim_ahead"])
        gaps = sorted(claims[i + 1][0] - claims[i][1] for i in range(len(claims) - 1))
        if gaps:
            print(f"  gaps between claims: p50 {gaps[len(gaps) // 2] * 1000:.2f} ms, "
                  f"p90 {gaps[int(len(gaps) * 0.9)] * 1000:.2f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
