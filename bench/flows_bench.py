"""Flow overhead: a 1,000-step fan-out/fan-in flow against 1,000 plain jobs.

The flow (``bench/_flows_app.py``) is 1 root -> 998 parallel steps -> 1 join; every
body only appends its start time to a marks file, as the plain ``bench.noop`` job's
body does. Each is run by one ``queue-core worker bench._flows_app:queue --burst``
process (the console script, default 8 slots), timed from spawn to exit, and from the
first to the last body start (``steady``: start-up excluded):

* ``jobs/s``: 1,000 plain jobs enqueued with ``.map`` and drained;
* ``steps/s``: one execution started and drained;
* ``overhead ms/step``: ``1/steps_per_s - 1/jobs_per_s`` on the steady figures, what a
  flow step costs beyond a plain job (reading its inputs, releasing its dependents,
  the execution's bookkeeping).

``--chain N`` runs a chain of N steps instead (each depends on the one before: one step
runs at a time, so its rate is the round trip from a step's end to the next one's start),
against a chain of N plain jobs, each enqueued by the body of the one before.

Targets: a storage URL (``sqlite:///tmp/f.db``, ``redis://localhost:6379/0``,
``postgresql://…``; it should be empty), or a backend name (``sqlite``, ``redis``,
``postgres``, ``redis-cluster``, ``sqs``) for a throwaway store started like
``bench/drain.py`` does. A backend
whose storage does not implement ``SupportsFlows`` is reported and skipped. With no
target (``nox -s bench``), all three names.

Run from the repo root::

    python bench/flows_bench.py [TARGET ...] [--width 998 | --chain 50] [--reps 3] [--json out.json]

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

NAMES = ("sqlite", "redis", "postgres")
APP = "bench._flows_app:queue"


CHAIN = 0
"""``--chain``: the steps of the chain flow run instead of the fan-out (0: the fan-out)."""


def _env(url: str, marks: Path, width: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(QC_BENCH_URL=url, QC_BENCH_MARKS=str(marks), QC_BENCH_WIDTH=str(width))
    env["QC_BENCH_CHAIN"] = str(CHAIN or 50)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _load_app(url: str, width: int) -> Any:
    """The app module imported in this process (for enqueueing), on ``url``."""
    os.environ["QC_BENCH_URL"] = url
    os.environ["QC_BENCH_WIDTH"] = str(width)
    os.environ["QC_BENCH_CHAIN"] = str(CHAIN or 50)
    sys.modules.pop("bench._flows_app", None)
    import bench._flows_app as app

    return app


def _drain(url: str, marks: Path, width: int, expect: int) -> dict[str, float]:
    """One burst worker from spawn to exit; rates from the bodies' marks."""
    cli = Path(sys.executable).parent / "queue-core"
    spawn = time.time()
    proc = subprocess.run(
        [str(cli), "worker", APP, "--burst"],
        cwd=ROOT,
        env=_env(url, marks, width),
        capture_output=True,
        text=True,
    )
    end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"worker exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    ts = sorted(float(x) for x in marks.read_text().split())
    if len(ts) != expect:
        raise SystemExit(f"{len(ts)} bodies ran, expected {expect}")
    return {
        "total": expect / (end - spawn),
        "steady": (expect - 1) / (ts[-1] - ts[0]),
        "wall_s": end - spawn,
    }


def one_rep(url_of: Callable[[str], str], workdir: Path, width: int, rep: int) -> dict[str, Any]:
    n = CHAIN or width + 2
    url = url_of(f"plain{rep}")
    app = _load_app(url, width)
    app.queue.migrate()
    if CHAIN:  # each plain job enqueues the next from its body
        app.link.delay(0, n)
    else:
        app.noop.map([(i,) for i in range(n)])
    jobs = _drain(url, workdir / f"plain{rep}.marks", width, n)
    app.queue.close()

    url = url_of(f"flow{rep}")
    app = _load_app(url, width)
    app.queue.migrate()
    execution = (app.chain if CHAIN else app.fan).start(1)
    steps = _drain(url, workdir / f"flow{rep}.marks", width, n)
    result = execution.result(timeout=10)
    last = f"c{n - 1}" if CHAIN else "join"
    if len(result) != n or result[last] != last:
        raise SystemExit(f"the execution's result has {len(result)} steps, expected {n}")
    app.queue.close()
    return {"jobs": jobs, "steps": steps}


def _supports_flows(url: str) -> bool:
    from queue_core import Queue, SupportsFlows

    q = Queue(url)
    try:
        return isinstance(q.storage(), SupportsFlows)
    finally:
        q.close()


def run(target: str, width: int, reps: int) -> dict[str, Any] | None:
    from drain import storage_url

    with tempfile.TemporaryDirectory(prefix="qc-flows-bench-") as tmp:
        workdir = Path(tmp)
        if "://" in target:
            # one given store: the plain jobs and the flow share it (drained in turn)
            def url_of(name: str) -> str:
                return target

            return _run(target, url_of, workdir, width, reps)
        with storage_url(target, workdir) as fresh:
            return _run(target, fresh, workdir, width, reps)


def _run(
    label: str, url_of: Callable[[str], str], workdir: Path, width: int, reps: int
) -> dict[str, Any] | None:
    if not _supports_flows(url_of("probe")):
        print(f"{label}: its storage does not implement SupportsFlows; skipped")
        return None
    rows = [one_rep(url_of, workdir, width, rep) for rep in range(reps)]

    def med(kind: str, fig: str) -> float:
        return statistics.median(r[kind][fig] for r in rows)

    jobs, steps = med("jobs", "steady"), med("steps", "steady")
    summary = {
        "target": label,
        "n": CHAIN or width + 2,
        "shape": "chain" if CHAIN else "fan-out",
        "jobs_per_s": jobs,
        "steps_per_s": steps,
        "jobs_per_s_total": med("jobs", "total"),
        "steps_per_s_total": med("steps", "total"),
        "overhead_ms_per_step": (1 / steps - 1 / jobs) * 1000,
        "reps": rows,
    }
    print(
        f"{label:<10} {summary['shape']} n={summary['n']}  "
        f"plain jobs {jobs:>8,.0f}/s  flow steps {steps:>8,.0f}/s  "
        f"overhead {summary['overhead_ms_per_step']:.2f} ms/step  "
        f"(spawn->exit: {summary['jobs_per_s_total']:,.0f} vs "
        f"{summary['steps_per_s_total']:,.0f}/s)"
    )
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "targets", nargs="*", help="storage URLs or sqlite|redis|postgres|redis-cluster|sqs"
    )
    parser.add_argument("--width", type=int, default=998, help="parallel steps (default 998)")
    parser.add_argument("--chain", type=int, default=0, help="a chain of N steps instead")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (median reported)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    global CHAIN
    CHAIN = args.chain
    results = [run(t, args.width, args.reps) for t in (args.targets or NAMES)]
    if args.json:
        args.json.write_text(json.dumps([r for r in results if r], indent=2))


if __name__ == "__main__":
    main()
