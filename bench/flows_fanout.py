"""A 1,000-step fan-out/fan-in flow drained by one in-process burst worker, against
1,000 plain no-op jobs on the same storage (design ``flows-storage.md`` §8.6).

The flow: ``root`` -> ``s0`` ... ``s997`` (each depends on ``root``) -> ``join`` (depends
on all 998). Reports steps/s (1,000 / drain time) and plain jobs/s, medians of
``--reps``. Run from the repo root::

    python bench/flows_fanout.py sqlite [--steps 1000] [--reps 3]
    python bench/flows_fanout.py postgres

Figures on a shared machine drift +-20% between runs; compare within one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.drain import storage_url  # noqa: E402
from queue_core import Queue  # noqa: E402


def _flow_rate(url: str, steps: int) -> float:
    queue = Queue(url)
    try:
        flow = queue.flow("fan")
        flow.step(id="root")(lambda: 1)
        mids = [f"s{i}" for i in range(steps - 2)]
        for sid in mids:
            flow.step(id=sid, depends_on=["root"])(lambda root: root)
        flow.step(id="join", depends_on=mids)(lambda: None)
        handle = flow.start()
        t0 = time.perf_counter()
        queue.run_worker(burst=True, reap_interval=60.0)
        elapsed = time.perf_counter() - t0
        state = handle.status()
        assert state.value == "succeeded", state
        return steps / elapsed
    finally:
        queue.close()


def _plain_rate(url: str, jobs: int) -> float:
    queue = Queue(url)
    try:

        @queue.task(name="bench.noop")
        def noop(i: int) -> int:
            return i

        noop.map([(i,) for i in range(jobs)])
        t0 = time.perf_counter()
        queue.run_worker(burst=True, reap_interval=60.0)
        return jobs / (time.perf_counter() - t0)
    finally:
        queue.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend", choices=("memory", "sqlite", "redis", "postgres"))
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    flows: list[float] = []
    plain: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, storage_url(args.backend, Path(tmp)) as fresh:
        for rep in range(args.reps):
            flows.append(_flow_rate(fresh(f"flow{rep}"), args.steps))
            plain.append(_plain_rate(fresh(f"plain{rep}"), args.steps))
    f, p = statistics.median(flows), statistics.median(plain)
    print(
        f"{args.backend}: {args.steps}-step fan-out/fan-in {f:,.0f} steps/s; "
        f"plain jobs {p:,.0f} jobs/s; ratio {f / p:.2f} "
        f"(runs: flow {[round(x) for x in flows]}, plain {[round(x) for x in plain]})"
    )


if __name__ == "__main__":
    main()
