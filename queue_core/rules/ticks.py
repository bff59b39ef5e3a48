"""Periodic schedules (SPEC §11): the pure tick arithmetic and the storage ability.

A schedule is ``every`` (a duration; ticks are multiples of it since the Unix epoch) or
``cron`` (5 fields, or 6 with seconds first) read in ``tz``. Everything here is a pure
function of the ``now`` it is given: :meth:`Schedule.latest_tick` (the tick due at
``now``), :meth:`Schedule.next_tick` and :func:`tick_to_enqueue` (which tick, if any, a
scheduler enqueues now). Cron arithmetic is `cronsim <https://pypi.org/project/cronsim/>`_'s.

Storage decides, atomically, that each tick enqueues exactly one job however many
schedulers run: :class:`SupportsSchedules.enqueue_tick` stores the tick's job only when
the tick is later than the last tick stored for that schedule, and records it as the
last. So a schedule holds one value in storage (its last tick), never a key per tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from queue_core.records.durations import parse_duration, to_ms
from queue_core.records.errors import ConfigError

if TYPE_CHECKING:  # zoneinfo loads with the first schedule (it reads sysconfig)
    from zoneinfo import ZoneInfo

__all__ = [
    "Schedule",
    "parse_schedule",
    "tick_to_enqueue",
]

_SEC = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a periodic task runs: exactly one of ``every_ms`` or ``cron``.

    Build it with :func:`parse_schedule`, which checks every value.
    """

    every_ms: int | None
    cron: str | None
    tz: str = "UTC"
    catch_up: bool = False
    _zone: Any = field(default=None, compare=False, repr=False)

    def _zi(self) -> ZoneInfo:
        from zoneinfo import ZoneInfo

        zone: ZoneInfo = self._zone if self._zone is not None else ZoneInfo(self.tz)
        return zone

    def _at(self, ms: int) -> datetime:
        """``ms`` as an aware datetime in the schedule's zone, whole seconds (floor)."""
        return datetime.fromtimestamp(ms // 1000, tz=timezone.utc).astimezone(self._zi())

    def latest_tick(self, now_ms: int) -> int:
        """The last tick at or before ``now_ms`` (epoch ms)."""
        if self.every_ms is not None:
            return now_ms - now_ms % self.every_ms
        assert self.cron is not None
        from cronsim import CronSim  # imported on use: `import queue_core` stays light

        # cronsim's reverse iteration yields times strictly before its start
        prev = next(CronSim(self.cron, self._at(now_ms) + _SEC, reverse=True))
        return int(prev.timestamp()) * 1000

    def next_tick(self, now_ms: int) -> int:
        """The first tick strictly after ``now_ms`` (epoch ms)."""
        if self.every_ms is not None:
            return now_ms - now_ms % self.every_ms + self.every_ms
        assert self.cron is not None
        from cronsim import CronSim

        nxt = next(CronSim(self.cron, self._at(now_ms)))  # strictly after the second
        return int(nxt.timestamp()) * 1000

    def describe(self) -> dict[str, Any]:
        """``every`` (seconds) or ``cron``, and ``tz``: what ``queue-core schedules``
        prints."""
        if self.every_ms is not None:
            return {"every": self.every_ms / 1000, "cron": None, "tz": self.tz}
        return {"every": None, "cron": self.cron, "tz": self.tz}


def parse_schedule(
    every: float | str | timedelta | None = None,
    cron: str | None = None,
    tz: str = "UTC",
    catch_up: bool = False,
) -> Schedule:
    """Check a schedule's options and build it.

    Raises:
        ConfigError: ``conflicting_options`` (both ``every`` and ``cron``),
            ``invalid_option`` (neither of them; an unknown ``tz``; a non-bool
            ``catch_up``), ``invalid_duration`` (a bad ``every``), ``invalid_cron``
            (a bad ``cron``).
    """
    if every is not None and cron is not None:
        raise ConfigError(
            f"conflicting options: every={every!r} and cron={cron!r} — give one of them",
            code="conflicting_options",
            field="cron",
            value=cron,
        )
    if every is None and cron is None:
        raise ConfigError(
            "a periodic task needs a schedule: give every= (a duration such as '5m') or "
            "cron= (5 fields such as '*/5 * * * *', or 6 with seconds first)",
            code="invalid_option",
            field="every",
            value=None,
        )
    if not isinstance(catch_up, bool):
        raise ConfigError(
            f"invalid catch_up: {catch_up!r} — expected True or False",
            code="invalid_option",
            field="catch_up",
            value=catch_up,
        )
    zone = _zone(tz)
    if every is not None:
        every_ms = to_ms(parse_duration(every, field="every"))
        if every_ms < 1000:
            raise ConfigError(
                f"invalid every: {every!r} — expected a duration of at least 1s",
                code="invalid_duration",
                field="every",
                value=every,
            )
        return Schedule(every_ms, None, tz, catch_up, zone)
    return Schedule(None, _check_cron(cron, zone), tz, catch_up, zone)


def _zone(tz: object) -> ZoneInfo:
    if not isinstance(tz, str) or not tz:
        raise ConfigError(
            f"invalid tz: {tz!r} — expected an IANA time zone name such as 'UTC' or "
            "'Europe/Berlin'",
            code="invalid_option",
            field="tz",
            value=tz,
        )
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"invalid tz: unknown time zone {tz!r} — expected an IANA time zone name such "
            "as 'UTC' or 'Europe/Berlin'",
            code="invalid_option",
            field="tz",
            value=tz,
        ) from None


def _check_cron(cron: object, zone: ZoneInfo) -> str:
    from cronsim import CronSim, CronSimError

    why = "not a string"
    if isinstance(cron, str):
        fields = cron.split()
        if len(fields) not in (5, 6):
            why = f"{len(fields)} fields"
        else:
            try:
                CronSim(" ".join(fields), datetime(2000, 1, 1, tzinfo=zone))
                return " ".join(fields)
            except CronSimError as exc:
                why = str(exc)
    raise ConfigError(
        f"invalid cron: {cron!r} ({why}) — expected 5 fields 'minute hour day month "
        "weekday' such as '*/5 * * * *', or 6 with seconds first",
        code="invalid_cron",
        field="cron",
        value=cron,
    )


def tick_to_enqueue(
    schedule: Schedule, now_ms: int, last_tick: int | None, since_ms: int
) -> int | None:
    """The tick a scheduler enqueues at ``now_ms``, or ``None``.

    Args:
        schedule: the schedule.
        now_ms: the current time (epoch ms).
        last_tick: the last tick stored for the schedule (``None``: none yet), as far as
            this scheduler knows; storage checks again atomically.
        since_ms: when this scheduler started. A tick that fell due while it ran is
            enqueued however late the scheduler wakes; a tick that fell due before it
            started was missed while no scheduler ran it: skipped, unless
            ``catch_up`` and the schedule ran before (then the latest missed tick
            runs, once; a schedule that never ran has missed nothing).
    """
    due = schedule.latest_tick(now_ms)
    if due >= since_ms:
        return due if last_tick is None or due > last_tick else None
    if schedule.catch_up and last_tick is not None and due > last_tick:
        return due
    return None
