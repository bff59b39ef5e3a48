"""Client-side enqueue cost: the shared harness's two enqueue figures, A/B across checkouts.

The same calls as ``../shared/bench/queue_core_bench.py``: **single** is ``noop.delay(i)``
for i in range(N); **bulk** is ``noop.map([(i,) for i in chunk])`` in chunks of 1,000. Each
measurement runs in a fresh subprocess on fresh storage, as the harness's ``produce`` does
(SQLite: a new file, its schema created by the first call, inside the timed loop as in the
harness; PostgreSQL: a new database migrated by another process before the producer starts,
as the harness's ``reset``; Redis: a flushed database).
Reported per run: wall jobs/s and the producer's CPU µs/job (``time.process_time``, which
for SQLite includes the in-process database engine). Checkouts given with ``--root`` (the
first is "A") are alternated rep by rep, so load drift on a shared machine cancels; the
medians are printed per backend, mode and checkout.

Servers: a throwaway ``redis-server`` and an initdb PostgreSQL 15 cluster
(``tests/servers``; ``fsync=off``, ``synchronous_commit=off``, as bench/drain.py).

``--profile`` runs each (backend, mode) once under cProfile in this checkout and prints
where the client's time goes: job building (``Task._make`` without its callees, NewJob),
ids, payload serialization, row/argument building, the SQL/Lua call, the commit.

Run from the repo root::

    python bench/enqueue.py sqlite redis postgres --reps 5 \\
        --root /path/to/base-checkout --root .
    python bench/enqueue.py sqlite --profile

Figures on a shared machine drift +-20% between runs; compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("sqlite", "redis", "postgres")
MODES = ("single", "bulk")


# --------------------------------------------------------------------------- child


def _child(url: str, mode: str, n: int, profile: bool) -> dict[str, Any]:
    import queue_core

    queue = queue_core.Queue(url)

    @queue.task()
    def noop(i: int) -> int:
        return i

    if mode == "migrate":  # the harness's reset(): its own process, before the producer
        queue.migrate()
        queue.close()
        return {}

    def run() -> None:
        if mode == "single":
            delay = noop.delay
            for i in range(n):
                delay(i)
        else:
            for s in range(0, n, 1000):
                noop.map([(i,) for i in range(s, min(n, s + 1000))])

    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
    c0, t0 = time.process_time(), time.perf_counter()
    if prof is not None:
        prof.runcall(run)
    else:
        run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    queue.close()
    out: dict[str, Any] = {"rate": n / wall, "cpu_us": cpu / n * 1e6}
    if prof is not None:
        out["profile"] = _split(prof, n)
    return out


# What each bucket counts: the total time of these functions, callees included (cumtime),
# matched on "file:function" substrings. Buckets overlap where one calls another (the
# serializer is called from Task._make), so each line is read on its own.
_BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("task call total (delay/map)", ("task.py:delay", "task.py:map")),
    ("job building (Task._plain/_make)", ("task.py:_make", "task.py:_plain")),
    (
        "  NewJob(...) construction",
        ("<string>:__init__", "model.py:__init__", "jobbuild.py:__call__"),
    ),
    ("  job ids (new_job_id[s])", ("jobbuild.py:new_job_id",)),
    ("  payload serialization", ("serializer.py:dumps_payload",)),
    ("submit (Queue._submit_*)", ("queue.py:_submit_one", "queue.py:_submit_many")),
    ("  rows/args building", ("records.py:job_row", "enqueue_script", "lean.py", "args_of")),
    ("  SQL execute/executemany", ("method 'execute", "method 'executemany", ":execute")),
    ("  PostgreSQL COPY", ("pgcopy.py:copy_jobs",)),
    ("  Redis script call", ("evalsha", "execute_command", "Script.__call__", "run_pinned")),
    ("  commit", ("method 'commit", ":commit")),
)


def _split(prof: Any, n: int) -> dict[str, Any]:
    import pstats

    stats = pstats.Stats(prof)
    table: dict[str, float] = {}
    rows = []
    for (file, _line, func), (_cc, _nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        key = f"{Path(file).name}:{func}"
        rows.append((tt, ct, key))
        for label, pats in _BUCKETS:
            if any(p in key for p in pats):
                table[label] = table.get(label, 0.0) + ct
    rows.sort(reverse=True)
    top = [(f"{k}", round(tt / n * 1e6, 2), round(ct / n * 1e6, 2)) for tt, ct, k in rows[:18]]
    return {
        "buckets_us_per_job": {k: round(table.get(k, 0.0) / n * 1e6, 2) for k, _ in _BUCKETS},
        "top_tottime_us_per_job": top,
    }


# --------------------------------------------------------------------------- servers


@contextmanager
def _servers(backends: list[str], workdir: Path) -> Iterator[dict[str, Callable[[], Any]]]:
    """``{backend: fresh()}``; ``fresh()`` -> (url, migrate before the loop?)."""
    sys.path.insert(0, str(ROOT))
    fresh: dict[str, Callable[[], Any]] = {}
    with ExitStack() as stack:
        if "sqlite" in backends:
            fresh["sqlite"] = lambda: (f"sqlite:///{workdir / (uuid.uuid4().hex + '.db')}", False)
        if "redis" in backends:
            from tests.servers.redis import start_redis_server, stop_redis_server

            server = start_redis_server()
            stack.callback(stop_redis_server, server)

            def fresh_redis() -> tuple[str, bool]:
                import redis

                url = server.url(0)
                redis.Redis.from_url(url).flushdb()
                return url, False

            fresh["redis"] = fresh_redis
        if "postgres" in backends:
            from tests.servers.postgres import PostgresServer

            pg = PostgresServer()
            stack.callback(pg.destroy)
            pg.start()
            last: list[str] = []

            def fresh_pg() -> tuple[str, bool]:
                while last:
                    pg.drop_database(last.pop())
                name = "qcenq_" + uuid.uuid4().hex[:12]
                pg.create_database(name)
                last.append(name)
                return pg.url(name), True

            fresh["postgres"] = fresh_pg
        yield fresh


def _run_child(root: Path, url: str, mode: str, n: int, migrate: bool, profile: bool) -> Any:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    script = str(Path(__file__).resolve())
    for what in (["migrate"] if migrate else []) + [mode]:
        argv = [sys.executable, script, "--child", url, what, str(n)]
        argv += ["--with-profile"] if profile else []
        out = subprocess.run(
            argv, env=env, capture_output=True, text=True, cwd=str(root), check=False
        )
        if out.returncode != 0:
            raise SystemExit(f"child failed ({root}, {url}, {what}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- main


def _print_profile(backend: str, mode: str, res: dict[str, Any]) -> None:
    prof = res["profile"]
    print(
        f"\n== profile {backend} {mode}: {res['rate']:,.0f} jobs/s under cProfile "
        f"(cProfile inflates Python calls; read the split, not the rate)"
    )
    for label, us in prof["buckets_us_per_job"].items():
        print(f"  {label:<32} {us:8.2f} µs/job")
    print("  top functions by own time (µs/job own, cumulative):")
    for key, tt, ct in prof["top_tottime_us_per_job"]:
        print(f"    {tt:7.2f} {ct:8.2f}  {key}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("backends", nargs="*", default=list(BACKENDS), choices=BACKENDS)
    p.add_argument("-n", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--modes", default="single,bulk")
    p.add_argument(
        "--root",
        action="append",
        type=Path,
        help="a checkout to measure (repeat: alternated A/B/...; default: this one)",
    )
    p.add_argument("--profile", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    roots = [r.resolve() for r in (args.root or [ROOT])]
    modes = [m for m in args.modes.split(",") if m]
    results: dict[str, list[dict[str, Any]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="qc-enq-") as tmp,
        _servers(args.backends, Path(tmp)) as fresh,
    ):
        for backend in args.backends:
            for mode in modes:
                if args.profile:
                    url, mig = fresh[backend]()
                    res = _run_child(roots[-1], url, mode, args.n, mig, True)
                    _print_profile(backend, mode, res)
                    continue
                for rep in range(args.reps):
                    for root in roots if rep % 2 == 0 else roots[::-1]:
                        url, mig = fresh[backend]()
                        res = _run_child(root, url, mode, args.n, mig, False)
                        results.setdefault(f"{backend} {mode} {root}", []).append(res)
                        print(
                            f"{backend:8} {mode:6} rep {rep} {root.name:>14}: "
                            f"{res['rate']:9,.0f} jobs/s {res['cpu_us']:7.1f} µs/job CPU",
                            flush=True,
                        )
    if not results:
        return
    print("\nmedians:")
    for key, reps in results.items():
        rate = statistics.median(r["rate"] for r in reps)
        cpu = statistics.median(r["cpu_us"] for r in reps)
        print(f"  {key}: {rate:,.0f} jobs/s, {cpu:.1f} µs/job CPU (n={len(reps)})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _url, _mode, _n = sys.argv[2], sys.argv[3], int(sys.argv[4])
        sys.path.insert(0, os.environ.get("PYTHONPATH", ""))
        print(json.dumps(_child(_url, _mode, _n, "--with-profile" in sys.argv)))
    else:
        main()
