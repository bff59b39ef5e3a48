"""The finish thread lets streamed ends gather into one write (fewer ``finish`` calls).

The gather's bound is real time (I/O pacing); these tests set it far beyond their own
run time (``GATHER_S`` = 60 s), so "not written yet" means the gather held the ends,
and every write the tests wait for comes from a condition (ends enough, a lone end, a
``hurry``, close), never from the bound running out."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, cast

import anyio
import pytest

from queue_core.records.jobs import AttemptEnd
from queue_core.worker import finishing
from queue_core.worker.finishing import FinishThread
from tests.unit.worker.conftest import until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _long_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(finishing, "GATHER_S", 60.0)


def _ends(*ns: int) -> list[AttemptEnd]:
    return [cast(AttemptEnd, n) for n in ns]


class _Writes:
    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def __call__(self, batch: list[AttemptEnd]) -> Sequence[bool]:
        self.batches.append(list(batch))
        return [True] * len(batch)


async def test_ends_that_stream_in_are_written_together_once_enough_wait() -> None:
    writes = _Writes()
    thread = FinishThread(writes, lambda b, t: None, lambda e: None, may_gather=lambda: True)
    try:
        thread.put(_ends(0))
        await until(lambda: len(writes.batches) == 1, "a lone end is written at once")
        n = finishing.GATHER_ENDS
        for i in range(1, n):
            thread.put(_ends(i))
        await anyio.sleep(0.05)  # time for a write, were the thread to make one
        assert (len(writes.batches), thread.unwritten()) == (1, n - 1)
        thread.put(_ends(n))
        await until(lambda: len(writes.batches) == 2, "enough ends: written at once")
        assert writes.batches[1] == list(range(1, n + 1))
    finally:
        thread.close()


async def test_hurry_ends_a_gather_and_a_stopping_worker_does_not_gather() -> None:
    writes = _Writes()
    may = [True]
    thread = FinishThread(writes, lambda b, t: None, lambda e: None, may_gather=lambda: may[0])
    try:
        thread.put(_ends(1))
        await until(lambda: len(writes.batches) == 1, "the first end was written")
        thread.put(_ends(2))
        await anyio.sleep(0.05)
        assert thread.unwritten() == 1  # gathering
        may[0] = False  # the worker stops ...
        thread.hurry()  # ... and waits for its ends (Worker._flush_all)
        await until(lambda: len(writes.batches) == 2, "the gathered end was written")
        thread.put(_ends(3))
        await until(lambda: len(writes.batches) == 3, "written without gathering")
        assert writes.batches == [[1], [2], [3]]
    finally:
        thread.close()


async def test_without_may_gather_every_end_is_written_at_once() -> None:
    writes = _Writes()
    thread = FinishThread(writes, lambda b, t: None, lambda e: None)
    try:
        for i in range(3):
            thread.put(_ends(i))
            await until(lambda: thread.unwritten() == 0, f"end {i} was written")
        assert [e for b in writes.batches for e in b] == [0, 1, 2]
    finally:
        thread.close()


async def test_close_writes_what_was_gathering_and_ends_the_thread() -> None:
    writes = _Writes()
    thread = FinishThread(writes, lambda b, t: None, lambda e: None, may_gather=lambda: True)
    thread.put(_ends(1))
    await until(lambda: len(writes.batches) == 1, "the first end was written")
    thread.put(_ends(2))
    await anyio.sleep(0.02)
    assert thread.unwritten() == 1  # gathering
    thread.close()
    await until(lambda: not thread._thread.is_alive(), "the thread ended")
    assert writes.batches == [[1], [2]]


async def test_a_gather_ends_when_no_more_ends_are_coming() -> None:
    # may_gather() is the worker's "bodies still run": once the last one has ended,
    # the end it hands over is written at once, with those gathered before it (a flow
    # step's end releases its successor: it must not wait out the gather's bound).
    writes = _Writes()
    running = [True]
    thread = FinishThread(writes, lambda b, t: None, lambda e: None, may_gather=lambda: running[0])
    try:
        thread.put(_ends(1))
        await until(lambda: len(writes.batches) == 1, "the first end was written")
        thread.put(_ends(2))
        await anyio.sleep(0.05)
        assert thread.unwritten() == 1  # gathering: bodies still run
        running[0] = False  # the last body ended ...
        thread.put(_ends(3))  # ... and its end is handed over
        await until(lambda: len(writes.batches) == 2, "the gather ended without a hurry")
        assert writes.batches == [[1], [2, 3]]
        thread.put(_ends(4))
        await until(lambda: len(writes.batches) == 3, "no body runs: written at once")
    finally:
        thread.close()


def test_a_worker_gathers_ends_only_while_its_claims_come_back_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With the gather's bound at 60 s, a worker that gathered the end of a flow step
    # whose claim took less than it asked for (nothing else waiting) would hold the
    # next step back for a minute: a sequential flow drained in seconds shows it does
    # not; and a backed-up queue (claims of all the free slots) is what it gathers for.
    from queue_core import Queue
    from queue_core.worker import Worker

    queue = Queue("memory://")
    try:
        flow = queue.flow("chain")  # type: ignore[attr-defined]
        one = flow.step(id="one")(lambda input: input + 1)
        two = flow.step(id="two", depends_on=[one])(lambda one: one * 2)
        flow.step(id="three", depends_on=[two])(lambda two: two - 1)
        execution = flow.start(input=3)
        thread_done = threading.Event()
        worker = Worker(queue, burst=True, install_signal_handlers=False, reap_interval=0.1)

        def run() -> None:
            worker.run()
            thread_done.set()

        threading.Thread(target=run, daemon=True).start()
        assert thread_done.wait(20), "the flow's steps waited out the gather's bound"
        assert execution.status() == "succeeded"
        assert worker._parts is not None
        finisher = worker._parts.finisher
        assert not finisher.may_gather()  # the last claim found less than it asked for
        worker._state.backlog = True  # as after a claim of every free slot
        assert finisher.may_gather()
    finally:
        queue.close()


async def test_when_idle_calls_back_on_the_loop_once_everything_is_written() -> None:
    writes = _Writes()
    release = threading.Event()

    def slow(batch: list[AttemptEnd]) -> Sequence[bool]:
        release.wait(10)
        return writes(batch)

    thread = FinishThread(slow, lambda b, t: None, lambda e: None)
    try:
        assert not thread.when_idle(lambda: None)  # nothing to write: not kept
        thread.put(_ends(1))
        await until(lambda: thread.unwritten() == 1, "the write is in flight")
        called = anyio.Event()
        assert thread.when_idle(called.set)
        thread.put(_ends(2))  # handed over during the write: idle only after it too
        await anyio.sleep(0.02)
        assert not called.is_set()
        release.set()
        with anyio.fail_after(5):
            await called.wait()
        assert [e for b in writes.batches for e in b] == [1, 2]
        assert thread.unwritten() == 0
    finally:
        release.set()
        thread.close()


def test_a_burst_worker_claims_what_written_ends_released_before_counting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A burst worker that finds nothing to claim and nothing running writes the ends it
    # holds; a flow step's end releases the next step, so it claims again at once rather
    # than asking storage what is pending first: along a 10-step chain it counts only
    # once the chain is done (it counted after every step).
    from queue_core import JobContext, Queue
    from queue_core.worker import Worker

    def link(ctx: JobContext) -> str:
        return str(ctx.step_id)

    counted: list[int] = []
    queue = Queue("memory://")
    storage = queue.storage()
    count = storage.count_pending

    def counting(*args: Any, **kw: Any) -> int:
        n = count(*args, **kw)
        counted.append(n)
        return n

    monkeypatch.setattr(storage, "count_pending", counting)
    try:
        flow = queue.flow("chain")  # type: ignore[attr-defined]
        step = flow.step(id="s0")(link)
        for i in range(1, 10):
            step = flow.step(id=f"s{i}", depends_on=[step])(link)
        execution = flow.start()
        Worker(queue, burst=True, install_signal_handlers=False, scheduler=False).run()
        assert execution.status() == "succeeded"
        assert counted == [0], counted
    finally:
        queue.close()


async def test_starts_go_with_the_next_ends_in_one_call_where_storage_can() -> None:
    """Held attempts' starts wait (up to ``START_WAIT_S``) for the next ends; with
    ``start_and_finish`` both go in one call, the starts first; without it, ``start``
    then ``finish``; starts alone go by ``start``."""
    writes, calls = _Writes(), []

    def start(starts: list[Any]) -> None:
        calls.append(("start", [ref for ref, _ in starts]))

    def both(starts: list[Any], batch: list[AttemptEnd]) -> Sequence[bool]:
        calls.append(("both", [ref for ref, _ in starts], list(batch)))
        return [True] * len(batch)

    thread = FinishThread(writes, lambda b, t: None, lambda e: None, may_gather=lambda: True,
                          start=start, start_and_finish=both)  # fmt: skip
    alone = FinishThread(writes, lambda b, t: None, lambda e: None, may_gather=lambda: True,
                         start=start, start_and_finish=both)  # fmt: skip
    plain = FinishThread(writes, lambda b, t: None, lambda e: None, may_gather=lambda: True,
                         start=start)  # fmt: skip
    try:
        thread.put_starts([("a", 0.0)])
        thread.put(_ends(1, 2))
        await until(lambda: len(calls) == 1, "one call")
        assert calls == [("both", ["a"], [1, 2])] and writes.batches == []
        alone.put_starts([("b", 0.0)])  # no end comes: told alone once the wait is over
        await until(lambda: len(calls) == 2, "the start told alone")
        assert calls[1] == ("start", ["b"]) and writes.batches == []
        plain.put_starts([("c", 0.0)])
        plain.put(_ends(3))
        await until(lambda: len(writes.batches) == 1, "the ends written")
        assert calls[2] == ("start", ["c"]) and writes.batches == [[3]]
    finally:
        for t in (thread, alone, plain):
            t.close()


async def test_starts_told_before_a_failed_finish_are_not_told_again() -> None:
    """Without ``start_and_finish`` the starts go by ``start``, then ``finish``; when the
    ``finish`` fails, the retry writes the ends again but not the starts already told."""
    calls: list[Any] = []
    failures: list[BaseException] = []
    fail = [True]

    def start(starts: list[Any]) -> None:
        calls.append(("start", [ref for ref, _ in starts]))

    def finish(batch: list[AttemptEnd]) -> Sequence[bool]:
        calls.append(("finish", list(batch)))
        if fail[0]:
            fail[0] = False
            raise OSError("storage unavailable")
        return [True] * len(batch)

    thread = FinishThread(finish, lambda b, t: None, failures.append, may_gather=lambda: True,
                          start=start)  # fmt: skip
    try:
        thread.put_starts([("a", 0.0)])
        thread.put(_ends(1))
        await until(lambda: len(failures) == 1, "the failed finish reported")
        thread.resume()
        await until(lambda: len(calls) == 3, "the ends written again")
        assert calls == [("start", ["a"]), ("finish", [1]), ("finish", [1])]
    finally:
        thread.close()
