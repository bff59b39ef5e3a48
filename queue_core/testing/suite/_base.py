"""The base every contract mixin shares: overridable settings and small helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ClassVar

import pytest

from queue_core.records.jobs import AttemptRecord, JobRecord, dt_from_ms
from queue_core.storage.abilities import SupportsResultLimit
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import DAY, attempt_record

__all__ = [
    "ContractBase",
    "lacks",
    "StorageWithRetention",
    "job_of",
    "numbered",
    "order_says",
    "race_says",
    "running_record",
]

StorageWithRetention = Callable[[str], Storage]
"""``build(retention)``: a fresh, empty storage of the backend under test, built the way
users build it, with ``retention`` (the text of a ``?retention=`` URL option, e.g. ``"0"``
or ``"1d"``). The fixture closes what it built."""


class ContractBase:
    """Settings a backend's test class may override."""

    retention_ms: ClassVar[int] = 7 * DAY
    """The retention the ``storage`` fixture's backend was built with."""
    race_threads: ClassVar[int] = 8
    """Threads started behind a barrier by each race test."""

    @pytest.fixture
    def storage_with_retention(self) -> StorageWithRetention:
        """Override to build the backend with a given retention (see
        :data:`StorageWithRetention`); without it the retention tests skip, naming it."""
        pytest.skip("storage lacks a retention option (no storage_with_retention fixture)")


def lacks(ability: type) -> str:
    """The message of a test skipped for want of an optional ability: its name and the
    module it lives in, e.g. ``storage lacks SupportsFlows (queue_core.storage.flows)``."""
    return (
        f"storage lacks {ability.__name__} ({ability.__module__}); implement "
        f"{ability.__module__}.{ability.__qualname__} to run this test"
    )


def result_size(storage: Storage) -> int:
    """The size of the contract's large results: 1 MiB, or the storage's
    ``max_result_bytes()`` (:class:`~queue_core.storage.abilities.SupportsResultLimit`)."""
    limit = storage.max_result_bytes() if isinstance(storage, SupportsResultLimit) else 1 << 20
    return min(1 << 20, limit)


def job_of(storage: Storage, job_id: str) -> JobRecord:
    """``storage.get_job(job_id)``, which must exist."""
    record = storage.get_job(job_id)
    assert record is not None, f"job {job_id} not found"
    return record


def running_record(number: int, worker_id: str, started_at: int) -> AttemptRecord:
    """The record of an attempt that is still running."""
    return attempt_record(number, worker_id=worker_id, started_at=dt_from_ms(started_at), mode=None)


def numbered(ids: Sequence[str], name: str = "job") -> dict[str, str]:
    """Names for ids in the order a test made them: ``job1``, ``job2``, ..."""
    return {f"{name}{i}": value for i, value in enumerate(ids, 1)}


def order_says(rule: str, got: Iterable[object], expected: Mapping[str, object]) -> str:
    """The message of an ordering assertion, in words: the ``rule``, the expected and the
    received order by the names the test gave its values (``expected`` maps each name,
    in the expected order, to its value), then every value, so a failure reads without
    decoding job ids."""
    name_of = {value: name for name, value in expected.items()}
    seen = [name_of.get(value, f"unexpected {value!r}") for value in got]
    values = ", ".join(f"{name}={value!r}" for name, value in expected.items())
    return f"{rule}: expected [{', '.join(expected)}], got [{', '.join(seen)}]; {values}"


def race_says(what: str, n: int, outcome: object) -> str:
    """The message of a race assertion, in words: ``n`` callers released together did
    ``what``, which exactly one of them may win; ``outcome`` is what they got."""
    return (
        f"{what}, called by {n} threads released together by a barrier: exactly one "
        f"caller must win (the operation must be atomic); got {outcome!r}"
    )
