"""Redis flows beyond the contract: the event record survives a caller killed between a
step's end and the advance, events keep their order, and concurrent advancers never
exceed max_parallel (design docs/design/flows-storage.md §10)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
import redis

from backends.redis import RedisStorage
from queue_core.records.errors import StorageUnavailable
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import ClaimedJob, JobState
from queue_core.testing.fixtures import (
    LEASE,
    T0,
    complete_end,
    dead_end,
    retry_end,
    run_concurrently,
)
from queue_core.testing.suite._flows_base import claim_steps, make_execution, make_spec, states

_S = StepState


def _killed_before_advance(storage: RedisStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller dies right after the finish/cancel script: nobody advances."""

    def never(eids: Sequence[str], now: int | None, heads: object = None) -> None:
        del eids, now, heads

    monkeypatch.setattr(storage.flows, "advance_ends", never)


def test_a_caller_killed_between_finish_and_advance_stalls_nothing(
    storage: RedisStorage, redis_url: str, raw: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    new = make_execution(make_spec({"a": [], "b": [], "c": ["a", "b"]}))
    storage.start_execution(new, now=T0)
    got = claim_steps(storage, T0 + 1)
    _killed_before_advance(storage, monkeypatch)
    assert storage.finish([complete_end(got["a"].ref), complete_end(got["b"].ref)], now=T0 + 2)
    # the ends are recorded (the jobs succeeded) but not yet judged: c waits
    assert states(storage, new.id) == {"a": _S.RUNNING, "b": _S.RUNNING, "c": _S.PENDING}
    assert raw.sismember(f"{storage.keys.prefix}:xadv", new.id)
    other = RedisStorage.from_url(redis_url)  # the next process's reaper
    try:
        assert other.reap(now=T0 + 3) == []
        assert states(other, new.id) == {"a": _S.SUCCEEDED, "b": _S.SUCCEEDED, "c": _S.QUEUED}
        assert not raw.sismember(f"{storage.keys.prefix}:xadv", new.id)
        c = claim_steps(other, T0 + 4)["c"]
        other.finish([complete_end(c.ref)], now=T0 + 5)
        record = other.get_execution(new.id)
        assert record is not None and record.state is ExecutionState.SUCCEEDED
    finally:
        other.close()


def test_a_retry_claimed_before_the_advance_stays_running(
    storage: RedisStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = make_execution(make_spec({"a": [], "b": ["a"]}), max_attempts=3)
    storage.start_execution(new, now=T0)
    a = claim_steps(storage, T0 + 1)["a"]
    _killed_before_advance(storage, monkeypatch)
    storage.finish([retry_end(a.ref, 0)], now=T0 + 2)
    again = claim_steps(storage, T0 + 3)["a"]  # attempt 2 starts before anyone advanced
    assert again.attempt == 2
    monkeypatch.undo()
    storage.reap(now=T0 + 4)
    # the events are folded in order: queued (the retry), then running (the claim)
    assert states(storage, new.id) == {"a": _S.RUNNING, "b": _S.PENDING}
    storage.finish([complete_end(again.ref)], now=T0 + 5)
    assert states(storage, new.id) == {"a": _S.SUCCEEDED, "b": _S.QUEUED}


def test_concurrent_workers_never_hold_more_than_max_parallel(storage: RedisStorage) -> None:
    new = make_execution(make_spec({f"s{i}": [] for i in range(30)}, max_parallel=3))
    storage.start_execution(new)  # the server's clock throughout: releases are ready now
    lock = threading.Lock()
    held, peak, done = [0], [0], [0]

    def work(i: int) -> int:
        for _ in range(200):
            got: list[ClaimedJob] = storage.claim(f"w{i}", ["default"], 2, LEASE)
            with lock:
                held[0] += len(got)
                peak[0] = max(peak[0], held[0])
            for c in got:
                with lock:
                    held[0] -= 1
                assert storage.finish([complete_end(c.ref)]) == [True]
                with lock:
                    done[0] += 1
            with lock:
                if done[0] == 30:
                    return 0
        return 1

    assert run_concurrently(6, work) == [0] * 6
    assert peak[0] <= 3
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.SUCCEEDED


def test_prune_drops_a_spec_with_its_last_execution(
    storage: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    spec = make_spec({"a": []})
    first, second = make_execution(spec), make_execution(spec)
    storage.start_execution(first, now=T0)
    storage.start_execution(second, now=T0)
    spec_key = f"{storage.keys.prefix}:fs:{first.spec_hash}"
    for when in (T0 + 1, T0 + 2):
        a = claim_steps(storage, when, limit=1)["a"]
        storage.finish([complete_end(a.ref)], now=when)
    retention = storage.retention_ms
    storage.prune(now=T0 + 1 + retention)
    assert storage.get_execution(first.id) is None
    assert raw.exists(spec_key)  # the second execution still uses it
    record = storage.get_execution(second.id)
    assert record is not None and record.spec() == spec
    storage.prune(now=T0 + 2 + retention)
    assert storage.get_execution(second.id) is None
    assert not raw.exists(spec_key)


def test_an_advance_that_fails_after_the_finish_is_left_to_the_reaper(
    storage: RedisStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = make_execution(make_spec({"a": [], "b": ["a"]}))
    storage.start_execution(new, now=T0)
    a = claim_steps(storage, T0 + 1)["a"]

    def down(eid: str, now: int, head: object = None) -> list[object]:
        raise StorageUnavailable(f"redis unavailable during advance of {eid} at {now}")

    monkeypatch.setattr(storage.flows, "_advance", down)
    # the end is recorded: finish reports it taken, not the advance's failure
    assert storage.finish([complete_end(a.ref)], now=T0 + 2) == [True]
    assert states(storage, new.id)["b"] is _S.PENDING
    monkeypatch.undo()
    storage.reap(now=T0 + 3)
    assert states(storage, new.id) == {"a": _S.SUCCEEDED, "b": _S.QUEUED}


def test_a_step_claimed_while_a_sibling_failure_waits_runs_on_and_the_execution_waits(
    storage: RedisStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """folding.fold's rule: a claim folded with a sibling's failure lets the claimed step
    finish; the execution fails once no step is running (decide rule 4), not before."""
    new = make_execution(make_spec({"x": [], "y": []}))
    storage.start_execution(new, now=T0)
    x = claim_steps(storage, T0 + 1, limit=1)["x"]
    _killed_before_advance(storage, monkeypatch)
    storage.finish([dead_end(x.ref)], now=T0 + 2)
    y = claim_steps(storage, T0 + 3)["y"]  # recorded as an event: x's end is pending
    monkeypatch.undo()
    storage.reap(now=T0 + 4)
    assert states(storage, new.id) == {"x": _S.DEAD, "y": _S.RUNNING}
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.RUNNING
    assert record.failed_step == "x"
    assert storage.finish([complete_end(y.ref)], now=T0 + 5) == [True]
    assert states(storage, new.id) == {"x": _S.DEAD, "y": _S.SUCCEEDED}
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.FAILED


def test_a_retry_cancelled_before_anyone_advanced_fails_the_execution(
    storage: RedisStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ends of one step wait for the advance: the retry of attempt 1, then the cancel
    of the queued job. The cancel is the later one (it carries the next attempt's number),
    so the fold ends the step cancelled, whatever order the events are read in."""
    new = make_execution(make_spec({"a": [], "b": ["a"]}), max_attempts=3)
    storage.start_execution(new, now=T0)
    a = claim_steps(storage, T0 + 1)["a"]
    _killed_before_advance(storage, monkeypatch)
    storage.finish([retry_end(a.ref, 60_000)], now=T0 + 2)
    assert storage.cancel(a.id, now=T0 + 3) is JobState.CANCELLED
    monkeypatch.undo()
    storage.reap(now=T0 + 4)
    assert states(storage, new.id) == {"a": _S.CANCELLED, "b": _S.NOT_RUN}
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.FAILED


def test_a_plan_read_before_a_claim_does_not_end_the_claimed_steps_job(
    storage: RedisStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that only appends its event moves no version; a plan that ends or cancels
    a step's job, decided from a read taken before the claim, is refused and decided again."""
    new = make_execution(make_spec({"x": [], "y": []}))
    storage.start_execution(new, now=T0)
    x = claim_steps(storage, T0 + 1, limit=1)["x"]
    _killed_before_advance(storage, monkeypatch)
    storage.finish([dead_end(x.ref)], now=T0 + 2)
    monkeypatch.undo()
    flows = storage.flows
    read, claimed = flows._read, []

    def read_then_claim(eid: str) -> object:
        got = read(eid)
        if not claimed:  # y is claimed between this read and the plan's apply
            claimed.append(claim_steps(storage, T0 + 3)["y"])
        return got

    monkeypatch.setattr(flows, "_read", read_then_claim)
    storage.reap(now=T0 + 4)
    assert states(storage, new.id) == {"x": _S.DEAD, "y": _S.RUNNING}
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.RUNNING
    assert storage.finish([complete_end(claimed[0].ref)], now=T0 + 5) == [True]
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.FAILED
