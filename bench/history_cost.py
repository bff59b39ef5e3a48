"""What a kept history costs a drain: the same N-job drain on a fresh store and after K kept jobs.

For each backend named (``sqlite``, ``postgres``, ``redis``): one *history* store is
filled with K finished jobs the way production fills it (``noop.map`` in chunks of
1,000, drained by ``queue-core worker APP --burst``; finished jobs are kept, default
retention), then, for each repetition, an N-job drain runs on a new empty store and on
the history store, alternating which goes first. Printed per backend: the drain rates
(steady: first -> last body start, so start-up is left out), their ratio per repetition
and its median; the same ratio by CPU per job (the burst worker's CPU time plus the
server's: PostgreSQL's backends and autovacuum workers, or redis-server), which a busy
shared machine moves far less than wall-clock rates; and the storage each kept job
costs (PostgreSQL: ``qc_jobs`` + ``qc_attempts`` with indexes and TOAST; SQLite: the
database file and its WAL; Redis: ``used_memory``).

PostgreSQL is a throwaway initdb cluster (``tests/servers/postgres.py``, ``fsync=off``,
``synchronous_commit=off``) with ``pg_stat_statements`` loaded: for each measured drain
the claim and finish statements' calls, milliseconds and shared buffers per job are
printed, and after the history is filled the ``pg_stat_user_tables`` row of ``qc_jobs``
(live / dead tuples, HOT updates, vacuum counts) and its index sizes.

Run from the repo root (a few minutes with the defaults)::

    python bench/history_cost.py [sqlite postgres redis] [-n 10000] [-k 50000] [--reps 3] \
        [--naptime 10s] [--out TABLE.md]

It ends with a Markdown table, one row per backend (``--out`` also writes it to a file);
``nox -s bench`` runs it on all three backends with a short history (``_HISTORY`` in
noxfile.py) after the peer harness.

Figures on a shared machine drift +-20% between runs: compare the ratio, which is
measured in one run, alternating.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import drain as _d  # noqa: E402  (bench/drain.py: servers, app, drain timing)

BACKENDS = ("sqlite", "postgres", "redis")

_STATEMENTS = """
SELECT CASE WHEN query LIKE '%%FOR UPDATE SKIP LOCKED%%' THEN 'claim'
            WHEN query LIKE '%%UPDATE qc_jobs SET state = l.e_state%%' THEN 'finish'
            ELSE 'other' END AS what,
       sum(calls), sum(total_exec_time), sum(shared_blks_hit + shared_blks_read),
       sum(shared_blks_dirtied), sum(wal_bytes), max(max_exec_time)
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s)
GROUP BY 1 ORDER BY 1
"""

_TABLE = """
SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, vacuum_count, autovacuum_count,
    autoanalyze_count, pg_total_relation_size('qc_jobs'), pg_relation_size('qc_jobs')
