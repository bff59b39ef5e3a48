"""Worker CPU per job: a burst worker drains N no-op jobs; its CPU time (user + sys,
``getrusage`` of the child) minus that of a burst worker on an empty queue, over N.

Run from a checkout (its code is what is measured)::

    python bench/worker_cpu.py sqlite -n 20000 --reps 3

``memory`` runs the worker in this process (``time.process_time`` around ``Worker.run``),
so it has no start-up to subtract. Voluntary context switches per job (``ru_nvcsw``,
the same way) count thread hand-offs and GIL waits. ``--profile FILE`` (memory only)
writes a cProfile.
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

import drain  # noqa: E402 - the app, servers and worker command of bench/drain.py


def _child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _switches(who: int) -> int:
    """Voluntary context switches (a thread that sleeps: a hand-off or a GIL wait)."""
    return resource.getrusage(who).ru_nvcsw


def _burst(url: str, workdir: Path) -> tuple[float, float, int]:
    """(CPU s, wall s, voluntary context switches) of one ``queue-core worker --burst``
    subprocess."""
    before, t0 = _child_cpu(), time.perf_counter()
    sw0 = _switches(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        drain._worker_cmd(["--burst"]),
        cwd=workdir,
        env=drain._env(url),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"worker exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    cpu, wall = _child_cpu() - before, time.perf_counter() - t0
    return cpu, wall, _switches(resource.RUSAGE_CHILDREN) - sw0


def one_rep(backend: str, fresh: object, workdir: Path, n: int, profile: str | None) -> dict:
    url = fresh(f"cpu{time.monotonic_ns()}")  # type: ignore[operator]
    app = drain._load_app(workdir, url)
    drain.enqueue_bulk(app, n)
    if backend == "memory":
        from queue_core.worker import Worker

        w = Worker(app.queue, burst=True, install_signal_handlers=False)
        if profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        c0, t0 = time.process_time(), time.perf_counter()
        sw0 = _switches(resource.RUSAGE_SELF)
        w.run()
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        switches = _switches(resource.RUSAGE_SELF) - sw0
        if profile:
            prof.disable()
            prof.dump_stats(profile)
        app._marks.clear()
        return {"us_per_job": cpu / n * 1e6, "jobs_per_s": n / wall, "cs_per_job": switches / n}
    empty = _burst(fresh(f"empty{time.monotonic_ns()}"), workdir)  # type: ignore[operator]
    cpu_empty = empty[0]
    cpu, wall, switches = _burst(url, workdir)
    return {
        "us_per_job": (cpu - cpu_empty) / n * 1e6,
        "jobs_per_s": n / wall,
        "cs_per_job": (switches - empty[2]) / n,
        "startup_cpu_s": cpu_empty,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("backend", choices=drain.BACKENDS)
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / f"{drain.APP_MODULE}.py").write_text(drain.APP_SOURCE)
        with drain.storage_url(args.backend, workdir) as fresh:
            reps = [
                one_rep(args.backend, fresh, workdir, args.n, args.profile)
                for _ in range(args.reps)
            ]
    us = statistics.median(r["us_per_job"] for r in reps)
    rate = statistics.median(r["jobs_per_s"] for r in reps)
    cs = statistics.median(r["cs_per_job"] for r in reps)
    each = " ".join(f"{r['us_per_job']:.0f}" for r in reps)
    print(
        f"{args.backend} n={args.n} cpu_us_per_job={us:.1f} (reps {each}) "
        f"vol_switches_per_job={cs:.2f} drain_jobs_per_s={rate:.0f} root={drain.ROOT}"
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
