"""unique_key / unique_for / rate_limit on tasks and calls (SPEC §11), on memory://."""

from __future__ import annotations

from typing import Any

import pytest

from backends.memory import MemoryStorage
from queue_core import ConfigError, Queue
from queue_core.records.jobs import JobState
from queue_core.storage.protocol import Storage
from queue_core.testing.clock import ManualClock


def test_a_duplicate_delay_returns_the_existing_jobs_handle() -> None:
    queue = Queue("memory://")

    @queue.task(unique_key=lambda user_id: f"welcome:{user_id}")
    def send_welcome(user_id: int) -> None:
        return None

    first = send_welcome.delay(42)
    again = send_welcome.delay(42)
    other = send_welcome.delay(7)
    assert again.id == first.id
    assert other.id != first.id
    assert queue.stats()[0].ready == 2


def test_the_key_function_gets_the_calls_arguments_and_keys_are_per_task() -> None:
    queue = Queue("memory://")
    seen: list[tuple[Any, ...]] = []

    def key(a: int, *, b: str = "x") -> str:
        seen.append((a, b))
        return "same"

    @queue.task(unique_key=key)
    def one(a: int, *, b: str = "x") -> None:
        return None

    @queue.task(unique_key="same")
    def two() -> None:
        return None

    h1 = one.apply(args=(1,), kwargs={"b": "y"})
    assert seen == [(1, "y")]
    assert two.delay().id != h1.id  # same key text, another task
    assert one.delay(2).id == h1.id


def test_unique_for_keeps_the_key_after_the_job_ends_until_the_window_passes() -> None:
    clock = ManualClock()
    queue = Queue(storage=MemoryStorage(clock=clock.now_ms), clock=clock)

    @queue.task(unique_key="daily", unique_for="1h")
    def report() -> str:
        return "done"

    first = report.delay()
    queue.run_worker(burst=True)
    assert first.status() is JobState.SUCCEEDED
    clock.advance(3599)
    assert report.delay().id == first.id  # counted from the existing job's enqueue
    clock.advance(1)
    later = report.apply(unique_for=None)  # per-call override: held while active only
    assert later.id != first.id
    queue.run_worker(burst=True)
    assert report.delay().id != later.id


def test_map_dedupes_within_and_across_batches() -> None:
    queue = Queue("memory://")

    @queue.task(unique_key=lambda n: str(n % 2))
    def parity(n: int) -> None:
        return None

    handles = parity.map([1, 2, 3, 4])
    assert [h.id for h in handles][2:] == [h.id for h in handles][:2]
    assert len({h.id for h in handles}) == 2
    assert parity.delay(5).id == handles[0].id


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"rate_limit": "10/d"}, "invalid_rate_limit"),
        ({"rate_limit": 10}, "invalid_rate_limit"),
        ({"unique_for": "soon"}, "invalid_duration"),
        ({"unique_for": 0}, "invalid_duration"),
        ({"unique_key": ""}, "invalid_option"),
        ({"unique_key": 3}, "invalid_option"),
    ],
)
def test_bad_options_fail_at_decoration_and_per_call(options: dict[str, Any], code: str) -> None:
    queue = Queue("memory://")
    with pytest.raises(ConfigError) as err:
        queue.task(**options)
    assert err.value.code == code

    @queue.task
    def body() -> None:
        return None

    with pytest.raises(ConfigError) as err:
        body.apply(**options)
    assert err.value.code == code


def test_a_key_function_must_return_a_non_empty_string() -> None:
    queue = Queue("memory://")

    @queue.task(unique_key=lambda n: n)
    def body(n: int) -> None:
        return None

    with pytest.raises(ConfigError, match="unique_key"):
        body.delay(3)
    assert queue.stats() == [] or queue.stats()[0].ready == 0


def test_rate_limited_jobs_wait_queued_and_are_claimed_at_the_rate() -> None:
    clock = ManualClock()
    storage = MemoryStorage(clock=clock.now_ms)
    queue = Queue(storage=storage, clock=clock)

    @queue.task(rate_limit="2/m")
    def call_partner(i: int) -> int:
        return i

    handles = call_partner.map(range(5))
    assert len(storage.claim("w", ["default"], 10, 30_000)) == 2
    assert [h.status() for h in handles].count(JobState.QUEUED) == 3
    assert storage.rate_usage(call_partner.name, 60_000) == 2
    clock.advance(60.099)  # each claim counts until its body's latest start (+100 ms)
    assert storage.claim("w", ["default"], 10, 30_000) == []
    clock.advance(0.001)
    assert len(storage.claim("w", ["default"], 10, 30_000)) == 2


class _NoAbilities:
    """A storage wrapper hiding every optional ability."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("enqueue_unique", "rate_usage"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_storage_without_the_ability_refuses_clearly_and_writes_nothing() -> None:
    inner = MemoryStorage()
    queue = Queue(storage=_NoAbilities(inner))  # type: ignore[arg-type]

    @queue.task(unique_key="k")
    def uniq() -> None:
        return None

    @queue.task(rate_limit="1/s")
    def rated() -> None:
        return None

    with pytest.raises(ConfigError, match="SupportsUniqueJobs"):
        uniq.delay()
    with pytest.raises(ConfigError, match="SupportsRateLimits"):
        rated.delay()
    assert inner.stats() == []


def test_pruning_a_holder_drops_its_key_from_the_memory_storage() -> None:
    storage = MemoryStorage(retention_ms=0)
    queue = Queue(storage=storage)

    @queue.task(unique_key=lambda n: f"k{n}")
    def body(n: int) -> None:
        return None

    handles = body.map(range(3))
    queue.run_worker(burst=True)
    assert len(storage.limits.unique_holders) == 3
    assert storage.prune() == 3
    assert storage.limits.unique_holders == {}
    assert body.delay(1).id not in {h.id for h in handles}
