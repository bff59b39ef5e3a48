"""Redis flows beyond the contract: the event record survives a caller killed between a
step's end and the advance, events keep their order, and concurrent advancers never
exceed max_parallel (design docs/design/flows-storage.md §10)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
import redis

from backends.redis import RedisStorage
from queue_core.errors import StorageUnavailable
from queue_core.flows.model import ExecutionState, StepState
from queue_core.model import ClaimedJob
from queue_core.testing.fixtures import LEASE, T0, complete_end, retry_end, run_concurrently
from queue_core.testing.suite._flows_base import claim_steps, make_execution, make_spec, states

_S = StepState


def _killed_before_advance(storage: RedisStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller dies right after the finish/cancel script: nobody advances."""

    def never(eids: Sequence[str], now: int | None) -> None:
        del eids, now

    monkeypatch.setattr(storage, "_after_ends", never)


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

    def down(eid: str, now: int) -> list[object]:
        raise StorageUnavailable(f"redis unavailable during advance of {eid} at {now}")

    monkeypatch.setattr(storage, "_advance", down)
    # the end is recorded: finish reports it taken, not the advance's failure
    assert storage.finish([complete_end(a.ref)], now=T0 + 2) == [True]
    assert states(storage, new.id)["b"] is _S.PENDING
    monkeypatch.undo()
    storage.reap(now=T0 + 3)
    assert states(storage, new.id) == {"a": _S.SUCCEEDED, "b": _S.QUEUED}
