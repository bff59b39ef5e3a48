"""queue-core's main job, end to end, on the embedded SQLite default.

    pip install -e . && python examples/demo.py

It enqueues a mix of jobs -- some succeed, one is flaky (fails twice, then succeeds),
some always fail, one fails fatally -- runs a worker in burst mode, prints what happened
to every job (state and each attempt's outcome and reason), lists the dead-letter queue,
then "fixes" the broken dependency and replays one dead job with ``retry_dead``.

Everything lives in ./demo_queue.db, removed at the start, so each run starts clean.
Backoffs are a few milliseconds so the whole run takes a few seconds.
"""

from __future__ import annotations

import logging
from pathlib import Path

from queue_core import JobContext, JobHandle, Queue, TaskError
from queue_core.rules.ids import short_ids

DB = Path("demo_queue.db")
for leftover in (DB, DB.with_name(DB.name + "-wal"), DB.with_name(DB.name + "-shm")):
    leftover.unlink(missing_ok=True)

queue = Queue(f"sqlite:///{DB}")

# The "downstream service" the failing task depends on; the demo fixes it before replaying.
DOWNSTREAM_UP = False


@queue.task(name="demo.add")
def add(a: int, b: int) -> int:
    """Always succeeds on the first attempt."""
    return a + b


@queue.task(name="demo.flaky", max_retries=3, retry_backoff="20ms", retry_jitter=0)
def flaky(order_id: int, ctx: JobContext) -> str:
    """Fails on attempts 1 and 2 (a transient error), succeeds on attempt 3."""
    if ctx.attempt < 3:
        raise ConnectionError(f"payment gateway timed out (attempt {ctx.attempt})")
    return f"order {order_id} paid on attempt {ctx.attempt}"


@queue.task(name="demo.sync_inventory", max_retries=2, retry_backoff="10ms",
            retry_coefficient=2.0)
def sync_inventory(sku: str) -> str:
    """Fails every attempt until the downstream service is up: 3 attempts, then the DLQ."""
    if not DOWNSTREAM_UP:
        raise RuntimeError(f"inventory service unreachable while syncing {sku}")
    return f"{sku} synced"


@queue.task(name="demo.charge_card", max_retries=5)
def charge_card(card: str) -> None:
    """A fatal error: dead-lettered after one attempt despite max_retries=5."""
    raise TaskError.fatal(f"card {card} was declined")


def describe(handle: JobHandle, short: dict[str, str]) -> None:
    """Print a job's final state and the record of every attempt (``short``: the
    abbreviation of each job id, as ``short_ids`` made them)."""
    info = handle.info()
    print(f"  {info.task_name:<20} {short.get(info.id, info.id)}  state={info.state.value:<9}"
          f" reason={info.reason or '-':<17} attempts={info.attempts}/{info.max_attempts}"
          f"  result={info.result!r}")
    for rec in handle.attempts():
        error = f"  {rec.error_class}: {rec.message}" if rec.error_class else ""
        outcome = rec.outcome.value if rec.outcome else "running"
        print(f"      attempt {rec.number}: {outcome:<9} reason={rec.reason or '-':<8}{error}")


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    jobs = [
        add.delay(2, 3),
        add.delay(40, 2),
        flaky.delay(1001),
        sync_inventory.delay("SKU-1"),
        sync_inventory.delay("SKU-2"),
        charge_card.delay("4000-0000-0000-0002"),
    ]
    print(f"Enqueued {len(jobs)} jobs into {DB}; running a burst worker...")
    queue.run_worker(burst=True, slots=4)

    # job ids are time-ordered: jobs enqueued together share a long head, so they are
    # shown cut to the shortest length at which they differ (any unique prefix works
    # with the CLI: queue-core jobs show <prefix>)
    short = short_ids(h.id for h in jobs)
    print("\nWhat happened to each job:")
    for handle in jobs:
        describe(handle, short)

    dead = queue.dead_letters(limit=20)
    print(f"\nDead-letter queue ({len(dead)} entries, newest first):")
    dead_short = short_ids(e.id for e in dead)
    for entry in dead:
        print(f"  {dead_short[entry.id]}  {entry.task_name:<20} reason={entry.reason:<17}"
              f" {entry.error_class}: {entry.error}  ({len(entry.attempts)} attempt records,"
              f" args={list(entry.args)})")

    global DOWNSTREAM_UP
    DOWNSTREAM_UP = True
    victim = next(e for e in dead if e.task_name == "demo.sync_inventory")
    new_id = queue.retry_dead(victim.id)
    print(f"\nInventory service is back: replayed dead entry {dead_short[victim.id]}"
          f" as job {new_id} with a fresh retry budget.")
    queue.run_worker(burst=True, slots=4)
    replay = queue.job(new_id)
    describe(replay, {})
    replay_of = replay.info().replay_of or ""
    print(f"  replay_of={dead_short.get(replay_of, replay_of)};"
          f" dead-letter entries left: {len(queue.dead_letters())}")
    print("\nInspect the same data from the CLI:\n"
          f"  queue-core dlq list --url sqlite:///{DB}\n"
          f"  queue-core jobs show {new_id} --url sqlite:///{DB}")
    queue.close()


if __name__ == "__main__":
    main()
