"""End-to-end throughput and latency of queue-core through its public API (BENCH.md workload).

For one backend (``memory``, ``sqlite``, ``redis``, ``postgres``, ``redis-cluster`` or
``sqs``):

1. **enqueue single**: N ``noop.delay(i)`` calls, one producer, timed;
2. **drain**: one ``queue-core worker APP --burst`` subprocess (the console script the
   official harness uses), timed from spawn to exit; also N / (last body start - spawn)
   (the harness's figure), the steady rate first -> last body start, and start-up
   (spawn -> first body start);
3. **enqueue bulk**: N jobs through ``noop.map`` in chunks of 1,000, timed, then drained
   again like 2.;
4. **latency**: an idle (non-burst) worker; 5 warm-up jobs, then ``--lat`` jobs one at a
   time, each 10-30 ms after the previous one started; enqueue -> body start p50/p99
   (the body reports its own ``time.time()`` over loopback UDP);
5. **idle RSS** of that worker process (``ps -o rss``) once it is idle.

``memory://`` lives in one process: its worker runs in-process (``Worker.run`` on a
thread for latency), so it has no start-up or RSS figure.

Servers: Redis is a throwaway ``redis-server`` on a free loopback port (no persistence),
PostgreSQL a throwaway initdb cluster started by ``tests/servers/postgres.py``
(``fsync=off``, ``synchronous_commit=off``); SQLite a fresh file in a temp dir; Redis
Cluster three throwaway masters (``tests/servers/redis_cluster.py``); SQS + DynamoDB a moto
server on a thread of this process (``tests/servers/moto.py``: moto is slow Python, so
only ratios within one run mean anything there).

Run from the repo root::

    python bench/drain.py sqlite [-n 10000] [--lat 200] [--reps 3] [--json out.json]

Figures on a shared machine drift +-20% between runs; compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("memory", "sqlite", "redis", "postgres", "redis-cluster", "sqs")
APP_MODULE = "qc_drain_app"

APP_SOURCE = '''
"""The benchmark's app: one no-op task that records when its body starts."""
import os
import socket
import time

import queue_core

queue = queue_core.Queue(os.environ["QC_DRAIN_URL"])
_marks = []
_lat_port = int(os.environ.get("QC_DRAIN_LAT_PORT") or 0)
_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if _lat_port else None


@queue.task()
def noop(i):
    t = time.time()
    if _sock is not None:
        _sock.sendto(f"{i} {t!r}".encode(), ("127.0.0.1", _lat_port))
    else:
        _marks.append((i, t))
    return i


def dump_marks(path=None):
    path = path or os.environ.get("QC_DRAIN_MARKS")
    if path and _marks:
        with open(path, "w") as f:
            f.write("\\n".join(f"{i} {t!r}" for i, t in _marks))
    _marks.clear()


if os.environ.get("QC_DRAIN_MARKS"):
    import atexit

    atexit.register(dump_marks)
