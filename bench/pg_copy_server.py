"""PostgreSQL bulk enqueue, the server's side: CPU and WAL per job of the ``COPY`` batches.

The client's work is taken out: the ``COPY`` data (``--batches`` batches of ``--size``
queued jobs, text and binary format) is rendered once, before the timer, and each
measured batch is ``BEGIN``, ``COPY`` of the ready bytes, ``NOTIFY``, ``COMMIT``, as
backends/sql/pgcopy.py sends it. Reported per variant: the server backend's CPU time
per job (utime + stime from ``/proc/<pid>/stat``, so load from other processes on the
machine does not count; resolution one clock tick over the whole run), the WAL bytes
per job (``pg_current_wal_insert_lsn`` difference) and the wall rate. Variants, each on
a fresh copy of a migrated database, in turn (the order reversed every other rep):

* ``binary`` / ``text``: the schema as migrated, binary or text ``COPY`` format;
* ``drop:<index>``: binary, with that ``qc_jobs`` index (or constraint) dropped first,
  which prices one index entry per job;
* ``heap``: binary, with the four indexes a queued job is entered in dropped (the
  heap rows, the ``seq`` default and the ``NOTIFY`` are left).

Run from the repo root (Linux only: reads ``/proc``)::

    python bench/pg_copy_server.py [--size 1000] [--batches 30] [--reps 5] \\
        [binary text drop:ix_qc_jobs_enqueued drop:qc_jobs_id_key ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from backends.sql import SQLStorage  # noqa: E402
from backends.sql.records import JOB_COLUMNS, job_row  # noqa: E402
from queue_core.records.jobs import NewJob  # noqa: E402
from tests.servers.postgres import PostgresServer  # noqa: E402

_COLS = ", ".join(JOB_COLUMNS)
_HEAP = ["ix_qc_jobs_enqueued", "ix_qc_jobs_ready", "qc_jobs_id_key", "qc_jobs_pkey"]
_DEFAULT = ["binary", "text", *(f"drop:{n}" for n in _HEAP), "heap"]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _render(conn: Any, size: int, block: int, fmt: str) -> bytes:
    """``COPY`` data of ``size`` noop jobs with version-7-like ids, in format ``fmt``."""
    t = int(time.time() * 1000)
    out = bytearray()
    with conn.cursor() as cur:
        cur.execute("CREATE TEMP TABLE IF NOT EXISTS src (LIKE qc_jobs INCLUDING DEFAULTS)")
        cur.execute("TRUNCATE src")
        with cur.copy(f"COPY src ({_COLS}) FROM STDIN") as cp:
            for i in range(size):
                u = uuid.UUID(int=((t + block) << 80) | (7 << 76) | (2 << 62) | (block << 20) | i)
                job = NewJob(id=str(u), task_name="bench.noop", queue="default",
                             payload=b'{"args":[%d],"kwargs":{}}' % i, lost_delay_ms=900,
                             timeout_ms=300_000)  # fmt: skip
                cp.write_row(job_row(job, t))
        with cur.copy(f"COPY src ({_COLS}) TO STDOUT (FORMAT {fmt})") as cp:
            for data in cp:
                out += data
    return bytes(out)


def _measure(dsn: str, variant: str, data: dict[str, list[bytes]]) -> tuple[float, float, float]:
    fmt = "text" if variant == "text" else "binary"
    with psycopg.connect(dsn, autocommit=True) as conn:
        drop = _HEAP if variant == "heap" else [variant[5:]] if variant.startswith("drop:") else []
        for name in drop:
            if name.startswith("ix_"):
                conn.execute(f"DROP INDEX {name}")
            else:
                conn.execute(f"ALTER TABLE qc_jobs DROP CONSTRAINT {name}")
        cur, pid = conn.cursor(), conn.info.backend_pid
        lsn = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # type: ignore[index]
        c0, t0 = _cpu_s(pid), time.perf_counter()
        for block in data[fmt]:
            cur.execute("BEGIN")
            with cur.copy(f"COPY qc_jobs ({_COLS}) FROM STDIN (FORMAT {fmt})") as cp:
                cp.write(block)
            cur.execute("NOTIFY qc_jobs")
            cur.execute("COMMIT")
        wall, cpu = time.perf_counter() - t0, _cpu_s(pid) - c0
        wal = conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", [lsn]
        ).fetchone()[0]  # type: ignore[index]
    return cpu, float(wal), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("variants", nargs="*", default=_DEFAULT)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    jobs = a.size * a.batches
    server = PostgresServer()
    runs: dict[str, list[tuple[float, float, float]]] = {v: [] for v in a.variants}
    try:
        server.start()
        server.create_database("tmpl")
        storage = SQLStorage(server.url("tmpl"))
        storage.migrate()
        storage.close()  # CREATE DATABASE ... TEMPLATE needs it unused
        with psycopg.connect(server.dsn("tmpl"), autocommit=True) as conn:
            data = {f: [_render(conn, a.size, b, f) for b in range(a.batches)]
                    for f in ("text", "binary")}  # fmt: skip
        for rep in range(a.reps):
            order = list(enumerate(a.variants))
            for k, variant in order if rep % 2 == 0 else order[::-1]:
                db = f"r{rep}_{k}"
                server.create_database(db, "tmpl")
                cpu, wal, wall = _measure(server.dsn(db), variant, data)
                runs[variant].append((cpu * 1e6 / jobs, wal / jobs, jobs / wall))
                server.drop_database(db)
    finally:
        server.destroy()
    print(f"COPY server cost, {a.batches} x {a.size} jobs, median of {a.reps} alternated runs")
    for variant, r in runs.items():
        cpu = statistics.median(x[0] for x in r)
        print(f"{variant:<26} CPU {cpu:6.2f} us/job (min {min(x[0] for x in r):5.2f})"
              f"  WAL {statistics.median(x[1] for x in r):5.0f} B/job"
              f"  wall {statistics.median(x[2] for x in r):>8,.0f} jobs/s")  # fmt: skip


if __name__ == "__main__":
    main()
