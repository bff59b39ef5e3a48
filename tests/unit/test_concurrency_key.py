"""``Concurrency(limit, behavior, key=callable)`` (SPEC §7): the limit holds per value of
the key function, computed at enqueue from the call's arguments (a flow: its input)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from queue_core import Concurrency, ConfigError, JobState, Queue
from queue_core.flows import ExecutionState


@pytest.fixture
def queue() -> Iterator[Queue]:
    q = Queue("memory://")
    yield q
    q.close()


def _customer(customer: str, amount: int = 0) -> str:
    return customer


def test_skip_holds_per_key_value(queue: Queue) -> None:
    @queue.task(name="sync", concurrency=Concurrency(1, behavior="skip", key=_customer))
    def sync(customer: str, amount: int = 0) -> str:
        return customer

    a1, a2 = sync.delay("acme"), sync.delay("acme", amount=3)
    b1 = sync.delay("bolt")
    assert [h.status() for h in (a1, a2, b1)] == [
        JobState.QUEUED,
        JobState.SKIPPED,
        JobState.QUEUED,
    ]

    # the key is namespaced by the task: another task's "acme" is its own slot
    @queue.task(name="bill", concurrency=Concurrency(1, behavior="skip", key=_customer))
    def bill(customer: str) -> None: ...

    assert bill.delay("acme").status() is JobState.QUEUED


def test_queue_behaviour_runs_one_per_key_at_a_time(queue: Queue) -> None:
    @queue.task(name="sync", concurrency=Concurrency(1, key=_customer))
    def sync(customer: str) -> str:
        return customer

    handles = [sync.delay(c) for c in ("acme", "acme", "bolt")]
    now = int(time.time() * 1000) + 1000
    claimed = queue.storage().claim("w", ["default"], 10, 30_000, now=now)
    assert sorted(c.id for c in claimed) == sorted([handles[0].id, handles[2].id])


def test_key_applies_to_map_and_per_call_overrides(queue: Queue) -> None:
    @queue.task(name="sync", concurrency=Concurrency(1, behavior="skip", key=_customer))
    def sync(customer: str) -> str:
        return customer

    mapped = sync.map([("a",), ("a",), ("b",)])
    assert [h.status() for h in mapped] == [JobState.QUEUED, JobState.SKIPPED, JobState.QUEUED]
    override = Concurrency(1, behavior="skip", key=lambda c: c + "-other")
    other = [sync.apply(("a",), concurrency=override) for _ in range(2)]
    assert [h.status() for h in other] == [JobState.QUEUED, JobState.SKIPPED]


@pytest.mark.parametrize("bad", [42, "", None, b"acme"])
def test_a_key_that_is_not_a_non_empty_string_is_refused_and_nothing_written(
    queue: Queue, bad: object
) -> None:
    @queue.task(name="sync", concurrency=Concurrency(1, key=lambda customer: bad))
    def sync(customer: str) -> None: ...

    with pytest.raises(ConfigError) as refused:
        sync.delay("acme")
    assert refused.value.code == "invalid_option"
    assert "concurrency.key" in str(refused.value) and repr(bad) in str(refused.value)
    assert "non-empty string" in str(refused.value)
    assert all(s.ready == 0 for s in queue.storage().stats())


def test_a_key_function_that_raises_enqueues_nothing(queue: Queue) -> None:
    @queue.task(name="sync", concurrency=Concurrency(1, key=lambda customer: customer["id"]))
    def sync(customer: dict[str, str]) -> None: ...

    with pytest.raises(KeyError):
        sync.delay({})
    assert all(s.ready == 0 for s in queue.storage().stats())


def test_a_key_that_is_neither_string_nor_function_is_refused() -> None:
    with pytest.raises(ConfigError) as bad:
        Concurrency(1, key=3)  # type: ignore[arg-type]
    assert bad.value.code == "invalid_option" and "a function" in str(bad.value)


def test_flow_concurrency_holds_per_key_of_the_input(queue: Queue) -> None:
    flow = queue.flow(
        "sync-orders", concurrency=Concurrency(1, behavior="skip", key=lambda i: i["shop"])
    )
    flow.step(id="work")(lambda: 1)
    states = [flow.start({"shop": s}).status() for s in ("a", "a", "b")]
    assert states == [ExecutionState.RUNNING, ExecutionState.SKIPPED, ExecutionState.RUNNING]
    with pytest.raises(ConfigError) as bad:
        flow.start({"shop": 7})
    assert bad.value.code == "invalid_option"
    assert len(queue.executions(flow=flow)) == 3