'''


# --------------------------------------------------------------------------- servers


@contextmanager
def storage_url(backend: str, workdir: Path) -> Iterator[Callable[[str], str]]:
    """Yield ``fresh(name) -> url``: an empty store of this backend per call."""
    sys.path.insert(0, str(ROOT))
    if backend == "memory":
        yield lambda name: "memory://"
    elif backend == "sqlite":
        yield lambda name: f"sqlite:///{workdir / (name + '.db')}"
    elif backend == "redis":
        from tests.servers.redis import start_redis_server, stop_redis_server

        server = start_redis_server()
        dbs = iter(range(16))
        try:
            yield lambda name: server.url(next(dbs))
        finally:
            stop_redis_server(server)
    elif backend == "postgres":
        from tests.servers.postgres import PostgresServer

        pg = PostgresServer()
        try:
            pg.start()

            def fresh(name: str) -> str:
                pg.create_database(name)
                return pg.url(name)

            yield fresh
        finally:
            pg.destroy()
    elif backend == "redis-cluster":
        from tests.servers.redis_cluster import start_redis_cluster, stop_redis_cluster

        cluster = start_redis_cluster()
        try:
            yield lambda name: cluster.url(prefix=name)
        finally:
            stop_redis_cluster(cluster)
    elif backend == "sqs":
        import logging

        from tests.servers.moto import moto_server

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        with moto_server() as (endpoint, _):  # a thread of this process
            yield lambda name: (
                f"sqs://?region=us-east-1&table=qc-{name}&prefix={name}&endpoint_url={endpoint}"
            )
    else:
        raise SystemExit(f"unknown backend {backend!r}; expected one of {BACKENDS}")


# --------------------------------------------------------------------------- helpers


def _pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile (as the peer harness computes it)."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def _worker_cmd(extra: list[str]) -> list[str]:
    cli = Path(sys.executable).parent / "queue-core"
    base = [str(cli)] if cli.exists() else [sys.executable, "-m", "contrib.cli"]
    return [*base, "worker", f"{APP_MODULE}:queue", *extra]


def _env(url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["QC_DRAIN_URL"] = url
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    env.pop("QC_DRAIN_LAT_PORT", None)
    env.pop("QC_DRAIN_MARKS", None)
    env.update(extra)
    return env


def _load_app(workdir: Path, url: str, lat_port: int = 0) -> Any:
    """Import a fresh copy of the app module in this process (for enqueueing)."""
    import importlib

    os.environ["QC_DRAIN_URL"] = url
    os.environ["QC_DRAIN_LAT_PORT"] = str(lat_port)
    os.environ.pop("QC_DRAIN_MARKS", None)
    if str(workdir) not in sys.path:
        sys.path.insert(0, str(workdir))
    sys.modules.pop(APP_MODULE, None)
    app = importlib.import_module(APP_MODULE)
    app.queue.migrate()
    return app


def _rss_kb(pid: int) -> int:
    out = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


# --------------------------------------------------------------------------- phases


def enqueue_single(app: Any, n: int) -> float:
    delay = app.noop.delay
    t0 = time.perf_counter()
    for i in range(n):
        delay(i)
    return n / (time.perf_counter() - t0)


def enqueue_bulk(app: Any, n: int, start: int = 0) -> float:
    t0 = time.perf_counter()
    for s in range(start, start + n, 1000):
        app.noop.map([(i,) for i in range(s, min(start + n, s + 1000))])
    return n / (time.perf_counter() - t0)


def drain(
    backend: str, app: Any, url: str, workdir: Path, n: int, log_level: str | None
) -> dict[str, float]:
    """Drain the n queued jobs with one burst worker; figures from the bodies' marks."""
    marks_file = workdir / f"marks-{time.monotonic_ns()}.txt"
    extra = ["--burst"] + (["--log-level", log_level] if log_level else [])
    if backend == "memory":
        from queue_core.worker import Worker

        spawn = time.time()
        Worker(app.queue, burst=True, install_signal_handlers=False).run()
        end = time.time()
        app.dump_marks(str(marks_file))
    else:
        spawn = time.time()
        proc = subprocess.run(
            _worker_cmd(extra),
            cwd=workdir,
            env=_env(url, QC_DRAIN_MARKS=str(marks_file)),
            capture_output=True,
            text=True,
        )
        end = time.time()
        if proc.returncode != 0:
            raise SystemExit(f"worker exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    rows = [line.split() for line in marks_file.read_text().splitlines() if line]
    ids = [int(r[0]) for r in rows]
    ts = sorted(float(r[1]) for r in rows)
    if len(ids) != n or len(set(ids)) != n:
        raise SystemExit(f"drain ran {len(ids)} bodies ({len(set(ids))} distinct), expected {n}")
    return {
        "total": n / (end - spawn),
        "harness": n / (ts[-1] - spawn),
        "steady": (n - 1) / (ts[-1] - ts[0]) if n > 1 else 0.0,
        "startup_s": ts[0] - spawn,
        "wall_s": end - spawn,
    }


def latency(
    backend: str, workdir: Path, url: str, jobs: int, log_level: str | None
) -> dict[str, float]:
    """Idle pick-up latency over ``jobs`` sequential jobs, and the worker's idle RSS."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(30)
    port = sock.getsockname()[1]
    app = _load_app(workdir, url, lat_port=port)
    proc: subprocess.Popen[bytes] | None = None
    worker: Any = None
    thread: threading.Thread | None = None
    if backend == "memory":
        from queue_core.worker import Worker

        worker = Worker(app.queue, install_signal_handlers=False)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
    else:
        extra = ["--log-level", log_level] if log_level else []
        proc = subprocess.Popen(
            _worker_cmd(extra),
            cwd=workdir,
            env=_env(url, QC_DRAIN_LAT_PORT=str(port)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    rss_kb = 0
    try:
        for w in range(5):
            app.noop.delay(-1 - w)
            sock.settimeout(90 if w == 0 else 30)
            sock.recvfrom(256)
        sock.settimeout(30)
        if proc is not None:
            time.sleep(1.0)
            rss_kb = _rss_kb(proc.pid)
        rnd = random.Random(1)
        lats: list[float] = []
        for k in range(jobs):
            time.sleep(rnd.uniform(0.010, 0.030))
            t0 = time.time()
            app.noop.delay(k)
            data, _ = sock.recvfrom(256)
            i_s, t_s = data.decode().split()
            if int(i_s) != k:
                raise SystemExit(f"latency: expected job {k}, got {i_s}")
            lats.append((float(t_s) - t0) * 1000.0)
        if proc is not None:
            rss_kb = max(rss_kb, _rss_kb(proc.pid))
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if worker is not None and thread is not None:
            worker.stop()
            thread.join(30)
        app.queue.close()
        sock.close()
    return {
        "p50_ms": _pct(lats, 50),
        "p99_ms": _pct(lats, 99),
        "max_ms": max(lats),
        "idle_rss_mb": rss_kb / 1024.0,
    }


def one_rep(
    backend: str, fresh: Callable[[str], str], workdir: Path, n: int, lat_jobs: int,
    log_level: str | None, rep: int,
) -> dict[str, Any]:
    url = fresh(f"drain{rep}")
    app = _load_app(workdir, url)
    out: dict[str, Any] = {"enqueue_single": enqueue_single(app, n)}
    out["drain_single"] = drain(backend, app, url, workdir, n, log_level)
    out["enqueue_bulk"] = enqueue_bulk(app, n, start=n)
    out["drain_bulk"] = drain(backend, app, url, workdir, n, log_level)
    app.queue.close()
    if lat_jobs:
        out["latency"] = latency(backend, workdir, fresh(f"lat{rep}"), lat_jobs, log_level)
    return out


def _median(reps: list[dict[str, Any]], *path: str) -> float:
    vals = []
    for r in reps:
        v: Any = r
        for p in path:
            v = v[p]
        vals.append(v)
    return float(statistics.median(vals))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("backend", choices=BACKENDS)
    ap.add_argument("-n", type=int, default=10_000, help="jobs per phase (default 10000)")
    ap.add_argument("--lat", type=int, default=200, help="latency jobs (0 = skip)")
    ap.add_argument("--reps", type=int, default=1, help="repetitions; medians are printed")
    ap.add_argument("--log-level", default=None,
                    help="pass --log-level to the worker (default: the CLI's default, as the "
                    "official harness runs it)")
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    args = ap.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="qc-drain-"))
    if shutil.which("ps") is None:
        raise SystemExit("ps is needed for the RSS figure")
    (workdir / f"{APP_MODULE}.py").write_text(APP_SOURCE)
    try:
        with storage_url(args.backend, workdir) as fresh:
            reps = [
                one_rep(args.backend, fresh, workdir, args.n, args.lat, args.log_level, r)
                for r in range(args.reps)
            ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"backend={args.backend} n={args.n} reps={args.reps} (medians)")
    print(f"  enqueue single        {_median(reps, 'enqueue_single'):>10,.0f} jobs/s")
    print(f"  enqueue bulk          {_median(reps, 'enqueue_bulk'):>10,.0f} jobs/s")
    for key in ("drain_single", "drain_bulk"):
        print(
            f"  {key:<14} spawn->exit {_median(reps, key, 'total'):>8,.0f} jobs/s | "
            f"harness {_median(reps, key, 'harness'):>7,.0f} | "
            f"steady {_median(reps, key, 'steady'):>7,.0f} | "
            f"start-up {_median(reps, key, 'startup_s'):.2f} s"
        )
    if args.lat:
        print(
            f"  latency p50/p99       {_median(reps, 'latency', 'p50_ms'):.2f} / "
            f"{_median(reps, 'latency', 'p99_ms'):.2f} ms (max "
            f"{max(r['latency']['max_ms'] for r in reps):.1f})"
        )
        if args.backend != "memory":
            print(f"  worker idle RSS       {_median(reps, 'latency', 'idle_rss_mb'):.1f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "reps": reps}, indent=2))


if __name__ == "__main__":
    main()
