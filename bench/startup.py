"""Worker start-up: spawn of ``queue-core worker APP --burst`` -> first job body starts.

One job is enqueued, then the console-script worker is spawned (as ../shared/bench does)
and the time from just before ``Popen`` to the body's own start timestamp is taken. The
worker exits by itself (``--burst``) before the next repetition. With ``--roots A,B`` the
workers run with each tree first on PYTHONPATH in turn (A/B/A/B), so load drift on a
shared machine cancels when two checkouts are compared. Prints median/min/max seconds::

    python bench/startup.py [--reps 10] [--backends sqlite,redis,postgresql] [--roots DIR,DIR]
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

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.latency import SERVERS, _LogTail  # noqa: E402
from queue_core import Queue  # noqa: E402
from tests.integration.helpers.drain_app import APP, CLI, register  # noqa: E402


def spawn_once(url: str, root: str, log: Path, i: int) -> tuple[float, float]:
    """Seconds from spawning a burst worker (tree ``root``) to the start of job ``i``, and
    the CPU seconds (user + system) the whole burst worker process used: on a loaded
    machine wall time swings with other processes, CPU time much less."""
    env = dict(os.environ, QUEUE_CORE_URL=url, QC_DRAIN_LOG=str(log), PYTHONPATH=root)
    tail = _LogTail(log)
    t0 = time.time()
    proc = subprocess.Popen(
        [CLI, "worker", APP, "--burst"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        started = tail.wait_start(i, 60)
    finally:
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"worker ({root}) exited {proc.returncode}: {err.decode()[-2000:]}")
    return started - t0, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--backends", default="sqlite,redis,postgresql")
    ap.add_argument("--roots", default=str(ROOT), help="comma-separated checkouts to alternate")
    a = ap.parse_args()
    roots = a.roots.split(",")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print(
            "note: PYTHONDONTWRITEBYTECODE is set, so a checkout without __pycache__ compiles"
            " its sources at every start (unset it to measure cached bytecode, as installed)"
        )
    print(
        f"worker start-up, spawn -> first body start, {a.reps} reps, median (min-max) s;"
        " cpu: median CPU s of the whole burst worker"
    )
    for name in a.backends.split(","):
        with SERVERS[name]() as url, tempfile.TemporaryDirectory(prefix="qc-su-") as d:
            q = Queue(url)
            q.migrate()
            task = register(q)
            log = Path(d) / "executions.log"
            times: dict[str, list[float]] = {r: [] for r in roots}
            cpu: dict[str, list[float]] = {r: [] for r in roots}
            i = 0
            for _ in range(a.reps):
                for r in roots:
                    task.delay(i)
                    wall, used = spawn_once(url, r, log, i)
                    times[r].append(wall)
                    cpu[r].append(used)
                    i += 1
            q.close()
        for r in roots:
            t, c = times[r], cpu[r]
            print(
                f"{name:<12}{statistics.median(t):7.3f} ({min(t):.3f}-{max(t):.3f})"
                f"  cpu {statistics.median(c):.3f}  {r}",
                flush=True,
            )


if __name__ == "__main__":
    main()
