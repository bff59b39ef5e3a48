"""Worker start-up by phase: where spawn -> first job goes, for checkouts compared A/B.

``bench/startup.py`` times the whole start-up; on a loaded machine its imports swing by
hundreds of ms, which hides a change to what the worker does after them. This runs the
same ``queue-core worker APP --burst`` (the CLI's ``main`` in a small wrapper) and notes
wall-clock readings, in ms after spawn, at: the interpreter ready (``interp``), the CLI
imported (``cli``), the APP imported with its ``Queue`` (``app``), ``Worker.run_async``
entered (``loop``: the worker modules and anyio's backend imported), the claim loop
entered (``claiming``) and the first job body started (``body``), plus the process's
CPU ms (``cpu``). Checkouts alternate (A/B/A/B) so load drift cancels; prints medians
of each phase and of ``body - loop`` (the worker's own start: services, first claim)::

    python bench/startup_phases.py [--reps 10] [--backends sqlite,postgresql] [--roots A,B]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.latency import SERVERS  # noqa: E402
from queue_core import Queue  # noqa: E402
from tests.integration.helpers.drain_app import APP, register  # noqa: E402

PHASES = ("interp", "cli", "app", "loop", "claiming", "body", "cpu")

_WRAPPER = """
import json, os, sys, time
t0 = float(os.environ["QC_T0"]); marks = {"interp": time.time()}
from contrib.cli import main
marks["cli"] = time.time()
import queue_core.worker.runner as runner
import queue_core.worker.claiming as claiming
# the claim loop's class and method: ClaimLoop.claim_loop, or (before the worker was
# composed of parts) the mixin Claiming._claim_loop, so that checkouts of both compare
_cls, _name = (
    (claiming.ClaimLoop, "claim_loop") if hasattr(claiming, "ClaimLoop")
    else (claiming.Claiming, "_claim_loop")
)
run_async, claim_loop = runner.Worker.run_async, getattr(_cls, _name)
async def _run_async(self):
    marks["loop"] = time.time(); return await run_async(self)
async def _claim_loop(self):
    marks["claiming"] = time.time(); return await claim_loop(self)
runner.Worker.run_async = _run_async
setattr(_cls, _name, _claim_loop)
import tests.integration.helpers.drain_app as app
marks["app"] = time.time()
log = app._log
def _log(kind, i, attempt):
    marks.setdefault("body", time.time()); log(kind, i, attempt)
app._log = _log
sys.argv = ["queue-core", "worker", sys.argv[1], "--burst", "--log-level", "WARNING"]
try:
    main()
except SystemExit:
    pass
out = {k: 1000 * (v - t0) for k, v in marks.items()}
out["cpu"] = 1000 * time.process_time()
print(json.dumps(out))
"""


def spawn_once(url: str, root: str, log: Path) -> dict[str, float]:
    env = dict(os.environ, QUEUE_CORE_URL=url, QC_DRAIN_LOG=str(log), PYTHONPATH=root)
    env["QC_T0"] = repr(time.time())
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, APP], cwd=root, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"worker ({root}) exited {proc.returncode}: {proc.stderr[-2000:]}")
    marks: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return marks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--roots", default=str(ROOT), help="comma-separated checkouts to alternate")
    a = ap.parse_args()
    roots = a.roots.split(",")
    print(f"start-up phases, ms after spawn, {a.reps} reps, medians; own = body - loop")
    for name in a.backends.split(","):
        with SERVERS[name]() as url, tempfile.TemporaryDirectory(prefix="qc-sp-") as d:
            q = Queue(url)
            q.migrate()
            task = register(q)
            log = Path(d) / "executions.log"
            runs: dict[str, list[dict[str, float]]] = {r: [] for r in roots}
            for i in range(a.reps):
                for r in roots:
                    task.delay(i)
                    runs[r].append(spawn_once(url, r, log))
            q.close()
        for r in roots:
            cols = [f"{p} {statistics.median(m[p] for m in runs[r]):5.0f}" for p in PHASES]
            own = statistics.median(m["body"] - m["loop"] for m in runs[r])
            print(f"{name:<11} {'  '.join(cols)}  own {own:4.0f}  {r}", flush=True)


if __name__ == "__main__":
    main()
