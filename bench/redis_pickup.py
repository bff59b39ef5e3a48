"""Redis idle pick-up, in one process: enqueue -> claimed, two ways, alternated.

A waiter thread blocks the way an idle worker's claim thread does, either with
``wait_for_jobs`` then ``claim`` (two round trips after the wake-up) or with
``wait_and_claim`` (the ``BLPOP`` and the claim pipelined: one); the main thread
enqueues one job at a time after a random 5-15 ms pause and takes the time from just
before the enqueue to the claim's return. No worker, no body: the storage part of the
pick-up latency only. Rounds of ``--n`` jobs alternate between the two ways::

    python bench/redis_pickup.py [--n 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.redis import RedisStorage  # noqa: E402
from queue_core.testing.fixtures import new_job  # noqa: E402


def _round(storage: RedisStorage, n: int, combined: bool, rnd: random.Random) -> list[float]:
    done = threading.Semaphore(0)
    stamps: list[float] = []
    stop = threading.Event()

    def waiter() -> None:
        while not stop.is_set():
            if combined:
                got = storage.wait_and_claim("w", ["lat"], 1, 30_000, 0.5)
            else:
                storage.wait_for_jobs(["lat"], 0.5)
                got = storage.claim("w", ["lat"], 1, 30_000)
            if got:
                stamps.append(time.perf_counter())
                done.release()

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    lats = []
    for _ in range(n):
        time.sleep(rnd.uniform(0.005, 0.015))
        t0 = time.perf_counter()
        storage.enqueue([new_job(queue="lat")], now=None)
        done.acquire()
        lats.append((stamps[-1] - t0) * 1000.0)
    stop.set()
    storage.enqueue([new_job(queue="lat")], now=None)
    t.join()
    return lats


def main() -> None:
    from tests.servers.redis import start_redis_server, stop_redis_server

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    server = start_redis_server()
    try:
        storage = RedisStorage.from_url(server.url(prefix="pick"))
        rnd = random.Random(1)
        res: dict[bool, list[float]] = {False: [], True: []}
        for r in range(a.rounds):
            for combined in (False, True):
                lats = _round(storage, a.n, combined, rnd)
                res[combined].append(statistics.median(lats))
                print(
                    f"round {r} {'wait_and_claim' if combined else 'wait+claim':<15}"
                    f" p50 {statistics.median(lats):.3f} ms",
                    flush=True,
                )
        for combined, meds in res.items():
            name = "wait_and_claim" if combined else "wait_for_jobs+claim"
            print(f"{name:<20} median of round p50s {statistics.median(meds):.3f} ms")
        storage.close()
    finally:
        stop_redis_server(server)


if __name__ == "__main__":
    main()
