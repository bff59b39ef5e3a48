"""``round_robin`` on SQS + DynamoDB beyond the contract: a retried or replayed job keeps
taking turns, a key left without jobs is forgotten (and one an enqueue races is kept),
and what a round-robin claim costs in requests."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from backends.sqs import SQSStorage
from backends.sqs.round_robin import MARK, RoundRobin
from queue_core.records.jobs import Action, AttemptEnd, Decision, NewJob, Outcome
from queue_core.testing import LEASE, T0, new_id
from queue_core.testing.fixtures import complete_end
from tests.backends.sqs.conftest import Factory


def _job(key: str, limit: int | None = 10) -> NewJob:
    return NewJob(
        id=new_id(), task_name="t", queue="q", payload=b"{}", concurrency_key=f"t:{key}",
        concurrency_limit=limit, concurrency_behavior="round_robin", concurrency_group="t",
    )  # fmt: skip


def _claim(s: SQSStorage, now: int, n: int = 1) -> list[str]:
    return [c.id for c in s.claim("w", ["q"], n, LEASE, now=now)]


def _marks(s: SQSStorage) -> dict[str, int]:
    item = s.store.db.get(s.round_robin.group_key("q", "t")) or {}
    return {k.removeprefix(MARK): int(v) for k, v in item.items() if k.startswith(MARK)}


def test_a_retried_job_keeps_its_keys_turn(make_storage: Factory) -> None:
    s = make_storage()
    a, b = [_job("a") for _ in range(5)], _job("b")
    s.enqueue([*a, b], now=T0)
    assert _claim(s, T0 + 1) == [a[0].id]
    (running,) = s.claim("w", ["q"], 1, LEASE, now=T0 + 2)
    assert running.id == b.id
    retry = Decision(action=Action.RETRY, delay_ms=0)
    end = AttemptEnd(ref=running.ref, outcome=Outcome.FAILED, decision=retry)
    assert s.finish([end], now=T0 + 3) == [True]
    assert _claim(s, T0 + 4) == [a[1].id]  # a (served 1) before b (served 2)
    assert _claim(s, T0 + 5) == [b.id]  # now b, retried: served before a's next turn


def test_a_replayed_dead_job_takes_turns_again(make_storage: Factory) -> None:
    s = make_storage()
    job = _job("a", limit=1)
    s.enqueue([job], now=T0)
    (claimed,) = s.claim("w", ["q"], 1, LEASE, now=T0 + 1)
    dead = Decision(action=Action.DEAD, reason="fatal")
    s.finish([AttemptEnd(ref=claimed.ref, outcome=Outcome.FAILED, decision=dead)], now=T0 + 2)
    assert s.round_robin_keys("t", now=T0 + 3) == []
    record = s.get_job(job.id)
    assert record is not None and record.dead_id is not None
    replay = s.retry_dead(record.dead_id, now=T0 + 4)
    assert s.round_robin_keys("t", now=T0 + 5) == ["t:a"]
    assert _claim(s, T0 + 6) == [replay]


def test_a_key_left_without_jobs_is_forgotten_and_one_with_a_running_job_kept(
    make_storage: Factory,
) -> None:
    s = make_storage()
    a, b, c = _job("a"), [_job("b") for _ in range(3)], _job("c")
    s.enqueue([a, *b, c], now=T0)
    got = s.claim("w", ["q"], 3, LEASE, now=T0 + 1)
    assert [x.id for x in got] == [a.id, b[0].id, c.id]
    assert s.finish([complete_end(got[0].ref)], now=T0 + 2) == [True]  # a: nothing left
    assert _marks(s) == {"t:a": 1, "t:b": 2, "t:c": 3}
    assert _claim(s, T0 + 3) == [b[1].id]  # considers a (least recently served) first
    assert _marks(s) == {"t:b": 4, "t:c": 3}, "a forgotten; c (running) keeps its mark"


def test_an_enqueue_racing_the_forget_keeps_its_key(
    make_storage: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = make_storage()
    a, b = _job("a"), [_job("b") for _ in range(2)]
    s.enqueue([a, *b], now=T0)
    got = s.claim("w", ["q"], 2, LEASE, now=T0 + 1)
    assert s.finish([complete_end(got[0].ref)], now=T0 + 2) == [True]
    late = _job("a")
    counter = RoundRobin.counter

    def racing(rr: RoundRobin, key: str) -> tuple[int, int]:
        read = counter(rr, key)
        if key == "t:a" and late.id not in seen:
            seen.add(late.id)  # the enqueue lands between the read and the forget
            s.enqueue([late], now=T0 + 3)
        return read

    seen: set[str] = set()
    monkeypatch.setattr(RoundRobin, "counter", racing)
    assert _claim(s, T0 + 4) == [b[1].id]
    assert seen and "t:a" in _marks(s), "the forget must fail on the key's counter"
    monkeypatch.undo()
    assert s.round_robin_keys("t", now=T0 + 5) == ["t:a"]
    assert _claim(s, T0 + 6) == [late.id]


def test_requests_of_a_round_robin_claim(make_storage: Factory) -> None:
    """Printed with ``-s``: the requests one claim of one round-robin job makes (plain:
    2 Query + 1 write), with 100 keys that all have jobs and were all served."""
    s = make_storage()
    jobs = [_job(f"k{i:03d}") for i in range(100) for _ in range(2)]
    s.enqueue(jobs, now=T0)
    assert len(s.claim("w", ["q"], 100, LEASE, now=T0 + 1)) == 100  # every key served
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    s.store.ddb.meta.events.register("before-call.dynamodb", count)
    claimed = s.claim("w", ["q"], 1, LEASE, now=T0 + 2)
    print(f"\nclaim of one round-robin job over 100 served keys: {dict(calls)}")
    assert [c.id for c in claimed] == [jobs[1].id]  # k000's second job: its next turn
    # parked + ready Query, group GetItem, the key's Query, counters BatchGetItem, the write
    assert sum(calls.values()) <= 6
