"""The pure parts of queue_core.records.workers: the live rule, the record's JSON, bad input."""

from __future__ import annotations

import pytest

from queue_core.records.errors import ConfigError
from queue_core.records.workers import WorkerInfo
from queue_core.rules.workers import is_live, live_workers, refresh_interval


def info(host: str, pid: int, last_seen: int, ttl_ms: int = 1000) -> WorkerInfo:
    return WorkerInfo(
        id=f"{host}:{pid}",
        host=host,
        pid=pid,
        queues=("a", "b"),
        slots=4,
        busy=2,
        stuck=1,
        started_at=5,
        last_seen=last_seen,
        ttl_ms=ttl_ms,
    )


def test_live_until_last_seen_plus_ttl() -> None:
    w = info("h", 1, last_seen=10_000)
    assert is_live(w, 10_999) and not is_live(w, 11_000)
    assert w.expires_at == 11_000


def test_live_workers_sorts_and_names_the_dead() -> None:
    old, b, a = info("z", 1, 0), info("b", 1, 5_000), info("a", 7, 5_000)
    assert live_workers([old, b, a], 1_500) == ([a, b], ["z:1"])


def test_the_record_round_trips_through_json() -> None:
    w = info("h", 3, 42, ttl_ms=7)
    assert WorkerInfo.from_json(w.to_json()) == w
    assert w.to_dict()["queues"] == ["a", "b"]


def test_refresh_is_a_third_of_the_ttl() -> None:
    assert refresh_interval(15_000) == 5.0


@pytest.mark.parametrize("ttl", [0, -5])
def test_a_ttl_that_is_not_positive_is_refused(ttl: int) -> None:
    with pytest.raises(ConfigError) as err:
        info("h", 1, 0, ttl_ms=ttl)
    assert err.value.code == "invalid_option" and str(ttl) in str(err.value)
