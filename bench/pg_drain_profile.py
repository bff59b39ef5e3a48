"""Where a PostgreSQL drain spends its work: per-job statements, WAL, buffers, HOT updates.

Enqueues N no-op jobs (``noop.map``, chunks of 1,000), then starts W
``queue-core worker APP --burst`` processes and times spawn -> exit; with
``pg_stat_statements`` and ``pg_stat_user_tables`` reset in between, it prints per job:
the calls, execution time, buffers and WAL bytes of each statement, and the table
inserts / updates / HOT updates. WAL bytes and buffers per job do not depend on how busy
the machine is (unlike jobs/s on a shared 2-core machine), so they compare two versions
of the code exactly; jobs/s still needs alternating runs.

Needs a PostgreSQL 15 server started with ``shared_preload_libraries=pg_stat_statements``
(``synchronous_commit=off`` as in the shared harness), e.g. as a non-root user::

    initdb -D /tmp/pg -U postgres --auth=trust
    pg_ctl -D /tmp/pg -w -o "-p 5461 -c shared_preload_libraries=pg_stat_statements \\
        -c synchronous_commit=off" start
    createdb -h 127.0.0.1 -p 5461 -U postgres drain

Run from the repo root (TREE defaults to this checkout; name another one to compare)::

    python bench/pg_drain_profile.py --dsn postgresql://postgres@127.0.0.1:5461/drain \\
        [-n 10000] [-w 1] [--reps 3] [--tree /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

APP = """
import os
from queue_core import Queue

queue = Queue(os.environ["QC_PROFILE_URL"])


@queue.task()
def noop(i):
    return i
"""

STATEMENTS = """
SELECT calls, total_exec_time, shared_blks_hit + shared_blks_read + shared_blks_dirtied,
    wal_bytes, left(regexp_replace(query, '\\s+', ' ', 'g'), 70)
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND query NOT ILIKE '%%pg_stat%%'
ORDER BY total_exec_time DESC LIMIT 8
"""

TABLES = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
WHERE relname IN ('qc_jobs', 'qc_attempts') ORDER BY relname
"""


def _sql(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query)
        return cur.fetchall() if cur.description else []


def _profile(dsn: str, n: int) -> None:
    time.sleep(0.6)  # table statistics are flushed about every 0.5 s
    rows = _sql(dsn, STATEMENTS)
    calls = sum(r[0] for r in rows)
    print(f"  statements per job: {calls / n:.2f}")
    print(
        f"  WAL bytes per job: {sum(float(r[3]) for r in rows) / n:,.0f}; "
        f"buffers per job: {sum(r[2] for r in rows) / n:,.1f}"
    )
    for c, ms, blks, wal, text in rows:
        print(
            f"    {c:6d} calls {ms / max(c, 1):7.3f} ms/call {blks / n:6.1f} buf/job "
            f"{float(wal) / n:8.0f} WAL B/job  {text}"
        )
    for rel, ins, upd, hot in _sql(dsn, TABLES):
        print(f"  {rel}: {ins / n:.2f} inserts, {upd / n:.2f} updates ({hot / n:.2f} HOT) per job")


def run(tree: Path, dsn: str, n: int, workers: int, reps: int, stats: bool) -> list[float]:
    """Drain rates (jobs/s, spawn -> last worker exit) of ``reps`` repetitions."""
    appdir = Path(tempfile.mkdtemp(prefix="qc-profile-"))
    (appdir / "profile_app.py").write_text(APP)
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{appdir}", QC_PROFILE_URL=dsn)
    cli = Path(sys.executable).with_name("queue-core")
    enqueue = (
        f"import profile_app\nfor s in range(0, {n}, 1000):\n"
        f"    profile_app.noop.map([(i,) for i in range(s, min({n}, s + 1000))])"
    )
    rates = []
    for _ in range(reps):
        _sql(dsn, "DROP TABLE IF EXISTS qc_jobs, qc_attempts, qc_dead, qc_meta CASCADE")
        # cwd = appdir: `python -c` and the worker CLI put the cwd first on sys.path, so
        # the cwd's checkout would shadow --tree
        subprocess.run([sys.executable, "-c", enqueue], env=env, check=True, cwd=appdir)
        _sql(dsn, "VACUUM ANALYZE")
        if stats:
            _sql(dsn, "SELECT pg_stat_statements_reset()")
            _sql(dsn, "SELECT pg_stat_reset()")
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen(
                [str(cli), "worker", "profile_app:queue", "--burst", "--log-level", "WARNING"],
                env=env,
                cwd=appdir,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(workers)
        ]
        for p in procs:
            p.wait()
        rates.append(n / (time.perf_counter() - t0))
        left = _sql(dsn, "SELECT count(*) FROM qc_jobs WHERE state <> 'succeeded'")[0][0]
        if left:
            raise SystemExit(f"{left} jobs were not drained")
        if stats:
            _profile(dsn, n)
            stats = False  # one profile per call is enough
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dsn", required=True, help="a database on a server with pg_stat_statements")
    ap.add_argument("-n", type=int, default=10_000)
    ap.add_argument("-w", "--workers", type=int, default=1)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--no-stats", action="store_true", help="drain rates only")
    args = ap.parse_args()
    _sql(args.dsn, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    rates = run(args.tree, args.dsn, args.n, args.workers, args.reps, not args.no_stats)
    print(
        f"{args.tree.name} {args.workers}w drain jobs/s: "
        + " ".join(f"{r:,.0f}" for r in rates)
        + f"  median {statistics.median(rates):,.0f}"
    )


if __name__ == "__main__":
    main()
