"""The pure schedule core (queue_core.rules.ticks): parsing, tick arithmetic, and which
tick a scheduler enqueues — tables, all as functions of an explicit ``now``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from queue_core import ConfigError, Queue
from queue_core.rules.ticks import Schedule, parse_schedule, tick_to_enqueue

SEC = 1000
MIN = 60 * SEC


def ms(text: str) -> int:
    """Epoch ms of an ISO time with offset, e.g. '2026-03-29T01:30:00+00:00'."""
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def utc(value: int) -> str:
    return datetime.fromtimestamp(value / 1000, tz=timezone.utc).isoformat()


@pytest.mark.parametrize(
    ("kwargs", "code", "field"),
    [
        ({"every": "5m", "cron": "* * * * *"}, "conflicting_options", "cron"),
        ({}, "invalid_option", "every"),
        ({"cron": "*/5 * * *"}, "invalid_cron", "cron"),
        ({"cron": "61 * * * *"}, "invalid_cron", "cron"),
        ({"cron": "* * * * * * *"}, "invalid_cron", "cron"),
        ({"cron": "every day"}, "invalid_cron", "cron"),
        ({"every": "5m", "tz": "Mars/Olympus"}, "invalid_option", "tz"),
        ({"cron": "* * * * *", "tz": ""}, "invalid_option", "tz"),
        ({"every": "soon"}, "invalid_duration", "every"),
        ({"every": 0}, "invalid_duration", "every"),
        ({"every": "-5m"}, "invalid_duration", "every"),
        ({"every": "250ms"}, "invalid_duration", "every"),
        ({"every": "5m", "catch_up": "yes"}, "invalid_option", "catch_up"),
    ],
)
def test_bad_schedules_are_refused_with_their_code(
    kwargs: dict[str, Any], code: str, field: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_schedule(**kwargs)
    assert (err.value.code, err.value.field) == (code, field)
    bad = kwargs.get(field)
    if bad not in (None, ""):
        assert repr(bad) in str(err.value) or str(bad) in str(err.value)


@pytest.mark.parametrize(
    ("kw", "field"), [({"args": 5}, "args"), ({"args": "ab"}, "args"), ({"kwargs": [1]}, "kwargs")]
)
def test_periodic_args_of_the_wrong_kind_are_refused(kw: dict[str, Any], field: str) -> None:
    """As ``.apply(args=5)`` is: a ``ConfigError``, not a ``TypeError``; nothing registered."""
    queue = Queue("memory://")
    with pytest.raises(ConfigError) as err:

        @queue.periodic(every="5m", **kw)
        def tick(*a: Any, **k: Any) -> None: ...

    assert (err.value.code, err.value.field) == ("invalid_option", field)
    assert repr(kw[field]) in str(err.value)
    assert queue.periodic_tasks == {}


def test_the_error_without_a_schedule_says_what_to_give() -> None:
    with pytest.raises(ConfigError, match=r"every= .* cron="):
        parse_schedule()


@pytest.mark.parametrize(
    ("every", "now", "latest", "following"),
    [
        # aligned to the Unix epoch, not to when anything started
        (
            "5m",
            ms("2026-01-01T00:07:13+00:00"),
            "2026-01-01T00:05:00+00:00",
            "2026-01-01T00:10:00+00:00",
        ),
        (
            "5m",
            ms("2026-01-01T00:05:00+00:00"),
            "2026-01-01T00:05:00+00:00",
            "2026-01-01T00:10:00+00:00",
        ),
        (
            "1s",
            ms("2026-01-01T00:00:00.999+00:00"),
            "2026-01-01T00:00:00+00:00",
            "2026-01-01T00:00:01+00:00",
        ),
        # 7 minutes does not divide an hour: ticks are multiples of 420 s since 1970
        ("7m", 420 * SEC * 1000 + 5, "1970-01-05T20:40:00+00:00", "1970-01-05T20:47:00+00:00"),
        (
            "1h",
            ms("2026-03-29T01:30:00+00:00"),
            "2026-03-29T01:00:00+00:00",
            "2026-03-29T02:00:00+00:00",
        ),
    ],
)
def test_every_ticks_are_multiples_of_the_interval_since_the_epoch(
    every: str, now: int, latest: str, following: str
) -> None:
    schedule = parse_schedule(every=every)
    assert utc(schedule.latest_tick(now)) == latest
    assert utc(schedule.next_tick(now)) == following
    assert schedule.latest_tick(now) % schedule.every_ms == 0  # type: ignore[operator]


@pytest.mark.parametrize(
    ("cron", "tz", "now", "latest", "following"),
    [
        (
            "*/5 * * * *",
            "UTC",
            "2026-01-01T00:07:13+00:00",
            "2026-01-01T00:05:00+00:00",
            "2026-01-01T00:10:00+00:00",
        ),
        (
            "*/5 * * * *",
            "UTC",
            "2026-01-01T00:05:00+00:00",
            "2026-01-01T00:05:00+00:00",
            "2026-01-01T00:10:00+00:00",
        ),
        # 6 fields: seconds first
        (
            "*/15 * * * * *",
            "UTC",
            "2026-01-01T00:00:20+00:00",
            "2026-01-01T00:00:15+00:00",
            "2026-01-01T00:00:30+00:00",
        ),
        (
            "30 0 9 * * *",
            "UTC",
            "2026-01-01T10:00:00+00:00",
            "2026-01-01T09:00:30+00:00",
            "2026-01-02T09:00:30+00:00",
        ),
        # read in tz: 09:00 in Berlin is 08:00 UTC in winter, 07:00 UTC in summer
        (
            "0 9 * * *",
            "Europe/Berlin",
            "2026-01-05T12:00:00+00:00",
            "2026-01-05T08:00:00+00:00",
            "2026-01-06T08:00:00+00:00",
        ),
        (
            "0 9 * * *",
            "Europe/Berlin",
            "2026-07-05T12:00:00+00:00",
            "2026-07-05T07:00:00+00:00",
            "2026-07-06T07:00:00+00:00",
        ),
        # spring forward (2026-03-29, 02:00 -> 03:00 in Berlin): 02:30 does not exist,
        # the day's run is at 03:00 local (01:00 UTC), the next day 02:30 CEST
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T23:00:00+00:00",
            "2026-03-28T01:30:00+00:00",
            "2026-03-29T01:00:00+00:00",
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-29T01:00:00+00:00",
            "2026-03-29T01:00:00+00:00",
            "2026-03-30T00:30:00+00:00",
        ),
        # fall back (2026-10-25, 03:00 -> 02:00): a daily 02:30 runs once
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T23:00:00+00:00",
            "2026-10-24T00:30:00+00:00",
            "2026-10-25T00:30:00+00:00",
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-25T00:30:00+00:00",
            "2026-10-25T00:30:00+00:00",
            "2026-10-26T01:30:00+00:00",
        ),
        # ... and an hourly :30 runs in both 02:30s (one real hour apart)
        (
            "30 * * * *",
            "Europe/Berlin",
            "2026-10-25T00:45:00+00:00",
            "2026-10-25T00:30:00+00:00",
            "2026-10-25T01:30:00+00:00",
        ),
    ],
)
def test_cron_ticks_in_a_time_zone(
    cron: str, tz: str, now: str, latest: str, following: str
) -> None:
    schedule = parse_schedule(cron=cron, tz=tz)
    assert utc(schedule.latest_tick(ms(now))) == latest
    assert utc(schedule.next_tick(ms(now))) == following


def _every_min(catch_up: bool = False) -> Schedule:
    return parse_schedule(every="1m", catch_up=catch_up)


T = 1_000 * MIN  # a tick of the one-minute schedule


@pytest.mark.parametrize(
    ("catch_up", "now", "last", "since", "expected"),
    [
        # a tick that fell due while the scheduler ran: enqueued, however late it woke
        (False, T, T - MIN, T - 30 * SEC, T),
        (False, T + 50 * SEC, T - MIN, T - 30 * SEC, T),
        (False, T + 5 * SEC, None, T - 30 * SEC, T),
        # ... once: storage already holds it
        (False, T + 5 * SEC, T, T - 30 * SEC, None),
        # ticks missed before the scheduler started are skipped ...
        (False, T + 5 * SEC, T - 10 * MIN, T + 1 * SEC, None),
        # ... unless catch_up: then the latest missed tick runs, once
        (True, T + 5 * SEC, T - 10 * MIN, T + 1 * SEC, T),
        (True, T + 5 * SEC, T, T + 1 * SEC, None),
        # a schedule that never ran has missed nothing
        (True, T + 5 * SEC, None, T + 1 * SEC, None),
        # a tick exactly at start counts as due while running
        (False, T, None, T, T),
    ],
)
def test_which_tick_a_scheduler_enqueues(
    catch_up: bool, now: int, last: int | None, since: int, expected: int | None
) -> None:
    assert tick_to_enqueue(_every_min(catch_up), now, last, since) == expected


def test_describe_names_every_or_cron_and_tz() -> None:
    assert parse_schedule(every="90s").describe() == {"every": 90.0, "cron": None, "tz": "UTC"}
    assert parse_schedule(cron=" 0  9 * * 1-5 ", tz="Asia/Tokyo").describe() == {
        "every": None,
        "cron": "0 9 * * 1-5",
        "tz": "Asia/Tokyo",
    }


def test_periodic_registers_a_task_and_its_schedule() -> None:
    queue = Queue("memory://")

    @queue.periodic(every="5m", args=(3,), kwargs={"b": "x"}, queue="reports", max_retries=2)
    def report(a: int, b: str = "") -> str:
        return f"{a}{b}"

    assert report(1, "y") == "1y"  # still the function, and a task
    assert report.queue_name == "reports"
    assert queue.get_task(report.name) is report
    periodic = queue.periodic_tasks[report.name]
    assert (periodic.args, dict(periodic.kwargs)) == ((3,), {"b": "x"})
    assert periodic.schedule.every_ms == 5 * MIN


def test_periodic_checks_its_arguments_and_registers_nothing_on_error() -> None:
    queue = Queue("memory://")
    with pytest.raises(TypeError, match="periodic"):

        @queue.periodic(every="5m", args=(1, 2))
        def one(a: int) -> None: ...

    assert queue.tasks == {} and queue.periodic_tasks == {}
    with pytest.raises(ConfigError) as err:
        queue.periodic(every="5m", cron="* * * * *")
    assert err.value.code == "conflicting_options"


def test_the_schedule_core_imports_no_clock_randomness_or_io() -> None:
    import ast
    from pathlib import Path

    import queue_core.rules.ticks

    source = Path(queue_core.rules.ticks.__file__).read_text(encoding="utf-8")
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    assert not names & {"time", "random", "anyio", "asyncio", "socket", "threading", "os"}
    assert ".now(" not in source and ".today(" not in source and "utcnow" not in source


def test_every_takes_days_like_retention_does() -> None:
    # issue 23 item 14: every="1d" was refused while retention="7d" was accepted
    queue = Queue("memory://")

    @queue.periodic(every="1d")
    def nightly() -> None: ...

    schedule = parse_schedule(every="1d")
    now = ms("2026-03-04T17:30:00+00:00")
    assert utc(schedule.latest_tick(now)) == "2026-03-04T00:00:00+00:00"
    assert utc(schedule.next_tick(now)) == "2026-03-05T00:00:00+00:00"
    assert parse_schedule(every="1d12h").every_ms == 36 * 3_600_000
