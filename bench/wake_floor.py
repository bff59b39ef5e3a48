"""The machine's floor under an idle pick-up on Redis: ``LPUSH`` here, ``BLPOP`` in another
process, no queue-core at all.

An idle worker's pick-up (``bench/drain.py redis --lat``: enqueue -> body start) cannot
beat one process waking another through the server: this script measures that floor the
way the harness measures pick-up. A child process blocks in ``BLPOP`` (redis-py, as the
worker's claim thread does) and stamps ``time.time()`` when its reply arrives; this
process stamps ``time.time()`` just before each ``LPUSH``, one push at a time after a
random 10-30 ms pause (an idle machine between jobs). It prints p50 / p90 / p99 of
push -> reply, so that a pick-up figure can be read as this floor plus queue-core's own
part. On a virtual machine the floor moves with the host's load (an idle vCPU is halted
and woken), which is why pick-up figures should be compared with it measured the same
hour::

    python bench/wake_floor.py [--n 300]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from tests.servers.redis import start_redis_server, stop_redis_server  # noqa: E402

_CHILD = """
import sys, time, redis
r = redis.Redis.from_url(sys.argv[1])
while True:
    got = r.blpop(["floor:w"], 10)
    t = time.time()
    if got is None:
        continue
    if got[1] == b"quit":
        break
    r.rpush("floor:o", repr(t))
"""


def _pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * p))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=300, help="pushes (default 300)")
    n = ap.parse_args().n
    server = start_redis_server()
    url = server.url(0)
    client = redis.Redis.from_url(url)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, url])
    try:
        time.sleep(0.5)  # the child is blocked in BLPOP
        rnd, took = random.Random(1), []
        for i in range(n):
            t0 = time.time()
            client.lpush("floor:w", "1")
            while client.llen("floor:o") <= i:
                time.sleep(0.0002)
            took.append(float(client.lindex("floor:o", i) or 0) - t0)
            time.sleep(rnd.uniform(0.010, 0.030))
        client.lpush("floor:w", "quit")
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
        client.close()
        stop_redis_server(server)
    print(f"LPUSH -> BLPOP reply in another process, {n} pushes: p50 {_pct(took, 0.5):.3f} ms, "
          f"p90 {_pct(took, 0.9):.3f} ms, p99 {_pct(took, 0.99):.3f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
