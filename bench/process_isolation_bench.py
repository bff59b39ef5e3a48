"""Per-job overhead of ``isolation="process"`` against a thread, for a no-op body.

Run from the repository root::

    python -m bench.process_isolation_bench [--jobs 2000] [--concurrency 1]

Each mode runs ``--jobs`` calls of the same no-op, ``--concurrency`` at a time, after a
warm-up (children started, thread pool filled), and prints microseconds per job: wall
time, and CPU time (this process, plus the pool's children read from ``/proc`` on Linux),
which moves much less than wall time with other load on the machine.

This is the pool alone against ``anyio.to_thread.run_sync``; the worker's thread path
starts sync bodies from its claim thread without either, so the figure the
``isolation="process"`` target means (cost per job over thread isolation, through the
real worker) is the one ``bench/isolation_overhead.py`` prints.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import anyio

from queue_core.worker.process import ProcessOutcome, ProcessPool

NOOP_MODULE = "bench.process_isolation_bench"


def noop() -> None:
    """The body: does nothing."""


async def _spread(jobs: int, concurrency: int, one: object) -> float:
    async def lane(n: int) -> None:
        for _ in range(n):
            await one()  # type: ignore[operator]

    share = [jobs // concurrency + (i < jobs % concurrency) for i in range(concurrency)]
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for n in share:
            tg.start_soon(lane, n)
    return time.perf_counter() - started


def _cpu(pids: list[int]) -> float:
    """CPU seconds of this process and of the live children ``pids`` (``/proc``)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


async def main(jobs: int, concurrency: int) -> None:
    async def in_thread() -> None:
        await anyio.to_thread.run_sync(noop)

    async with ProcessPool(concurrency) as pool:

        async def in_process() -> None:
            result = await pool.run(
                NOOP_MODULE, "noop", (), {}, job_id="bench", attempt=1, timeout=30, kill_grace=1
            )
            assert result.outcome is ProcessOutcome.RETURNED, result

        await _spread(concurrency * 20, concurrency, in_process)  # warm-up
        await _spread(concurrency * 20, concurrency, in_thread)
        cpu = _cpu([])
        thread_s = await _spread(jobs, concurrency, in_thread)
        thread_cpu = _cpu([]) - cpu
        pids = pool.pids
        cpu = _cpu(pids)
        process_s = await _spread(jobs, concurrency, in_process)
        process_cpu = _cpu(pids) - cpu

    per = 1e6 / jobs
    thread_us, process_us = thread_s * per, process_s * per
    thread_cpu_us, process_cpu_us = thread_cpu * per, process_cpu * per
    print(f"{jobs} no-op jobs, concurrency {concurrency}      wall us/job   cpu us/job")
    print(f"  thread  (anyio.to_thread.run_sync): {thread_us:8.1f} {thread_cpu_us:12.1f}")
    print(f"  process (ProcessPool.run):          {process_us:8.1f} {process_cpu_us:12.1f}")
    print(
        f"  process isolation overhead:         {process_us - thread_us:8.1f}"
        f" {process_cpu_us - thread_cpu_us:12.1f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=1)
    options = parser.parse_args()
    anyio.run(main, options.jobs, options.concurrency)
