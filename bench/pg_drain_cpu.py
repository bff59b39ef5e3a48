"""CPU and commits per job of a PostgreSQL drain, alternating two checkouts.

Starts a throwaway server (``tests/servers/postgres.py``: ``fsync=off``,
``synchronous_commit=off``), then per rep and per checkout: bulk-enqueues N no-op jobs
(``bench/drain.py``'s app) into a fresh database, drains them with W ``queue-core worker
--burst`` processes run from that checkout (``PYTHONPATH``), and prints the drain rate
(spawn -> exit), the workers' CPU per job (``getrusage`` of the children, start-up
included), the server's CPU per job (``/proc`` of the postmaster and its children, read
1 s after the workers exit so that their backends have been reaped) and the commits per
job (``pg_stat_database.xact_commit``). CPU and commits per job depend far less on how
busy the machine is than the rate does::

    python bench/pg_drain_cpu.py --tree /path/to/other/checkout [-n 10000] [-w 1] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drain  # noqa: E402 - the app and servers of bench/drain.py
import psycopg  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the postmaster, its reaped children and its live children (also read
    by ``claim_shape.py`` and ``pg_batch_cpu.py``)."""
    ticks = sum(int(x) for x in _stat(postmaster)[11:15])
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                f = _stat(d)
            except OSError:
                continue
            if int(f[1]) == postmaster:
                ticks += int(f[11]) + int(f[12])
    return ticks / _TICK


def _commits(pg: object, name: str) -> int:
    with psycopg.connect(pg.dsn(), autocommit=True) as c:  # type: ignore[attr-defined]
        row = c.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0


def one_rep(pg: object, tree: Path, workdir: Path, n: int, workers: int) -> tuple[float, ...]:
    """(jobs/s, worker µs/job, server µs/job, commits/job) of one drain from ``tree``."""
    name = f"cpu{time.monotonic_ns()}"
    pg.create_database(name)  # type: ignore[attr-defined]
    url = pg.url(name)  # type: ignore[attr-defined]
    app = drain._load_app(workdir, url)
    drain.enqueue_bulk(app, n)
    app.queue.close()
    env = drain._env(url)
    env["PYTHONPATH"] = str(tree)
    postmaster = pg.proc.pid  # type: ignore[attr-defined]
    x0 = _commits(pg, name)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s0, t0 = server_cpu(postmaster), time.perf_counter()
    procs = [
        subprocess.Popen(drain._worker_cmd(["--burst"]), cwd=workdir, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(workers)
    ]  # fmt: skip
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"a worker from {tree} exited {p.returncode}")
    wall = time.perf_counter() - t0
    time.sleep(1.0)  # backends reaped, statistics flushed
    server = server_cpu(postmaster) - s0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    worker = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    commits = _commits(pg, name) - x0
    return n / wall, worker / n * 1e6, server / n * 1e6, commits / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tree", type=Path, required=True, help="the other checkout")
    ap.add_argument("-n", type=int, default=10_000)
    ap.add_argument("-w", "--workers", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    trees = [args.tree.resolve(), drain.ROOT]
    out: dict[Path, list[tuple[float, ...]]] = {t: [] for t in trees}
    from tests.servers.postgres import PostgresServer

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / f"{drain.APP_MODULE}.py").write_text(drain.APP_SOURCE)
        pg = PostgresServer()
        pg.start()
        try:
            for _ in range(args.reps):
                for t in trees:
                    out[t].append(one_rep(pg, t, workdir, args.n, args.workers))
        finally:
            pg.destroy()
    for t, reps in out.items():
        med = [statistics.median(r[k] for r in reps) for k in range(4)]
        each = " ".join(f"{r[0]:,.0f}/{r[1]:.0f}/{r[2]:.0f}/{r[3]:.3f}" for r in reps)
        print(f"{t.name} {args.workers}w n={args.n}: jobs/s {med[0]:,.0f} worker_us {med[1]:.0f} "
              f"server_us {med[2]:.0f} commits/job {med[3]:.3f}  (reps {each})")  # fmt: skip


if __name__ == "__main__":
    main()
