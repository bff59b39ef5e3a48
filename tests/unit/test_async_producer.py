"""The async producer API: ``delay_async``/``apply_async``/``job_async`` and the handle's
``*_async`` twins never block the event loop, and return what their sync twins return."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from queue_core import ConfigError, JobFailed, JobState, NotFound, Queue, TaskError


def test_a_thousand_enqueues_never_stall_a_10ms_heartbeat(tmp_path: Path) -> None:
    """The event loop keeps ticking through 1,000 ``delay_async`` calls: every storage
    write runs off the loop's thread, and the loop's thread never works 40 ms between two
    10 ms ticks (the stall the wall-clock form of this test allowed: a 50 ms gap). CPU
    time of the loop's thread, not the wall-clock gap between ticks: a loaded machine
    deschedules the whole process (wall gaps of 50 ms and more with nothing blocking),
    but only work done on the loop adds to its CPU time."""
    queue = Queue(f"sqlite:///{tmp_path / 'jobs.db'}")
    write_threads: set[int] = set()
    enqueue = queue._storage.enqueue

    def spied(*args: Any, **kwargs: Any) -> Any:
        write_threads.add(threading.get_ident())
        return enqueue(*args, **kwargs)

    queue._storage.enqueue = spied  # type: ignore[method-assign]

    @queue.task(queue="async")
    def record(i: int, label: str) -> int:
        return i

    gaps: list[float] = []
    busy: list[float] = []
    """The loop thread's CPU time between two ticks."""

    async def heartbeat(stop: anyio.Event) -> None:
        last, cpu = time.perf_counter(), time.thread_time()
        while not stop.is_set():
            await anyio.sleep(0.010)
            now, now_cpu = time.perf_counter(), time.thread_time()
            gaps.append(now - last)
            busy.append(now_cpu - cpu)
            last, cpu = now, now_cpu

    async def main() -> list[str]:
        stop = anyio.Event()
        ids: list[str] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(heartbeat, stop)
            await anyio.sleep(0.05)  # the heartbeat is ticking before the first enqueue
            start = len(gaps)
            # at least 1,000, and for at least 20 ticks: a fast machine enqueues 1,000 in
            # less than 200 ms (then the loop was watched too briefly to say anything)
            while len(ids) < 1000 or (len(gaps) - start < 20 and len(ids) < 50_000):
                handle = await record.delay_async(len(ids), label=f"n{len(ids)}")
                ids.append(handle.id)
            stop.set()
        return ids

    loop_thread = threading.get_ident()  # anyio.run runs the loop on the calling thread
    try:
        ids = anyio.run(main)
        assert len(set(ids)) == len(ids) >= 1000
        assert queue.stats()[0].queue == "async" and queue.stats()[0].ready == len(ids)
        assert queue.job(ids[-1]).info().task_name == record.name
        assert write_threads and loop_thread not in write_threads
        assert len(gaps) >= 20  # the enqueues took long enough to be observed
        worst = max(busy)
        assert worst < 0.040, (
            f"the event loop's thread ran {worst * 1000:.1f} ms between two ticks "
            f"(wall gaps up to {max(gaps) * 1000:.1f} ms)"
        )
    finally:
        queue.close()


def test_async_twins_return_what_the_sync_calls_return() -> None:
    queue = Queue("memory://")

    @queue.task(max_retries=0)
    def double(x: int) -> int:
        if x < 0:
            raise TaskError.fatal("negative")
        return 2 * x

    async def enqueue() -> tuple[str, str, JobState]:
        ok = await double.delay_async(21)
        doomed = await double.apply_async(args=(-1,), priority=5, queue="q2")
        return ok.id, doomed.id, await ok.status_async()

    ok_id, doomed_id, state = anyio.run(enqueue)
    assert state is JobState.QUEUED
    rec = queue.storage().get_job(doomed_id)
    assert rec is not None and (rec.priority, rec.queue) == (5, "q2")

    done = threading.Event()

    def run_worker() -> None:
        queue.run_worker(queues=["default", "q2"], burst=True, install_signal_handlers=False)
        done.set()

    async def wait() -> tuple[int, list[int], JobState]:
        thread = threading.Thread(target=run_worker)
        thread.start()
        handle = await queue.job_async(ok_id)
        value = await handle.result_async(timeout=30)  # waits while the worker runs
        attempts = [a.number for a in await handle.attempts_async()]
        with pytest.raises(JobFailed) as failed:
            await (await queue.job_async(doomed_id)).result_async(timeout=30)
        assert failed.value.reason == "fatal"
        thread.join(30)
        return value, attempts, (await handle.info_async()).state

    try:
        value, attempts, state = anyio.run(wait)
        assert done.is_set()
        assert (value, attempts, state) == (42, [1], JobState.SUCCEEDED)
    finally:
        queue.close()


def test_async_calls_fail_like_sync_ones_and_write_nothing() -> None:
    queue = Queue("memory://")

    @queue.task
    def one(x: int) -> int:
        return x

    async def main() -> None:
        with pytest.raises(TypeError, match="delay_async"):
            await one.delay_async(1, 2)  # type: ignore[call-arg]
        with pytest.raises(ConfigError) as bad:
            await one.apply_async(args=(1,), timeout="soon")
        assert bad.value.code == "invalid_duration"
        with pytest.raises(NotFound):
            await queue.job_async("0" * 32)
        handle = await one.delay_async(1)
        with pytest.raises(TimeoutError):
            await handle.result_async(timeout=0.05)  # no worker: never finishes

    try:
        anyio.run(main)
        assert [s.ready for s in queue.stats()] == [1]
    finally:
        queue.close()
