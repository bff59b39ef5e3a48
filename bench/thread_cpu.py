"""CPU per job of each thread of an in-process burst worker (and of its children).

Run from the repository root::

    python -m bench.thread_cpu {thread,process} [--jobs 3000] [--backend memory|sqlite]
        [--slots 1]

Enqueues ``--jobs`` no-op jobs of one task with that isolation, drains them with one
burst worker in this process, and prints the drain rate, the worker's and its reaped
children's CPU per job, and the CPU per job of each thread by name
(``/proc/self/task/*/stat`` sampled every 50 ms while the worker runs: a thread that
ends is counted up to its last sample). The main thread's figure includes enqueueing the
jobs. Linux only (``/proc``). It measures the checkout it runs from, so two checkouts
run alternately compare two versions under the same load.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from queue_core import Queue


def _sample(seen: dict[int, tuple[str, float]], main: int) -> None:
    """Record each live thread's CPU seconds by native id."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        key = int(tid)
        name = "main (loop)" if key == main else names.get(key) or seen.get(key, (tid, 0))[0]
        seen[key] = (str(name), (int(fields[11]) + int(fields[12])) / tick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("isolation", choices=["thread", "process"])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--backend", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--slots", type=int, default=1)
    options = parser.parse_args()
    jobs = options.jobs
    with tempfile.TemporaryDirectory() as tmp:
        url = "memory://" if options.backend == "memory" else f"sqlite:///{Path(tmp, 'b.db')}"
        queue = Queue(url)
        queue.migrate()
        from bench.isolation_overhead import noop  # a module the child can import

        task = queue.task(name=f"noop_{options.isolation}", isolation=options.isolation)(noop)
        for start in range(0, jobs, 1000):
            task.map([()] * min(1000, jobs - start))
        seen: dict[int, tuple[str, float]] = {}
        done = threading.Event()
        me = threading.get_native_id()

        def sampler() -> None:
            while not done.wait(0.05):
                _sample(seen, me)

        watcher = threading.Thread(target=sampler, name="sampler", daemon=True)
        watcher.start()
        began, before = time.perf_counter(), os.times()
        queue.run_worker(
            slots=options.slots, burst=True, reap_interval=5.0, install_signal_handlers=False
        )
        took, after = time.perf_counter() - began, os.times()
        done.set()
        watcher.join()
        _sample(seen, me)
        queue.close()
    own = after.user + after.system - before.user - before.system
    kids = after.children_user + after.children_system
    kids -= before.children_user + before.children_system
    print(
        f"{options.isolation}, {options.backend}, {jobs} jobs: {jobs / took:.0f} jobs/s; "
        f"CPU us/job: worker {own / jobs * 1e6:.0f}, children {kids / jobs * 1e6:.0f}"
    )
    by_name: dict[str, float] = {}
    for name, cpu in seen.values():
        by_name[name] = by_name.get(name, 0.0) + cpu
    for name, cpu in sorted(by_name.items(), key=lambda item: -item[1]):
        print(f"  {name:24s} {cpu / jobs * 1e6:8.0f} us/job")


if __name__ == "__main__":
    main()
