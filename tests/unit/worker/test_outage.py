"""Outage: one WARNING when storage becomes unavailable, one INFO when it answers again,
DEBUG in between; other storage errors are left to their caller."""

from __future__ import annotations

import logging

import pytest

from queue_core.errors import StorageError, StorageUnavailable
from queue_core.worker.outage import Outage


def test_an_outage_is_two_lines_however_many_calls_fail(caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage()
    caplog.set_level(logging.DEBUG, logger="queue_core.worker")
    outage.ok()  # nothing to end
    for what in ("claim", "finish", "claim", "reaper"):
        assert outage.failed(what, StorageUnavailable("db: connection refused"))
    assert outage.down
    outage.ok()
    outage.ok()
    assert not outage.down
    levels = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [lvl for lvl, _ in levels] == ["WARNING", "DEBUG", "DEBUG", "DEBUG", "INFO"]
    assert "storage unavailable (claim failed: db: connection refused)" in levels[0][1]
    assert "(4 calls failed meanwhile)" in levels[-1][1]
    assert caplog.records[-1].event["event"] == "storage_up"  # type: ignore[attr-defined]

    caplog.clear()
    assert outage.failed("renew", StorageUnavailable("again"))  # a second outage: a new pair
    assert [r.levelname for r in caplog.records] == ["WARNING"]


def test_other_storage_errors_are_not_an_outage(caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage()
    caplog.set_level(logging.DEBUG, logger="queue_core.worker")
    assert not outage.failed("claim", StorageError("constraint violated"))
    assert not outage.down and caplog.records == []
