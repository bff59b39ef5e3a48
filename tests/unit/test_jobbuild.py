"""Plain calls (``delay``/``map`` with the task's own options) build their NewJob through
:class:`queue_core.records.job_factory.JobFactory`: the same job ``NewJob(...)`` / ``Task._make``
gives, field for field."""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import queue_core
from queue_core.app.task import Concurrency
from queue_core.records.job_factory import JobFactory, plain_job_factory
from queue_core.records.jobs import NewJob
from queue_core.storage import job_ids as jobbuild
from queue_core.storage.job_ids import new_job_id, new_job_ids


def _queue() -> queue_core.Queue:
    return queue_core.Queue("memory://")


def _tasks(queue: queue_core.Queue) -> dict[str, Any]:
    def body(a: Any, b: Any = None) -> None:
        return None

    return {
        "defaults": queue.task(name="t.defaults")(body),
        "no_jitter": queue.task(name="t.nojit", retry_jitter=0, max_retries=3)(body),
        "options": queue.task(
            name="t.opts",
            queue="q2",
            priority=7,
            timeout=5,
            heartbeat=2,
            schedule_to_start=30,
            retry_backoff=2.5,
            retry_jitter=0,
            concurrency=Concurrency(limit=2, key="k"),
        )(body),
        "rated": queue.task(name="t.rated", rate_limit="5/s", retry_jitter=0)(body),
        "skip": queue.task(
            name="t.skip", concurrency=Concurrency(limit=1, behavior="skip"), retry_jitter=0
        )(body),
    }


@pytest.mark.parametrize("which", ["no_jitter", "options", "rated", "skip"])
def test_a_plain_job_is_the_job_make_builds(which: str) -> None:
    task = _tasks(_queue())[which]
    assert task._calls.factory is not None
    for args in [(1,), ("x", {"k": [1, 2]}), (None, 2.5)]:
        fast = task._plain(args, {}, "job-1")
        slow = task._make(
            args, {}, task._template, task._calls.fixed_lost, task.policy, job_id="job-1"
        )
        assert type(fast) is NewJob
        assert fast == slow
        assert hash(fast) == hash(slow)
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.priority = 3  # type: ignore[misc]


def test_a_jittered_lost_delay_is_drawn_per_job_within_the_jitter() -> None:
    task = _tasks(_queue())["defaults"]
    assert task._calls.fixed_lost is None  # default jitter 0.1
    jobs = [task._plain((i,), {}, f"j{i}") for i in range(200)]
    base_ms = task.policy.base_delay(1) * 1000
    lost = {j.lost_delay_ms for j in jobs}
    assert len(lost) > 1
    assert all(base_ms * 0.9 - 1 <= v <= base_ms + 1 for v in lost)
    slow = task._make((0,), {}, task._template, None, task.policy, job_id="j0")
    assert dataclasses.replace(jobs[0], lost_delay_ms=0) == dataclasses.replace(
        slow, lost_delay_ms=0
    )


def test_per_call_keys_take_the_general_path() -> None:
    queue = _queue()

    @queue.task(name="t.unique", unique_key=lambda n: f"u{n}")
    def unique(n: int) -> None: ...

    @queue.task(name="t.ckey", concurrency=Concurrency(limit=1, key=lambda n: f"c{n}"))
    def keyed(n: int) -> None: ...

    assert unique._calls.factory is None and keyed._calls.factory is None
    assert unique._plain((4,), {}, "a").unique_key == "t.unique:u4"
    assert keyed._plain((4,), {}, "b").concurrency_key is not None
    handles = keyed.map([(1,), (2,)])
    stored = [queue.storage().get_job(h.id) for h in handles]
    assert [r is not None for r in stored] == [True, True]


def test_map_and_delay_store_what_they_build() -> None:
    queue = _queue()
    task = _tasks(queue)["options"]
    handles = task.map([(i,) for i in range(50)]) + [task.delay(99)]
    assert len({h.id for h in handles}) == 51
    rec = queue.storage().get_job(handles[-1].id)
    assert rec is not None and rec.queue == "q2" and rec.priority == 7
    assert queue.serializer.loads_payload(rec.payload) == ((99,), {})


def _check_uuid7(job_id: str, before_ms: int, after_ms: int) -> None:
    u = uuid.UUID(hex=job_id)
    assert (u.hex, u.version, u.variant) == (job_id, 7, uuid.RFC_4122)
    assert before_ms <= int(job_id[:12], 16) <= after_ms + 2  # a burst may borrow a few ms


def test_job_ids_are_time_ordered_uuid7_hex() -> None:
    before = time.time_ns() // 1_000_000
    batch = new_job_ids(5000)
    singles = [new_job_id() for _ in range(2000)]
    ids = batch + singles + new_job_ids(3)
    after = time.time_ns() // 1_000_000  # after the last draw: its ms may be a later one
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)  # strictly increasing in this process, batch or single
    for job_id in ids[:300] + ids[-300:]:
        _check_uuid7(job_id, before, after)
    assert {i[16] for i in batch} == set("89ab")
    assert new_job_ids(0) == []


def test_job_ids_stay_ordered_when_the_clock_steps_back(monkeypatch: pytest.MonkeyPatch) -> None:
    first = new_job_id()
    real = time.time_ns
    monkeypatch.setattr(jobbuild.time, "time_ns", lambda: real() - 3_600_000_000_000)
    later = [new_job_id(), *new_job_ids(10), new_job_id()]
    assert [first, *later] == sorted([first, *later])
    assert len(set(later)) == len(later)


def test_ids_drawn_by_threads_at_once_are_unique() -> None:
    import threading

    out: list[list[str]] = []

    def draw() -> None:
        out.append([new_job_id() for _ in range(500)] + new_job_ids(500))

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for chunk in out for i in chunk]
    assert len(ids) == 4000 == len(set(ids))
    stamps = [i[:16] for i in ids]
    assert len(set(stamps)) == len(stamps)  # no two ids share a (ms, sequence) stamp


def test_factory_rejects_unknown_and_missing_fields() -> None:
    with pytest.raises(TypeError, match="no field"):
        JobFactory({"task_name": "t", "queue": "q", "colour": "red"})
    with pytest.raises(TypeError, match="needs a value"):
        JobFactory({"task_name": "t"})
    assert plain_job_factory({"task_name": "t", "queue": "q", "unique_key": "k"}) is None


@given(st.one_of(st.integers(), st.booleans(), st.integers().map(lambda i: _IntSub(i))))
def test_a_single_int_argument_encodes_as_the_json_encoder_does(value: int) -> None:
    from queue_core.app.serializer import _ENCODE, JsonSerializer

    expected = _ENCODE({"args": [value], "kwargs": {}}).encode()
    assert JsonSerializer().dumps_payload((value,), {}) == expected
    assert JsonSerializer().loads_payload(expected) == ((value,), {})


class _IntSub(int):
    def __repr__(self) -> str:
        return "IntSub"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_reuse_the_parents_random_bytes() -> None:
    """``new_job_id`` draws its random bits from a pool; a child forked with the pool
    half used draws its own, so parent and child ids never share their random part."""
    new_job_id()  # the pool is filled now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, ",".join(new_job_id() for _ in range(5)).encode())
        finally:
            os._exit(0)
    os.close(write)
    parent = [new_job_id() for _ in range(5)]
    with os.fdopen(read) as f:
        child = f.read().split(",")
    os.waitpid(pid, 0)
    assert len(child) == 5
    assert not {i[16:] for i in parent} & {i[16:] for i in child}
