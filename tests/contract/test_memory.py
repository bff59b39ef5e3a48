"""The published contract suite on the reference backend, ``memory://``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.memory import MemoryStorage
from queue_core.app.clock import Clock
from queue_core.app.config import open_storage
from queue_core.records.errors import ConfigError
from queue_core.storage.abilities import SupportsJobScan, SupportsWakeup
from queue_core.storage.protocol import Storage
from queue_core.testing import (
    DAY,
    LEASE,
    MIN,
    SEC,
    T0,
    ManualClock,
    StorageContract,
    StorageWithRetention,
    complete_end,
    new_job,
)


class _MemoryWithRetention:
    @pytest.fixture
    def storage_with_retention(self) -> Iterator[StorageWithRetention]:
        built: list[MemoryStorage] = []

        def build(retention: str) -> Storage:
            built.append(MemoryStorage.from_url(f"memory://?retention={retention}"))
            return built[-1]

        yield build
        for storage in built:
            storage.close()


class TestMemoryStorage(_MemoryWithRetention, StorageContract):
    @pytest.fixture
    def storage(self) -> Iterator[Storage]:
        storage = MemoryStorage()
        yield storage
        storage.close()


class TestMemoryStorageFromUrl(_MemoryWithRetention, StorageContract):
    """The same suite on a storage built through its URL, as users build it."""

    retention_ms = 2 * 3_600_000

    @pytest.fixture
    def storage(self) -> Iterator[Storage]:
        storage = MemoryStorage.from_url("memory://?retention=2h")
        yield storage
        storage.close()


def test_memory_storage_declares_its_abilities() -> None:
    storage = MemoryStorage()
    assert isinstance(storage, Storage)
    assert isinstance(storage, SupportsWakeup)
    assert isinstance(storage, SupportsJobScan)


def test_now_none_uses_the_injected_clock() -> None:
    clock = ManualClock(start_ms=T0)
    storage = MemoryStorage(clock=clock)
    job = new_job(delay_ms=10 * SEC)
    storage.enqueue([job])
    assert storage.claim("w", ["default"], 1, LEASE) == []
    clock.advance(10)
    got = storage.claim("w", ["default"], 1, LEASE)
    assert [(c.id, c.started_at, c.lease_expires_at) for c in got] == [
        (job.id, T0 + 10 * SEC, T0 + 10 * SEC + LEASE)
    ]
    clock.advance_ms(LEASE)
    assert [r.job_id for r in storage.reap()] == [job.id]


def test_from_url_reads_retention_and_rejects_bad_options() -> None:
    assert MemoryStorage.from_url("memory://").retention_ms == 7 * DAY
    assert MemoryStorage.from_url("memory://?retention=1h30m").retention_ms == 90 * MIN
    assert MemoryStorage.from_url("memory://?retention=7d").retention_ms == 7 * DAY
    assert MemoryStorage.from_url("memory://?retention=0").retention_ms == 0
    with pytest.raises(ConfigError) as negative:
        MemoryStorage(retention_ms=-1)
    assert negative.value.code == "invalid_option"
    with pytest.raises(ConfigError) as bad_duration:
        MemoryStorage.from_url("memory://?retention=soon")
    assert bad_duration.value.code == "invalid_duration"
    assert "soon" in str(bad_duration.value)
    with pytest.raises(ConfigError) as bad_option:
        MemoryStorage.from_url("memory://?retentoin=1h")
    assert bad_option.value.code == "invalid_option"


def test_open_storage_resolves_memory_scheme() -> None:
    assert isinstance(open_storage("memory://"), MemoryStorage)


def test_wait_for_jobs_times_out_without_jobs_and_ignores_other_queues() -> None:
    clock = ManualClock(start_ms=T0)
    storage = MemoryStorage(clock=clock)
    storage.enqueue([new_job(queue="elsewhere")])
    assert storage.wait_for_jobs(["default"], 0.05) is False


def test_wait_for_jobs_returns_at_once_when_a_job_is_ready() -> None:
    storage = MemoryStorage(clock=ManualClock(start_ms=T0))
    storage.enqueue([new_job()])
    assert storage.wait_for_jobs(["default"], 30.0) is True


def test_wait_for_jobs_does_not_spin_on_a_full_concurrency_slot() -> None:
    """A queued job that cannot be claimed (its slot is full) is not a reason to wake."""
    storage = MemoryStorage(clock=ManualClock(start_ms=T0))
    storage.enqueue([new_job(concurrency_key="k", concurrency_limit=1) for _ in range(2)])
    assert len(storage.claim("w", ["default"], 5, LEASE)) == 1
    assert storage.wait_for_jobs(["default"], 0.05) is False


def test_claim_skips_jobs_waiting_for_a_full_slot_without_rescanning_them() -> None:
    """Jobs whose key is full are parked until a slot frees, one per freed slot."""
    storage = MemoryStorage()
    waiting = [new_job(concurrency_key="k", concurrency_limit=1) for _ in range(50)]
    storage.enqueue(waiting, now=T0)
    first = storage.claim("w", ["default"], 5, LEASE, now=T0)
    assert [c.id for c in first] == [waiting[0].id]
    free = new_job()
    storage.enqueue([free], now=T0)
    assert [c.id for c in storage.claim("w", ["default"], 5, LEASE, now=T0)] == [free.id]
    assert sum(len(h) for h in storage.store.ready.values()) == 0
    storage.finish([complete_end(first[0].ref)], now=T0 + 1)
    assert [c.id for c in storage.claim("w", ["default"], 5, LEASE, now=T0 + 2)] == [waiting[1].id]


def test_claim_stays_correct_when_now_goes_backwards() -> None:
    """A job promoted to ready by a later ``now`` is not claimable at an earlier one."""
    storage = MemoryStorage()
    first, second = new_job(run_at=T0 + MIN), new_job(run_at=T0 + MIN)
    storage.enqueue([first, second], now=T0)
    assert [c.id for c in storage.claim("w", ["default"], 1, LEASE, now=T0 + MIN)] == [first.id]
    assert storage.claim("w", ["default"], 1, LEASE, now=T0 + MIN - 1) == []
    assert [c.id for c in storage.claim("w", ["default"], 1, LEASE, now=T0 + MIN)] == [second.id]


def test_manual_clock_moves_only_forward_and_keeps_both_readings_in_step() -> None:
    clock = ManualClock(start_ms=1_000, monotonic_start=5.0)
    assert (clock.now_ms(), clock(), clock.monotonic()) == (1_000, 1_000, 5.0)
    clock.advance(1.5)
    clock.advance_ms(250)
    assert (clock.now_ms(), clock.monotonic()) == (2_750, 6.75)
    with pytest.raises(ValueError):
        clock.advance(-1)
    assert isinstance(clock, Clock)
