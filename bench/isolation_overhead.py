"""Per-job overhead of ``isolation="process"`` against ``"thread"``, through the real worker.

Run from the repository root::

    python -m bench.isolation_overhead [--jobs 2000] [--backend memory|sqlite] [--slots 1]
        [--url redis://localhost:6379/0] [--repeat 1]

For each mode, a burst worker drains a small batch and then a large one (``--jobs`` more
no-op jobs), each in a fresh worker; the difference of the two wall times divided by
the difference of the job counts is the cost of one job, free of fixed costs (worker
start-up, the children's interpreter start-up, the burst end check). Prints
microseconds per job for both modes and the difference, in wall time and in CPU time
(the worker process plus its reaped children: less sensitive to other load on the
machine than wall time), and the process drain rate as a share of the thread one.
``--url`` drains another backend (e.g. a Redis URL; its database is flushed first);
``--repeat`` alternates the modes that many times (thread, process, thread, ...).
"""

from __future__ import annotations

import argparse
import logging
import resource
import tempfile
import time
from pathlib import Path

from queue_core import Queue

SMALL = 100
"""Jobs in the small batch whose time is subtracted."""


def noop() -> None:
    """The body: does nothing."""


def _drain(backend: str, mode: str, jobs: int, slots: int) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of one burst drain; ``backend`` is a name or a URL."""
    if "://" in backend:
        return _drain_url(backend, mode, jobs, slots)
    with tempfile.TemporaryDirectory() as tmp:
        url = "memory://" if backend == "memory" else f"sqlite:///{Path(tmp, 'bench.db')}"
        return _drain_url(url, mode, jobs, slots)


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _flush(url: str) -> None:
    if url.startswith("redis"):
        import redis

        redis.Redis.from_url(url).flushdb()


def _drain_url(url: str, mode: str, jobs: int, slots: int) -> tuple[float, float]:
    _flush(url)
    queue = Queue(url)
    queue.migrate()
    from bench.isolation_overhead import noop as body  # a module the child can import

    task = queue.task(name=f"noop_{mode}", isolation=mode, timeout=60)(body)
    for start in range(0, jobs, 1000):
        task.map([()] * min(1000, jobs - start))
    began, cpu = time.perf_counter(), _cpu()
    queue.run_worker(slots=slots, burst=True, reap_interval=5.0, install_signal_handlers=False)
    took, cpu = time.perf_counter() - began, _cpu() - cpu
    done = sum(s.succeeded for s in queue.stats())
    queue.close()
    if done != jobs:
        raise SystemExit(f"{mode}: {done} of {jobs} jobs succeeded")
    return took, cpu


def per_job_us(backend: str, mode: str, jobs: int, slots: int) -> tuple[float, float]:
    """Wall and CPU microseconds per job in ``mode``: (T(SMALL + jobs) - T(SMALL)) / jobs."""
    small = _drain(backend, mode, SMALL, slots)
    large = _drain(backend, mode, SMALL + jobs, slots)
    return (large[0] - small[0]) / jobs * 1e6, (large[1] - small[1]) / jobs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--backend", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--slots", type=int, default=1)
    parser.add_argument("--url", default=None, help="drain this backend instead")
    parser.add_argument("--repeat", type=int, default=1)
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    backend = options.url or options.backend
    print(f"{options.jobs} no-op jobs per mode, one burst worker, slots={options.slots}, {backend}")
    print("                        wall us/job   cpu us/job")
    for _ in range(options.repeat):
        thread = per_job_us(backend, "thread", options.jobs, options.slots)
        process = per_job_us(backend, "process", options.jobs, options.slots)
        print(f"  isolation='thread':  {thread[0]:10.1f} {thread[1]:12.1f}")
        print(f"  isolation='process': {process[0]:10.1f} {process[1]:12.1f}")
        print(
            f"  process overhead:    {process[0] - thread[0]:10.1f} {process[1] - thread[1]:12.1f}"
            f"   (process drain = {thread[0] / process[0]:.2f} x thread drain)"
        )


if __name__ == "__main__":
    main()
