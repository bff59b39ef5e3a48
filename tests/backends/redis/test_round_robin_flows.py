"""``round_robin`` on Redis beyond the contract: the step jobs of a flow's executions take
turns over the executions' keys (flow_start.lua stores the group on them, _flow.lua's
release indexes them for the claim's turns), and a retried job keeps its key's turn."""

from __future__ import annotations

from typing import Any

from backends.redis import RedisStorage
from queue_core import Concurrency, Queue
from queue_core.records.jobs import Action, AttemptEnd, Decision, NewJob, Outcome
from queue_core.testing import LEASE, T0, new_id


def test_a_round_robin_flows_steps_take_turns_over_its_executions_keys(redis_url: str) -> None:
    queue = Queue(redis_url)
    try:
        flow = queue.flow(
            "sync",
            concurrency=Concurrency(100, behavior="round_robin", key=lambda inp: inp["tenant"]),
        )

        @flow.step()
        def fetch(input: dict[str, Any]) -> None:  # pragma: no cover - not run
            pass

        acme = [flow.start({"tenant": "acme"}).id for _ in range(10)]
        globex = flow.start({"tenant": "globex"}).id
        storage = queue.storage()
        got = [c.execution_id for _ in range(3) for c in storage.claim("w", ["default"], 1, LEASE)]
        assert got == [acme[0], globex, acme[1]]
    finally:
        queue.close()


def test_a_retried_job_keeps_its_keys_turn(storage: RedisStorage) -> None:
    """A retry queues the job under a new ready-set member: the key's index takes it at
    once (to_queued), so the key's next turn comes before the backlog's, not after it."""

    def job(key: str) -> NewJob:
        return NewJob(
            id=new_id(), task_name="t", queue="q", payload=b"{}", concurrency_key=f"t:{key}",
            concurrency_limit=10, concurrency_behavior="round_robin", concurrency_group="t",
        )  # fmt: skip

    a, b = [job("a") for _ in range(5)], job("b")
    storage.enqueue([*a, b], now=T0)

    def claim(now: int) -> list[str]:
        return [c.id for c in storage.claim("w", ["q"], 1, LEASE, now=now)]

    assert claim(T0 + 1) == [a[0].id]
    (running,) = storage.claim("w", ["q"], 1, LEASE, now=T0 + 2)
    assert running.id == b.id
    retry = Decision(action=Action.RETRY, delay_ms=0)
    end = AttemptEnd(ref=running.ref, outcome=Outcome.FAILED, decision=retry)
    assert storage.finish([end], now=T0 + 3) == [True]
    assert claim(T0 + 4) == [a[1].id]  # a (served 1) before b (served 2)
    assert claim(T0 + 5) == [b.id]  # now b: served before a's last turn


def test_a_replayed_dead_job_takes_turns_again(storage: RedisStorage) -> None:
    """retry_dead keeps the concurrency behaviour and group (replay_job keeps the spec):
    the replayed job is back in its key's turns."""
    job = NewJob(
        id=new_id(), task_name="t", queue="q", payload=b"{}", concurrency_key="t:a",
        concurrency_limit=1, concurrency_behavior="round_robin", concurrency_group="t",
    )  # fmt: skip
    storage.enqueue([job], now=T0)
    (claimed,) = storage.claim("w", ["q"], 1, LEASE, now=T0 + 1)
    dead = Decision(action=Action.DEAD, reason="fatal")
    storage.finish([AttemptEnd(ref=claimed.ref, outcome=Outcome.FAILED, decision=dead)], now=T0 + 2)
    assert storage.round_robin_keys("t", now=T0 + 3) == []
    record = storage.get_job(job.id)
    assert record is not None and record.dead_id is not None
    storage.retry_dead(record.dead_id, now=T0 + 4)
    assert storage.round_robin_keys("t", now=T0 + 5) == ["t:a"]
