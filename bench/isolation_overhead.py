"""Per-job overhead of ``isolation="process"`` against ``"thread"``, through the real worker.

Run from the repository root::

    python -m bench.isolation_overhead [--jobs 2000] [--backend memory|sqlite] [--slots 1]

For each mode, a burst worker drains a small batch and then a large one (``--jobs`` more
no-op jobs), each in a fresh worker; the difference of the two wall times divided by
the difference of the job counts is the cost of one job, free of fixed costs (worker
start-up, the children's interpreter start-up, the burst end check). Prints
microseconds per job for both modes and the difference.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from queue_core import Queue

SMALL = 100
"""Jobs in the small batch whose time is subtracted."""


def noop() -> None:
    """The body: does nothing."""


def _drain(backend: str, mode: str, jobs: int, slots: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        url = "memory://" if backend == "memory" else f"sqlite:///{Path(tmp, 'bench.db')}"
        return _drain_url(url, mode, jobs, slots)


def _drain_url(url: str, mode: str, jobs: int, slots: int) -> float:
    queue = Queue(url)
    queue.migrate()
    from bench.isolation_overhead import noop as body  # a module the child can import

    task = queue.task(name=f"noop_{mode}", isolation=mode, timeout=60)(body)
    for start in range(0, jobs, 1000):
        task.map([()] * min(1000, jobs - start))
    began = time.perf_counter()
    queue.run_worker(slots=slots, burst=True, reap_interval=5.0, install_signal_handlers=False)
    took = time.perf_counter() - began
    done = sum(s.succeeded for s in queue.stats())
    queue.close()
    if done != jobs:
        raise SystemExit(f"{mode}: {done} of {jobs} jobs succeeded")
    return took


def per_job_us(backend: str, mode: str, jobs: int, slots: int) -> float:
    """Microseconds per job in ``mode``: (T(SMALL + jobs) - T(SMALL)) / jobs."""
    small = _drain(backend, mode, SMALL, slots)
    large = _drain(backend, mode, SMALL + jobs, slots)
    return (large - small) / jobs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--backend", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--slots", type=int, default=1)
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    thread = per_job_us(options.backend, "thread", options.jobs, options.slots)
    process = per_job_us(options.backend, "process", options.jobs, options.slots)
    print(
        f"{options.jobs} no-op jobs per mode, one burst worker, slots={options.slots}, "
        f"{options.backend}"
    )
    print(f"  isolation='thread':  {thread:8.1f} us/job")
    print(f"  isolation='process': {process:8.1f} us/job")
    print(f"  process overhead:    {process - thread:8.1f} us/job")


if __name__ == "__main__":
    main()
