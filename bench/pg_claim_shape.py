"""The shape of a PostgreSQL drain: how big the claims are and how busy the claim and
finish threads keep, at a given ``prefetch``.

Starts a throwaway server (``tests/servers/postgres.py``), bulk-enqueues N no-op jobs,
drains them with one in-process burst ``Worker`` (8 slots), and prints the rate, the
CPU the postgres processes and this process spent per job (``/proc``, ``os.times``),
and per storage call (``claim``, ``claim_ahead``, ``start_and_finish``, ``finish``):
calls, the share of the drain's time spent in them, their mean duration, the mean
limit asked for and jobs got, and the gaps between one claim and the next::

    QUEUE_CORE_WORKER_PREFETCH=64 python bench/pg_claim_shape.py [-n 20000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import queue_core  # noqa: E402
from queue_core.worker import Worker  # noqa: E402
from tests.servers.postgres import PostgresServer  # noqa: E402

_CALLS = ("claim", "claim_ahead", "start_and_finish", "finish")


def _server_cpu() -> float:
    total = 0
    pids = subprocess.run(["pgrep", "-f", "postgres"], capture_output=True, text=True).stdout
    for pid in pids.split():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


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
                log[name].append((t0, time.perf_counter(), limit, len(got)))
                return got

            return timed

        setattr(cls, name, wrap())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=20_000)
    n = ap.parse_args().n
    server = PostgresServer()
    server.start()
    try:
        queue = queue_core.Queue(server.url())

        @queue.task()
        def noop(i: int) -> None:
            pass

        queue.migrate()
        noop.map([(i,) for i in range(n)])
        log: dict[str, list[tuple[float, float, int, int]]] = defaultdict(list)
        _timed(queue.storage(), log)
        worker = Worker(queue, burst=True, install_signal_handlers=False, scheduler=False)
        server0, own0, t = _server_cpu(), _own_cpu(), time.perf_counter()
        worker.run()
        dt = time.perf_counter() - t
        server_us, own_us = ((_server_cpu() - server0) / n * 1e6, (_own_cpu() - own0) / n * 1e6)
        print(f"{n / dt:,.0f} jobs/s ({dt:.2f} s); CPU per job: postgres {server_us:.0f} µs, "
              f"worker {own_us:.0f} µs")  # fmt: skip
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
    finally:
        server.stop()


if __name__ == "__main__":
    main()