FROM pg_stat_user_tables WHERE relname = 'qc_jobs'
"""

_INDEXES = """
SELECT indexrelname, pg_relation_size(indexrelid), idx_scan FROM pg_stat_user_indexes
WHERE relname IN ('qc_jobs', 'qc_attempts') ORDER BY 2 DESC
"""


class Store:
    """One backend's server (if any) and its measurements."""

    def __init__(self, backend: str, fresh: Callable[[str], str], workdir: Path) -> None:
        self.backend, self.fresh, self.workdir = backend, fresh, workdir
        self.pg: Any = None

    def size(self, url: str) -> int:
        """Bytes the store holds now."""
        if self.backend == "sqlite":
            path = Path(url.removeprefix("sqlite:///"))
            return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
        if self.backend == "postgres":
            rows = self.sql(
                url,
                "SELECT pg_total_relation_size('qc_jobs') + pg_total_relation_size('qc_attempts')",
            )
            return int(rows[0][0])
        import redis

        client = redis.Redis.from_url(url)
        try:
            return int(client.info("memory")["used_memory"])
        finally:
            client.close()

    def drop(self, url: str) -> None:
        """Remove a fresh store once measured (Redis's ``used_memory``, the per-job size of
        the history, counts every database of the server)."""
        if self.backend == "sqlite":
            path = Path(url.removeprefix("sqlite:///"))
            for p in path.parent.glob(path.name + "*"):
                p.unlink()
        elif self.backend == "redis":
            import redis

            client = redis.Redis.from_url(url)
            try:
                client.flushdb()
            finally:
                client.close()
        else:
            db = url.rsplit("/", 1)[1]
            self.sql(url.rsplit("/", 1)[0] + "/postgres", f'DROP DATABASE "{db}" WITH (FORCE)')

    def sql(self, url: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return list(cur.fetchall()) if cur.description is not None else []

    def server_cpu(self, url: str) -> float:
        """CPU seconds the server has used so far: PostgreSQL's postmaster and its ended
        children (backends, autovacuum workers), or redis-server; 0 for SQLite."""
        if self.backend == "sqlite":
            return 0.0
        if self.backend == "postgres":
            pid = self.fresh.postmaster  # type: ignore[attr-defined]
        else:
            import redis

            client = redis.Redis.from_url(url)
            try:
                pid = int(client.info("server")["process_id"])
            finally:
                client.close()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        return ticks / os.sysconf("SC_CLK_TCK")

    def before_drain(self, url: str) -> None:
        if self.backend == "postgres":
            self.sql(url, "SELECT pg_stat_statements_reset()")

    def statements(self, url: str, n: int) -> tuple[str, float]:
        """Per-job work of the claim and finish statements of the last drain, and the
        claim's shared buffers per job (0.0 where there is no such figure)."""
        if self.backend != "postgres":
            return "", 0.0
        db = url.rsplit("/", 1)[1]
        out = []
        claim = 0.0
        for what, calls, ms, blks, dirtied, wal, worst in self.sql(url, _STATEMENTS, (db,)):
            if what == "other":
                continue
            if what == "claim":
                claim = int(blks) / n
            out.append(
                f"{what}: {int(calls)} calls, {float(ms) * 1000 / n:.0f} us/job, "
                f"{int(blks) / n:.1f} buffers/job ({int(blks) / max(1, int(calls)):.0f}/call), "
                f"{int(dirtied) / n:.2f} dirtied/job, {int(wal) / n:.0f} WAL B/job, "
                f"slowest {float(worst):.0f} ms"
            )
        return "; ".join(out), claim

    def table_report(self, url: str) -> str:
        if self.backend != "postgres":
            return ""
        self.sql(url, "SELECT pg_stat_force_next_flush()")
        live, dead, upd, hot, vac, avac, aan, total, heap = self.sql(url, _TABLE)[0]
        lines = [
            f"    qc_jobs: live {live:,} dead {dead:,} updates {upd:,} HOT {hot:,} "
            f"vacuum {vac} autovacuum {avac} autoanalyze {aan}; heap {heap / 2**20:.1f} MiB, "
            f"with indexes and TOAST {total / 2**20:.1f} MiB"
        ]
        for name, size, scans in self.sql(url, _INDEXES):
            lines.append(f"    {name:<28} {size / 2**20:8.2f} MiB  {scans:>9,} scans")
        return "\n".join(lines)


def _own_children_cpu() -> float:
    """CPU seconds of this process's ended children (the burst workers)."""
    import resource

    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _fill(app: Any, backend: str, url: str, workdir: Path, k: int, start: int) -> None:
    """K more jobs enqueued and drained (kept finished), in rounds of at most 100,000."""
    done = 0
    while done < k:
        m = min(100_000, k - done)
        _d.enqueue_bulk(app, m, start=start + done)
        _d.drain(backend, app, url, workdir, m, None)
        done += m


def run_backend(backend: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One history store filled up to each K of ``args.k`` in turn (each point adds to the
    last: one fill of the largest K), measured against fresh stores at every point."""
    workdir = Path(tempfile.mkdtemp(prefix="qc-hist-"))
    (workdir / f"{_d.APP_MODULE}.py").write_text(_d.APP_SOURCE)
    points: list[dict[str, Any]] = []
    try:
        with _stores(backend, workdir, args.naptime) as fresh:
            store = Store(backend, fresh, workdir)
            hist_url = fresh("hist")
            app = _d._load_app(workdir, hist_url)
            empty = store.size(hist_url)
            app.queue.close()
            kept = 0  # filled so far (the measured drains add to it too: not counted in K)
            for k in args.k:
                app = _d._load_app(workdir, hist_url)
                t0 = time.perf_counter()
                _fill(app, backend, hist_url, workdir, k - kept, 10**9 + kept)
                app.queue.close()
                kept = k
                fill_s = time.perf_counter() - t0
                per_job = (store.size(hist_url) - empty) / k
                print(
                    f"{backend}: {k:,} kept jobs ({fill_s:.0f} s to fill this step); "
                    f"{per_job:,.0f} bytes per kept job",
                    flush=True,
                )
                report = store.table_report(hist_url)
                if report:
                    print(report, flush=True)
                res = _measure(backend, args, store, fresh, hist_url, workdir, k)
                points.append({"k": k, "per_job": per_job, **res})
            if backend == "postgres":
                print(store.table_report(hist_url), flush=True)
            return points
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _measure(
    backend: str,
    args: argparse.Namespace,
    store: Store,
    fresh: Callable[[str], str],
    hist_url: str,
    workdir: Path,
    k: int,
) -> dict[str, list[float]]:
    """``args.reps`` alternating N-job drains on a new empty store and on the history
    store: the ratios of each repetition."""
    rows: list[float] = []
    claims: list[float] = []
    cpus: list[float] = []
    for r in range(args.reps):
        order = ("fresh", "hist") if r % 2 == 0 else ("hist", "fresh")
        rates: dict[str, float] = {}
        buffers: dict[str, float] = {}
        cpu: dict[str, float] = {}
        for which in order:
            url = fresh(f"fresh{k}x{r}") if which == "fresh" else hist_url
            app = _d._load_app(workdir, url)
            _d.enqueue_bulk(app, args.n, start=r * args.n)
            app.queue.close()
            store.before_drain(url)
            time.sleep(0.5)  # ended backends reaped: their CPU is before the drain
            cpu0 = _own_children_cpu(), store.server_cpu(url)
            fig = _d.drain(backend, app, url, workdir, args.n, None)
            time.sleep(0.5)
            worker_ms = (_own_children_cpu() - cpu0[0]) * 1e6 / args.n
            server_ms = (store.server_cpu(url) - cpu0[1]) * 1e6 / args.n
            cpu[which] = worker_ms + server_ms
            rates[which] = fig["steady"]
            stmts, buffers[which] = store.statements(url, args.n)
            print(
                f"  K={k:,} rep {r} {which:<5} {fig['steady']:8,.0f} jobs/s steady "
                f"({fig['total']:,.0f} spawn->exit); CPU per job: worker "
                f"{worker_ms:.0f} us + server {server_ms:.0f} us"
                + (f"  [{stmts}]" if stmts else ""),
                flush=True,
            )
            if which == "fresh":
                store.drop(url)
        rows.append(rates["hist"] / rates["fresh"])
        cpus.append(cpu["fresh"] / cpu["hist"])
        if buffers["fresh"]:
            claims.append(buffers["hist"] / buffers["fresh"])
        print(
            f"  K={k:,} rep {r} ratio {rows[-1]:.2f}x (by CPU per job {cpus[-1]:.2f}x)", flush=True
        )
    return {"ratios": rows, "claims": claims, "cpus": cpus}


@contextmanager
def _stores(
    backend: str, workdir: Path, naptime: str | None = None
) -> Iterator[Callable[[str], str]]:
    """``fresh(name) -> url`` as in bench/drain.py; PostgreSQL with pg_stat_statements."""
    if backend != "postgres":
        with _d.storage_url(backend, workdir) as fresh:
            yield fresh
        return
    import psycopg

    from tests.servers.postgres import PostgresServer

    pg = PostgresServer()
    try:
        pg.start()
        with pg.admin() as conn:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            if naptime:
                conn.execute(f"ALTER SYSTEM SET autovacuum_naptime = '{naptime}'")
        pg.restart()
        with psycopg.connect(pg.dsn("template1"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

        def fresh(name: str) -> str:
            pg.create_database(name)
            return str(pg.url(name))

        fresh.postmaster = int(  # type: ignore[attr-defined]
            (pg.datadir / "postmaster.pid").read_text().split()[0]
        )

        yield fresh
    finally:
        pg.destroy()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "backends",
        nargs="*",
        default=["sqlite", "postgres"],
        choices=BACKENDS,
        help="backends to run (default: sqlite postgres)",
    )
    ap.add_argument("-n", type=int, default=10_000, help="jobs per measured drain (default 10000)")
    ap.add_argument(
        "-k",
        type=int,
        nargs="+",
        default=[50_000],
        help="kept finished jobs: one or more increasing points, measured in one growing "
        "history (default 50000)",
    )
    ap.add_argument("--reps", type=int, default=3, help="alternating repetitions (default 3)")
    ap.add_argument(
        "--naptime",
        default=None,
        help="PostgreSQL autovacuum_naptime, e.g. 10s (default: the server's, 1min)",
    )
    ap.add_argument("--out", default=None, help="also write the final Markdown table to this file")
    args = ap.parse_args(argv)
    if any(b <= a for a, b in zip(args.k, args.k[1:], strict=False)) or args.k[0] <= 0:
        ap.error(f"-k wants increasing positive counts, got {args.k}")
    load = os.getloadavg()
    ks = ", ".join(f"{k:,}" for k in args.k)
    print(
        f"history_cost: N={args.n:,} K={ks} reps={args.reps} "
        f"naptime={args.naptime or 'server default'}; "
        f"load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cpus",
        flush=True,
    )
    summary = []
    table = [
        f"| backend (N={args.n:,}, {args.reps} reps) | K kept | drain after K / fresh, "
        "by rate (reps) | by CPU per job (reps) | claim buffers per job, after K / fresh "
        "| bytes per kept job |",
        "|---|---|---|---|---|---|",
    ]
    for backend in args.backends:
        for res in run_backend(backend, args):
            table.append(_table_row(backend, res))
            summary.append(
                f"HISTORY {backend}: after {res['k']:,} kept, drain at "
                f"{statistics.median(res['ratios']):.2f}x the fresh-store rate "
                f"(reps {', '.join(f'{x:.2f}' for x in res['ratios'])}), "
                f"{statistics.median(res['cpus']):.2f}x by CPU per job (worker + server; reps "
                f"{', '.join(f'{x:.2f}' for x in res['cpus'])}); "
                f"{res['per_job']:,.0f} bytes per kept job"
                + (
                    f"; claim buffers per job {statistics.median(res['claims']):.2f}x fresh"
                    if res["claims"]
                    else ""
                )
            )
    load = os.getloadavg()
    print("\n".join(summary) + f"\n(load at end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})")
    print("\n" + "\n".join(table))
    if args.out:
        Path(args.out).write_text("\n".join(table) + "\n")


def _table_row(backend: str, res: dict[str, Any]) -> str:
    """One Markdown row of the final table: medians, then each repetition."""

    def cell(values: list[float]) -> str:
        if not values:
            return "-"
        reps = ", ".join(f"{x:.2f}" for x in values)
        return f"**{statistics.median(values):.2f}x** ({reps})"

    return (
        f"| {backend} | {res['k']:,} | {cell(res['ratios'])} | {cell(res['cpus'])} "
        f"| {cell(res['claims'])} | {res['per_job']:,.0f} |"
    )


if __name__ == "__main__":
    main()
