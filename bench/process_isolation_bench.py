"""Per-job overhead of ``isolation="process"`` against a thread, for a no-op body.

Run from the repository root::

    python -m bench.process_isolation_bench [--jobs 2000] [--concurrency 1]

Each mode runs ``--jobs`` calls of the same no-op, ``--concurrency`` at a time, after a
warm-up (children started, thread pool filled), and prints microseconds per job.
"""

from __future__ import annotations

import argparse
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
        thread_s = await _spread(jobs, concurrency, in_thread)
        process_s = await _spread(jobs, concurrency, in_process)

    thread_us = thread_s / jobs * 1e6
    process_us = process_s / jobs * 1e6
    print(f"{jobs} no-op jobs, concurrency {concurrency}")
    print(f"  thread  (anyio.to_thread.run_sync): {thread_us:8.1f} us/job")
    print(f"  process (ProcessPool.run):          {process_us:8.1f} us/job")
    print(f"  process isolation overhead:         {process_us - thread_us:8.1f} us/job")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=1)
    options = parser.parse_args()
    anyio.run(main, options.jobs, options.concurrency)
