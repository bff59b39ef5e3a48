"""Micro-benchmark of the Redis backend's hot paths (storage API only, no worker).

Starts its own redis-server on a free loopback port, then measures:
enqueue with single calls, claim(8)+finish(8) batches draining the jobs, and
list_dead pages of 50 out of N dead jobs, and claim cost with many finished jobs kept.

    python bench/redis_microbench.py [--jobs 10000] [--dead 100000] [--hot-only]

``--hot-only`` stops after the hot paths (single and bulk enqueue, claim+finish on an
empty store) and prints the server's per-command call counts per job.
"""

from __future__ import annotations

import argparse
import time
import uuid

from backends.redis import RedisStorage
from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    Decision,
    NewJob,
    Outcome,
)
from tests.servers.redis import start_redis_server, stop_redis_server

DONE = Decision(action=Action.COMPLETE)


def _server_us(s: RedisStorage) -> float:
    """Server time in scripts (INFO commandstats usec of EVALSHA, which includes the
    commands a script calls) since the last call, then reset the statistics."""
    stats = s.store.client.info("commandstats")
    s.store.client.config_resetstat()
    return float(stats.get("cmdstat_evalsha", {}).get("usec", 0))


def _drain(s: RedisStorage, batch: int) -> int:
    n = 0
    while True:
        claimed = s.claim("w", ["default"], batch, 30_000)
        if not claimed:
            return n
        s.finish(
            [
                AttemptEnd(ref=c.ref, outcome=Outcome.SUCCEEDED, decision=DONE, result=b"1")
                for c in claimed
            ]
        )
        n += len(claimed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--dead", type=int, default=100_000)
    ap.add_argument("--finished", type=int, default=200_000)
    ap.add_argument("--hot-only", action="store_true")
    a = ap.parse_args()
    server = start_redis_server()
    try:
        s = RedisStorage.from_url(server.url(prefix="bench"))
        payload = b'{"args":[1],"kwargs":{}}'
        ids = [uuid.uuid4().hex for _ in range(a.jobs)]
        _server_us(s)
        t = time.perf_counter()
        for i in ids:
            s.enqueue([NewJob(id=i, task_name="noop", queue="default", payload=payload)])
        enq = a.jobs / (time.perf_counter() - t)
        enq_us = _server_us(s) / a.jobs
        t = time.perf_counter()
        assert _drain(s, 8) == a.jobs
        drain = a.jobs / (time.perf_counter() - t)
        print(f"enqueue single     {enq:10,.0f} jobs/s  (server {enq_us:.1f} us/job)")
        print(f"claim(8)+finish(8) {drain:10,.0f} jobs/s  (empty store)")
        bulk_ids = [uuid.uuid4().hex for _ in range(a.jobs)]
        _server_us(s)
        t = time.perf_counter()
        for start in range(0, a.jobs, 1000):
            s.enqueue(
                [
                    NewJob(id=i, task_name="noop", queue="default", payload=payload)
                    for i in bulk_ids[start : start + 1000]
                ]
            )
        bulk = a.jobs / (time.perf_counter() - t)
        bulk_us = _server_us(s) / a.jobs
        print(f"enqueue bulk(1000) {bulk:10,.0f} jobs/s  (server {bulk_us:.1f} us/job)")
        t = time.perf_counter()
        assert _drain(s, 8) == a.jobs
        drain = a.jobs / (time.perf_counter() - t)
        drain_us = _server_us(s) / a.jobs
        print(f"claim(8)+finish(8) {drain:10,.0f} jobs/s  (again; server {drain_us:.1f} us/job)")
        if a.hot_only:
            s.close()
            return

        # claim cost with many finished jobs kept (retention 7 d)
        for _start in range(0, a.finished, 1000):
            s.enqueue(
                [
                    NewJob(id=uuid.uuid4().hex, task_name="noop", queue="default", payload=payload)
                    for _ in range(1000)
                ]
            )
            _drain(s, 500)
        for i in ids:
            s.enqueue([NewJob(id="b" + i, task_name="noop", queue="default", payload=payload)])
        t = time.perf_counter()
        assert _drain(s, 8) == a.jobs
        full = a.jobs / (time.perf_counter() - t)
        kept = a.finished + 2 * a.jobs
        print(f"claim(8)+finish(8) {full:10,.0f} jobs/s  (with {kept:,} finished jobs kept)")

        # list_dead page of 50 out of N
        fatal = Decision(action=Action.DEAD, reason="fatal")
        for _start in range(0, a.dead, 1000):
            s.enqueue(
                [
                    NewJob(id=uuid.uuid4().hex, task_name="noop", queue="dq", payload=payload)
                    for _ in range(1000)
                ]
            )
            claimed = s.claim("w", ["dq"], 1000, 30_000)
            s.finish(
                [AttemptEnd(ref=c.ref, outcome=Outcome.FAILED, decision=fatal) for c in claimed]
            )
        times = []
        for off in (0, a.dead // 2, a.dead - 50):
            t = time.perf_counter()
            page = s.list_dead(50, off)
            times.append((time.perf_counter() - t) * 1000)
            assert len(page) == 50
        print(f"list_dead 50 of {a.dead:,}: " + ", ".join(f"{x:.2f} ms" for x in times))
        s.close()
    finally:
        stop_redis_server(server)


if __name__ == "__main__":
    main()
