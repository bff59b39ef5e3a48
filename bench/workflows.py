"""Durable workflows (SPEC §12) on one storage URL: a 100-step workflow against 100 plain
jobs drained the same way, the resume latency after ``ctx.sleep("1s")``, and what one
finished workflow stores.

1. **Steps**: one workflow whose function runs ``--steps`` ``ctx.step`` calls (each one
   memo written, fenced by the lease) against ``--steps`` plain no-op jobs; both drained by
   one in-process burst worker, timed from the first body's start to the last end (as
   ``bench/flows_fanout.py`` and BENCH.md's flow figure). Ratio = workflow steps/s over
   plain jobs/s (BENCH.md's target: >= 0.5).
2. **Resume latency**: ``--resumes`` workflows, started 100 ms apart, each
   ``ctx.sleep("1s")`` then a step; a long-running worker in a thread. Latency = the
   next step's start minus the stored wake time, p50 and p95 (BENCH.md: within the
   pick-up latency).
3. **Storage per finished workflow**: ``--stored`` workflows shaped like the guide's
   example (2 steps, a sleep, an event wait, 2 children) run to the end; the records one
   holds through the storage API (execution, steps, memos, jobs, attempts), and what the
   backend holds: Python heap (memory://, tracemalloc), rows (sqlite), keys (redis),
   items of the storage's prefix (sqs://, a Scan).

Run from the repository root, one storage per run (give a fresh one)::

    python bench/workflows.py memory://
    python bench/workflows.py sqlite:////tmp/wf-bench.db --reps 3
    python bench/workflows.py redis://127.0.0.1:6379/5
    python bench/workflows.py "sqs://?endpoint_url=http://127.0.0.1:5000&prefix=wfb1"

Figures drift +-20% between runs on a shared machine: compare within one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from queue_core import DurableContext, Queue  # noqa: E402
from queue_core.storage.abilities import SupportsWorkflows  # noqa: E402
from queue_core.worker import Worker  # noqa: E402


def _drain(queue: Queue) -> None:
    queue.run_worker(burst=True, reap_interval=60.0, install_signal_handlers=False)


def step_rate(url: str, steps: int, tag: str) -> float:
    """Workflow ``ctx.step`` calls per second, first step start to function end."""
    queue = Queue(url)
    marks: list[float] = []
    try:

        def noop(i: int) -> int:
            if not marks:
                marks.append(time.perf_counter())
            return i

        @queue.workflow(name=f"bench.wf.{tag}")
        def many(ctx: DurableContext, n: int) -> int:
            total = sum(ctx.step(f"s{i}", noop, i) for i in range(n))
            marks.append(time.perf_counter())
            return total

        handle = many.start(steps)
        _drain(queue)
        assert handle.status().value == "succeeded", handle.status()
        return steps / (marks[-1] - marks[0])
    finally:
        queue.close()


def plain_rate(url: str, jobs: int, tag: str) -> float:
    """Plain no-op jobs per second, first body start to last body end."""
    queue = Queue(url)
    marks: list[float] = []
    try:

        @queue.task(name=f"bench.noop.{tag}")
        def noop(i: int) -> int:
            marks.append(time.perf_counter())
            return i

        noop.map([(i,) for i in range(jobs)])
        _drain(queue)
        return jobs / (marks[-1] - marks[0])
    finally:
        queue.close()


def resume_latency(url: str, count: int) -> list[float]:
    """Milliseconds from each workflow's stored wake time to its next step's start."""
    queue = Queue(url)
    started: dict[str, float] = {}
    try:

        @queue.workflow(name="bench.wf.nap")
        def nap(ctx: DurableContext, tag: str) -> float:
            ctx.sleep("1s")
            return float(ctx.step("after", lambda: started.setdefault(tag, time.time())))

        worker = Worker(queue, install_signal_handlers=False, reap_interval=5.0)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        handles = []
        for i in range(count):
            handles.append(nap.start(f"n{i}"))
            time.sleep(0.1)
        for h in handles:
            h.result(timeout=60)
        worker.stop()
        thread.join(30)
        storage = queue.storage()
        assert isinstance(storage, SupportsWorkflows)
        out = []
        for i, h in enumerate(handles):
            state = storage.workflow_state(h.id)
            assert state is not None
            wake_ms = int(state.memos["t:0"].value)
            out.append(started[f"n{i}"] * 1000.0 - wake_ms)
        return out
    finally:
        queue.close()


def _backend_count(url: str) -> tuple[str, float] | None:
    """What the backend holds now: rows (sqlite), keys (redis), items of the prefix (sqs);
    ``None`` otherwise."""
    if url.startswith("sqlite:///"):
        import sqlite3

        db = sqlite3.connect(url[len("sqlite:///") :])
        try:
            names = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
            return "rows", float(sum(db.execute(f'select count(*) from "{n}"').fetchone()[0]
                                     for n in names))  # fmt: skip
        finally:
            db.close()
    if url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(url)
        try:
            return "keys", float(client.dbsize())
        finally:
            client.close()
    if url.startswith("sqs://"):
        from backends.sqs import SQSStorage

        s = SQSStorage.from_url(url)
        try:
            pages = s.store.db.client.get_paginator("scan").paginate(
                TableName=s.store.db.name,
                FilterExpression="begins_with(pk, :p)",
                ExpressionAttributeValues={":p": {"S": s.store.keys.p}},
                Select="COUNT",
            )
            return "items", float(sum(page["Count"] for page in pages))
        finally:
            s.close()
    return None


def stored_per_workflow(url: str, count: int) -> dict[str, Any]:
    """Records (and heap bytes, rows or keys) one finished workflow leaves in storage."""
    queue = Queue(url)
    try:

        @queue.task(name="bench.mail")
        def mail(address: str) -> str:
            return address

        @queue.workflow(name="bench.wf.signup")
        async def sign_up(ctx: DurableContext, user: str) -> str:
            await ctx.step("create", lambda: user)
            await ctx.sleep(0.05)
            await ctx.wait_for_event("approval", key=user)
            sent = await ctx.gather(ctx.run(mail, f"{user}@a"), ctx.run(mail, f"{user}@b"))
            return str(await ctx.step("done", lambda: len(sent)))

        before = _backend_count(url)
        memory = url.startswith("memory:")
        if memory:
            tracemalloc.start()
            heap0 = tracemalloc.take_snapshot()
        handles = [sign_up.start(f"u{i}") for i in range(count)]
        _drain(queue)
        for i in range(count):
            queue.send_event("approval", key=f"u{i}", data=True)
        _drain(queue)
        assert all(h.status().value == "succeeded" for h in handles)
        out: dict[str, Any] = {}
        if memory:
            heap = tracemalloc.take_snapshot().compare_to(heap0, "filename")
            out["heap bytes"] = sum(d.size_diff for d in heap) / count
            tracemalloc.stop()
        after = _backend_count(url)
        if before is not None and after is not None:
            out[after[0]] = (after[1] - before[1]) / count
        storage = queue.storage()
        assert isinstance(storage, SupportsWorkflows)
        state = storage.workflow_state(handles[0].id)
        assert state is not None
        jobs = [s.job_id for s in state.steps if s.job_id]
        out["records"] = {
            "execution": 1,
            "steps": len(state.steps),
            "memos": len(state.memos),
            "jobs": len(jobs),
            "attempts": sum(len(storage.list_attempts(j)) for j in jobs),
        }
        return out
    finally:
        queue.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the storage URL (memory://, sqlite:///..., redis://...)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--resumes", type=int, default=20)
    parser.add_argument("--stored", type=int, default=200)
    args = parser.parse_args()
    wf: list[float] = []
    plain: list[float] = []
    for rep in range(args.reps):  # alternate, so both see the same machine
        wf.append(step_rate(args.url, args.steps, str(rep)))
        plain.append(plain_rate(args.url, args.steps, str(rep)))
    w, p = statistics.median(wf), statistics.median(plain)
    print(
        f"{args.url}: a {args.steps}-step workflow {w:,.0f} steps/s; {args.steps} plain jobs "
        f"{p:,.0f} jobs/s; ratio {w / p:.2f} (medians of {args.reps})"
    )
    late = sorted(resume_latency(args.url, args.resumes))
    p95 = late[min(len(late) - 1, int(len(late) * 0.95))]
    print(
        f"resume after ctx.sleep('1s'): wake time -> next step p50 "
        f"{statistics.median(late):.1f} ms, p95 {p95:.1f} ms ({len(late)} workflows)"
    )
    stored = stored_per_workflow(args.url, args.stored)
    print(f"one finished workflow (2 steps, a sleep, an event wait, 2 children): {stored}")


if __name__ == "__main__":
    main()
