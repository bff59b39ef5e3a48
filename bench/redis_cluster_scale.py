"""Redis Cluster scale-out: the same work on a 1-master and a 3-master local cluster.

Each queue's keys share the queue's own hash tag (SPEC §8, docs/backends/redis.md "Redis
Cluster"), so several queues spread over the masters. This bench starts two local
clusters (``tests/servers/redis_cluster.py``: one master holding every slot, and three
masters), picks ``--queues`` queue names whose homes fall on the three masters in turn,
and on each cluster, alternately, ``--reps`` times:

1. **enqueue**: one producer process per queue, each ``noop.delay(i)`` ``-n`` times;
   jobs/s = all jobs / (last producer done - first producer started), every process
   released together by a barrier once imported and connected;
2. **drain**: one burst ``Worker`` process per queue (``--slots`` slots, its queue only),
   released the same way; jobs/s = all jobs / (last worker done - first worker started).

Besides the rates it prints each master's server CPU (``INFO cpu``, user + sys seconds
over the phase): the busiest master's CPU per job bounds what the servers could carry,
``jobs / busiest master's CPU s`` (the "server-bound" column), which is what adding
masters raises. The clients (producers and workers) share this machine's cores with the
servers, so the measured rates show the scale-out only where the single master was the
bottleneck.

Run from the repo root::

    python bench/redis_cluster_scale.py [--queues 3] [-n 5000] [--reps 3] [--slots 8]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _app(url: str, queue: str) -> tuple[Any, Any]:
    from queue_core import Queue

    q = Queue(url)

    @q.task(name="bench.noop", queue=queue)
    def noop(i: int) -> int:
        return i

    return q, noop


def _producer(url: str, queue: str, n: int, barrier: Any, out: Any) -> None:
    q, noop = _app(url, queue)
    noop.delay(-1)  # connected, scripts loaded, the queue's home registered
    barrier.wait()
    t0 = time.time()
    delay = noop.delay
    for i in range(n):
        delay(i)
    out.put((t0, time.time()))
    q.close()


def _worker(url: str, queue: str, slots: int, barrier: Any, out: Any) -> None:
    from queue_core.worker import Worker

    q, _ = _app(url, queue)
    w = Worker(q, queues=[queue], slots=slots, burst=True, scheduler=False,
               install_signal_handlers=False)  # fmt: skip
    q.stats()  # connected
    barrier.wait()
    t0 = time.time()
    w.run()
    out.put((t0, time.time()))
    q.close()


def _cpu(nodes: list[Any]) -> list[float]:
    import redis

    got = []
    for n in nodes:
        r = redis.Redis(host=n.host, port=n.port)
        info = r.info("cpu")
        got.append(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]))
        r.close()
    return got


def _phase(target: Any, args: list[tuple[Any, ...]], nodes: list[Any]) -> tuple[float, list[float]]:
    """Run one process per ``args`` entry, released together; wall seconds and the CPU
    seconds each master spent meanwhile."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(args) + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, barrier, out)) for a in args]
    for p in procs:
        p.start()
    barrier.wait()
    before = _cpu(nodes)
    times = [out.get(timeout=600) for _ in procs]
    after = _cpu(nodes)
    for p in procs:
        p.join(60)
    wall = max(t1 for _, t1 in times) - min(t0 for t0, _ in times)
    return wall, [b - a for a, b in zip(before, after, strict=True)]


def _queues(three: Any, prefix: str, k: int) -> list[str]:
    """``k`` queue names whose homes ``{prefix:name}`` fall on the masters in turn."""
    from redis.cluster import RedisCluster

    node = three.nodes[0]
    rc: RedisCluster[bytes] = RedisCluster(host=node.host, port=node.port)
    try:
        owners = [f"{n.host}:{n.port}" for n in rc.get_primaries()]
        names: list[str] = []
        i = 0
        while len(names) < k:
            name = f"q{i}"
            owner = rc.get_node_from_key(f"{{{prefix}:{name}}}")
            if owner is not None and owner.name == owners[len(names) % len(owners)]:
                names.append(name)
            i += 1
        return names
    finally:
        rc.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queues", type=int, default=3, help="queues, one process each (3)")
    ap.add_argument("-n", type=int, default=5000, help="jobs per queue (5000)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions, alternated (3)")
    ap.add_argument("--slots", type=int, default=8, help="slots per worker (8)")
    args = ap.parse_args()

    from tests.servers.redis_cluster import start_redis_cluster, stop_redis_cluster

    clusters = {1: start_redis_cluster(1), 3: start_redis_cluster(3)}
    rows: dict[tuple[int, str], list[tuple[float, float, list[float]]]] = {}
    try:
        total = args.n * args.queues
        for rep in range(args.reps):
            for masters in (1, 3) if rep % 2 == 0 else (3, 1):
                c = clusters[masters]
                prefix = f"b{uuid.uuid4().hex[:8]}"
                names = _queues(clusters[3], prefix, args.queues)  # spread on the 3 masters
                url = c.url(prefix=prefix)
                nodes = list(c.nodes)
                wall, cpu = _phase(_producer, [(url, q, args.n) for q in names], nodes)
                rows.setdefault((masters, "enqueue"), []).append((total / wall, wall, cpu))
                wall, cpu = _phase(_worker, [(url, q, args.slots) for q in names], nodes)
                rows.setdefault((masters, "drain"), []).append((total / wall, wall, cpu))
                enq, drn = rows[masters, "enqueue"][-1][0], rows[masters, "drain"][-1][0]
                print(f"rep {rep + 1} {masters} master(s): enqueue {enq:,.0f}/s, "
                      f"drain {drn:,.0f}/s", flush=True)  # fmt: skip
    finally:
        for c in clusters.values():
            stop_redis_cluster(c)
    _report(rows, args, total)


def _report(
    rows: dict[tuple[int, str], list[tuple[float, float, list[float]]]], args: Any, total: int
) -> None:
    print(f"\n{args.queues} queues x {args.n} jobs, one process per queue, "
          f"{args.slots} slots per worker; medians of {args.reps}")  # fmt: skip
    print(
        f"{'phase':<8} {'masters':>7} {'jobs/s':>9} {'CPU s per master':>28} {'server-bound':>13}"
    )
    med: dict[tuple[int, str], float] = {}
    for phase in ("enqueue", "drain"):
        for masters in (1, 3):
            got = sorted(rows[masters, phase], key=lambda r: r[0])
            _, _, cpu = got[len(got) // 2]  # the median run's CPU
            med[masters, phase] = statistics.median(r[0] for r in got)
            bound = total / max(cpu) if max(cpu) > 0 else float("inf")
            cells = " ".join(f"{c:5.2f}" for c in cpu)
            rate = med[masters, phase]
            print(f"{phase:<8} {masters:>7} {rate:>9,.0f} {cells:>28} {bound:>11,.0f}/s")
        print(f"{phase:<8} {'3 vs 1':>7} {med[3, phase] / med[1, phase]:>8.2f}x")


if __name__ == "__main__":
    main()
