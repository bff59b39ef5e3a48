"""PostgreSQL server and worker CPU per drained job, by claim depth, beside pgqueuer's by batch.

What the shared harness's PostgreSQL drain ratio is made of: pgqueuer drains there with
``batch_size=100``, a queue-core worker at its default depth (8 slots, ``prefetch`` 8:
claims of about 12). This starts one throwaway PostgreSQL 15 (``tests/servers/``,
``synchronous_commit=off`` as in the harness), and for each round: enqueues N no-op jobs
into a new database,
starts one ``queue-core worker APP --burst --log-level warning`` per ``--prefetch`` value
(``QUEUE_CORE_WORKER_PREFETCH``), and, with ``--pgqueuer-python`` (the interpreter of a
venv with ``pgqueuer`` and ``asyncpg``, e.g. the harness's), one ``pgqueuer.run(...,
mode=drain, batch_size=B)`` per ``--batch`` value. It prints, per drain, jobs/s from
spawn to exit, the CPU per job of the worker process (``RUSAGE_CHILDREN``) and of the
server (every postgres process of this server from ``/proc``, exited ones through the
postmaster's children times)::

    python bench/pg_batch_cpu.py [-n 20000] [--rounds 2] [--prefetch 8 100] \\
        [--pgqueuer-python /tmp/qc-bench/venv-pgqueuer/bin/python --batch 10 100]

Run from the repo root. Figures drift between runs on a shared machine: compare within
one run; CPU per job is steadier than jobs/s.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pg_drain_cpu import server_cpu  # noqa: E402 - bench/ is on sys.path as the script's folder

from tests.servers.postgres import PostgresServer  # noqa: E402

QC_APP = """
import os, sys
import queue_core
queue = queue_core.Queue(os.environ["BENCH_URL"])

@queue.task()
def noop(i):
    pass

if __name__ == "__main__":
    queue.migrate()
    n = int(sys.argv[1])
    for s in range(0, n, 1000):
        noop.map([(i,) for i in range(s, min(n, s + 1000))])
"""

PGQ_APP = """
import asyncio, logging, os, sys
from contextlib import asynccontextmanager
import asyncpg
from pgqueuer import PgQueuer, Queries
from pgqueuer.db import AsyncpgDriver

DSN = os.environ["BENCH_DSN"]

@asynccontextmanager
async def main():
    conn = await asyncpg.connect(DSN)
    pgq = PgQueuer.from_asyncpg_connection(conn)

    @pgq.entrypoint("noop")
    async def noop(job):
        pass

    try:
        yield pgq
    finally:
        await conn.close()

async def setup(n):
    conn = await asyncpg.connect(DSN)
    q = Queries(AsyncpgDriver(conn))
    if await conn.fetchval("select to_regclass('pgqueuer')") is None:
        await q.install()
    for s in range(0, n, 1000):
        k = min(n, s + 1000) - s
        await q.enqueue(["noop"] * k, [str(i).encode() for i in range(s, s + k)], [0] * k)
    await conn.close()

if __name__ == "__main__":
    if sys.argv[1] == "setup":
        asyncio.run(setup(int(sys.argv[2])))
    else:
        import pgqueuer
        from pgqueuer import types
        logging.basicConfig(level=logging.WARNING)
        mode = types.QueueExecutionMode["drain"]
        asyncio.run(pgqueuer.run("pgq_app:main", batch_size=int(sys.argv[2]), mode=mode))
"""


def _fresh(pg: PostgresServer, name: str) -> None:
    """An empty database ``name``: each drain starts on new tables, as the harness's do."""
    pg.drop_database(name)
    pg.create_database(name)


def _drain(label: str, n: int, cmd: list[str], env: dict[str, str], cwd: Path, pm: int) -> None:
    s0, r0 = server_cpu(pm), resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True)
    dt = time.perf_counter() - t
    s1, r1 = server_cpu(pm), resource.getrusage(resource.RUSAGE_CHILDREN)
    worker = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / n * 1e6
    server = (s1 - s0) / n * 1e6
    print(f"  {label:28s} {n / dt:8,.0f} jobs/s   CPU per job: server {server:4.0f} µs, "
          f"worker {worker:4.0f} µs", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prefetch", type=int, nargs="+", default=[8, 100])
    ap.add_argument("--pgqueuer-python", default=None)
    ap.add_argument("--batch", type=int, nargs="+", default=[10, 100])
    args = ap.parse_args()
    pg = PostgresServer()
    pg.start()
    try:
        assert pg.proc is not None
        pm = pg.proc.pid
        d = Path(tempfile.mkdtemp(prefix="qc-batch-"))
        (d / "qc_app.py").write_text(textwrap.dedent(QC_APP))
        (d / "pgq_app.py").write_text(textwrap.dedent(PGQ_APP))
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUE_CORE_")}
        env.update(BENCH_URL=pg.url("qc"), BENCH_DSN=pg.dsn("pgq"))
        qc_env = dict(env, PYTHONPATH=f"{ROOT}{os.pathsep}{d}")
        cli = str(Path(sys.executable).with_name("queue-core"))
        for r in range(args.rounds):
            print(f"round {r + 1}")
            for prefetch in args.prefetch:
                _fresh(pg, "qc")
                subprocess.run([sys.executable, "qc_app.py", str(args.n)], env=qc_env, cwd=d,
                               check=True)  # fmt: skip
                _drain(f"queue-core prefetch {prefetch}", args.n,
                       [cli, "worker", "qc_app:queue", "--burst", "--log-level", "warning"],
                       dict(qc_env, QUEUE_CORE_WORKER_PREFETCH=str(prefetch)), d, pm)  # fmt: skip
            if args.pgqueuer_python:
                pgq_env = dict(env, PYTHONPATH=str(d))
                for batch in args.batch:
                    _fresh(pg, "pgq")
                    subprocess.run([args.pgqueuer_python, "pgq_app.py", "setup", str(args.n)],
                                   env=pgq_env, cwd=d, check=True)  # fmt: skip
                    _drain(f"pgqueuer batch_size {batch}", args.n,
                           [args.pgqueuer_python, "pgq_app.py", "run", str(batch)], pgq_env, d,
                           pm)  # fmt: skip
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
