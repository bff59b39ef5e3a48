"""The base every contract mixin shares: overridable settings and small helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest

from queue_core.model import AttemptRecord, JobRecord, dt_from_ms
from queue_core.storage import Storage
from queue_core.testing.fixtures import DAY

__all__ = ["ContractBase", "StorageWithRetention", "job_of", "running_record"]

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


def job_of(storage: Storage, job_id: str) -> JobRecord:
    """``storage.get_job(job_id)``, which must exist."""
    record = storage.get_job(job_id)
    assert record is not None, f"job {job_id} not found"
    return record


def running_record(number: int, worker_id: str, started_at: int) -> AttemptRecord:
    """The record of an attempt that is still running."""
    return AttemptRecord(
        number=number,
        outcome=None,
        reason=None,
        error_class=None,
        error_type=None,
        message=None,
        traceback=None,
        worker_id=worker_id,
        started_at=dt_from_ms(started_at),
        finished_at=None,
        mode=None,
    )
