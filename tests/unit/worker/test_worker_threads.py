"""The worker's thread plumbing: body threads that take waiting calls themselves, and the
finish thread that writes ends without a loop round trip (a failed write backs off on
the worker's clock). Tests wait for conditions, never for time to pass."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest

from backends.memory import MemoryStorage
from queue_core import JobState, Queue
from queue_core.records.errors import StorageUnavailable
from queue_core.records.jobs import AttemptEnd
from queue_core.testing import T0, ManualClock
from queue_core.worker import Worker
from queue_core.worker.finishing import FinishThread
from queue_core.worker.slots import Attempt
from queue_core.worker.threads import BodyThreads
from tests.unit.worker.conftest import until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _has(items: list[Any], n: int) -> bool:
    return len(items) == n


def _att(n: int) -> Attempt:
    return cast(Attempt, n)  # the plumbing only carries it


async def test_a_waiting_call_never_sits_behind_a_blocking_body() -> None:
    ended: list[tuple[Any, bool, Any]] = []
    threads = BodyThreads(lambda att, ok, value: ended.append((att, ok, value)))
    gate, second = threading.Event(), threading.Event()
    try:
        threads.submit(_att(1), lambda: gate.wait(30))
        threads.submit(_att(2), second.set)  # submitted while the first body blocks
        await until(second.is_set, "the second call ran while the first blocks")
        await until(lambda: len(ended) == 1, "its end was delivered")
        assert ended[0][:2] == (2, True)
        gate.set()
        await until(lambda: len(ended) == 2, "the first end was delivered")
        assert ended[1] == (1, True, True)
    finally:
        gate.set()
        threads.close()


async def test_a_thread_done_with_a_body_takes_the_next_call() -> None:
    ended: list[Any] = []
    threads = BodyThreads(lambda att, ok, value: ended.append(att))
    try:
        for n in range(5):  # one call at a time: one thread runs them all
            threads.submit(_att(n), lambda: None)
            await until(functools.partial(_has, ended, n + 1), f"end {n} was delivered")
        assert ended == [0, 1, 2, 3, 4]
        assert len(threads._threads) == 1
    finally:
        threads.close()


def _spin(cond: Callable[[], bool]) -> None:
    """Wait for ``cond`` without yielding to the event loop (a thread changes it)."""
    limit = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < limit, "never happened"
        time.sleep(0.001)


async def test_an_announced_call_runs_before_ends_reported_after_it() -> None:
    order: list[Any] = []
    threads = BodyThreads(lambda att, ok, value: order.append(att))
    try:
        threads.submit(_att(1), lambda: None)
        _spin(lambda: threads._delivery_pending)  # its delivery is scheduled, not run
        threads.announce(lambda: order.append("registered"))
        threads.submit(_att(2), lambda: None)
        _spin(lambda: len(threads._done) == 3)  # the second end rides along
        await until(lambda: len(order) == 3, "all delivered")
        assert order == [1, "registered", 2]
    finally:
        threads.close()


async def test_bodies_submitted_with_an_announcement_end_after_it() -> None:
    """``announce(call, then=...)`` queues the call before it submits the bodies, so
    their ends (even of bodies that return at once) are delivered after it."""
    order: list[Any] = []
    threads = BodyThreads(lambda att, ok, value: order.append((att, value)))
    try:
        gate = threading.Event()
        bodies = [(_att(1), lambda: 1), (_att(2), lambda: gate.wait(30))]
        threads.announce(lambda: order.append("registered"), then=bodies)
        await until(lambda: len(order) == 2, "the call and the first end delivered")
        gate.set()
        await until(lambda: len(order) == 3, "all delivered")
        assert order == ["registered", (1, 1), (2, True)]
    finally:
        threads.close()


async def test_body_errors_are_carried_back() -> None:
    ended: list[tuple[Any, bool, Any]] = []
    threads = BodyThreads(lambda att, ok, value: ended.append((att, ok, value)))
    try:
        threads.submit(_att(1), lambda: 1 / 0)
        await until(lambda: len(ended) == 1, "the end was delivered")
        assert ended[0][1] is False and isinstance(ended[0][2], ZeroDivisionError)
    finally:
        threads.close()


async def test_delivery_hooks_run_around_each_batch_even_when_an_end_fails() -> None:
    log: list[Any] = []

    def done(att: Any, ok: bool, value: Any) -> None:
        log.append(att.ref.job_id)
        if att.ref.job_id == 1:
            raise RuntimeError("recording failed")  # logged; the batch still ends

    hooks = (lambda: log.append("begin"), lambda: log.append("end"))
    threads = BodyThreads(done, hooks)
    try:
        threads.submit(cast(Attempt, SimpleNamespace(ref=SimpleNamespace(job_id=1))), int)
        await until(lambda: "end" in log, "the first batch was delivered")
        threads.submit(cast(Attempt, SimpleNamespace(ref=SimpleNamespace(job_id=2))), int)
        await until(lambda: log.count("end") == 2, "the second batch was delivered")
        assert log == ["begin", 1, "end", "begin", 2, "end"]
    finally:
        threads.close()


def _end(n: int) -> AttemptEnd:
    return cast(AttemptEnd, n)


async def test_a_failed_write_is_held_first_in_line_until_resumed() -> None:
    written: list[list[Any]] = []
    failures: list[BaseException] = []
    fail = [True]

    def finish(batch: list[AttemptEnd]) -> Sequence[bool]:
        if fail[0]:
            fail[0] = False
            raise StorageUnavailable("down")
        written.append(list(batch))
        return [True] * len(batch)

    thread = FinishThread(finish, lambda b, t: None, failures.append)
    try:
        thread.put([_end(1), _end(2)])
        await until(lambda: len(failures) == 1, "the failure was reported on the loop")
        thread.put([_end(3)])
        assert thread.unwritten() == 3
        assert written == []  # held: nothing is written until resumed
        thread.resume()
        await until(lambda: thread.unwritten() == 0, "everything was written")
        assert [e for batch in written for e in batch] == [1, 2, 3]
    finally:
        thread.close()


class _FinishFailsTwice(MemoryStorage):
    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.failures = 0

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        if self.failures < 2:
            self.failures += 1
            raise StorageUnavailable("db: connection refused")
        return super().finish(ends, now=now)


async def test_the_worker_retries_a_failed_finish_after_its_backoff_on_the_clock() -> None:
    clock = ManualClock(start_ms=T0)
    storage = _FinishFailsTwice(clock)
    queue = Queue(storage=storage, clock=clock, lease=30)

    @queue.task(name="one")
    def one() -> int:
        return 1

    worker = Worker(
        queue, slots=2, reap_interval=3600, presence_ttl=9000, install_signal_handlers=False
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run_async)
        try:
            job = one.delay()
            backoff = worker._flush_backoff  # set as the finisher starts its back-off
            await until(lambda: backoff.current == 0.05, "the first write failed")
            assert (storage.failures, worker.stats()["buffered_ends"]) == (1, 1)
            clock.advance(0.05)
            await until(lambda: backoff.current == 0.1, "the second write failed")
            assert storage.failures == 2
            assert any(abs(t - 0.15) < 1e-6 for t in clock.pending_timers()), "0.1 s more"
            assert job.status() is JobState.RUNNING
            clock.advance(0.101)  # the clock counts ms; 0.05 + 0.1 is a hair past 0.15
            await until(lambda: job.status() is JobState.SUCCEEDED, "the third write took")
            await until(lambda: worker.stats()["buffered_ends"] == 0, "nothing is left")
        finally:
            worker.stop()
