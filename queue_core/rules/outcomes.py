"""What storage does with a decision: the rules every backend applies, written once.

The core decides (:func:`~queue_core.rules.decide.decide`); storage applies. These pure
functions and value types are the *applying* half, shared by every backend so that the
rules cannot drift between them:

* :func:`end_state` -- the job state (and job reason) that ``Storage.finish`` sets for each
  :class:`~queue_core.records.jobs.Action`.
* :func:`reap_verdict` -- which expired bound of a running attempt wins, how the attempt is
  recorded and what happens to the job (``Storage.reap``); :func:`reap_ready_at` -- when
  a reaped job is ready again; :func:`reap_place_at` -- its place in line once ready
  (the one it had: a reap never sends a job to the back).
* :func:`replay_job` -- how ``Storage.retry_dead`` rebuilds a job from the spec that a
  dead-letter entry carries, counting the replay in the job's ``options``
  (:func:`replay_count` reads the count back).
* :func:`parse_retention` and :data:`DEFAULT_RETENTION_MS` -- how long finished jobs are
  kept, one parser for every backend's ``?retention=`` URL option.

Backends that cannot call Python inside their atomic step (Redis Lua scripts, DynamoDB
conditional writes) mirror these functions and cite them by name; the published contract
suite (``queue_core.testing``) pins every case, so a mirror that drifts fails it.

No I/O, no clock: ``now`` is an argument (epoch milliseconds).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from queue_core.records.base import Record
from queue_core.records.durations import parse_duration, to_ms
from queue_core.records.errors import ConfigError
from queue_core.records.jobs import (
    Action,
    Decision,
    JobState,
    NewJob,
    Outcome,
    Reason,
)
from queue_core.rules.leases import expired_bound

__all__ = [
    "DEFAULT_RETENTION_MS",
    "MAX_HELD_REFUNDS",
    "ReapVerdict",
    "end_state",
    "parse_retention",
    "reap_outcome",
    "reap_place_at",
    "reap_ready_at",
    "reap_verdict",
    "replay_count",
    "replay_job",
]

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
"""Finished jobs are kept 7 days by default (SPEC §8); dead letters until purged."""


# --------------------------------------------------------------------------- finish


def end_state(decision: Decision, attempt_reason: str | None = None) -> tuple[JobState, str | None]:
    """The job's state and job reason after ``Storage.finish`` applies ``decision``.

    ========== ============= =====================================================
    action      state         job reason
    ========== ============= =====================================================
    COMPLETE    succeeded     ``None``
    RETRY       queued        ``None`` (ready at ``now + delay_ms``)
    DEAD        dead          ``decision.reason``, else ``fatal``
    CANCEL      cancelled     ``cancelled``
    TIME_OUT    timed_out     ``decision.reason``, else the attempt's reason, else
                              ``flow_timeout``
    ========== ============= =====================================================

    Args:
        decision: the core's decision for the attempt.
        attempt_reason: the attempt's own reason (used by ``TIME_OUT`` only).
    """
    action = decision.action
    if action is Action.COMPLETE:
        return JobState.SUCCEEDED, None
    if action is Action.RETRY:
        return JobState.QUEUED, None
    if action is Action.DEAD:
        return JobState.DEAD, decision.reason or Reason.FATAL.value
    if action is Action.CANCEL:
        return JobState.CANCELLED, Reason.CANCELLED.value
    if action is Action.TIME_OUT:
        return JobState.TIMED_OUT, decision.reason or attempt_reason or Reason.FLOW_TIMEOUT.value
    raise ValueError(f"unknown action: {action!r}")


# --------------------------------------------------------------------------- reap


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ReapVerdict(Record):
    """What a reap does to one running attempt whose bound passed."""

    reason: Reason
    """The attempt's reason: ``timeout``, ``heartbeat_timeout`` or ``lease_expired``."""
    outcome: Outcome
    """The attempt's outcome: ``timed_out`` for the two timeouts, ``lost`` for a lease."""
    state: JobState
    """The job's state after the reap: ``cancelled``, ``queued`` or ``dead``."""
    job_reason: str | None
    """The job's reason: ``cancelled``, ``retries_exhausted`` or ``None`` (queued)."""
    ready_at: int | None
    """``queued`` only: when the retry becomes ready (:func:`reap_ready_at`)."""
    place_at: int | None = None
    """``queued`` only: the time claims order it by once it is ready, its place in line
    (:func:`reap_place_at`); never later than ``ready_at``."""
    refund: bool = False
    """The attempt spent none of the job's budget (a held attempt whose body never
    started): storage raises the job's ``max_attempts`` by one, as ``finish`` does for a
    decision with ``spends_attempt=False``."""


MAX_HELD_REFUNDS: Final = 2
"""How many times a job's held attempts are reaped without spending one
(:func:`reap_verdict`); past it they spend, so a job that kills its worker as soon as it
starts from being held is still dead-lettered."""


def reap_outcome(reason: Reason) -> Outcome:
    """The attempt outcome recorded for a reap ``reason``: ``lost`` for an expired lease
    (the worker went silent), ``timed_out`` for a passed deadline or heartbeat bound."""
    return Outcome.LOST if reason is Reason.LEASE_EXPIRED else Outcome.TIMED_OUT


def reap_ready_at(
    now: int, *, run_at: int | None, lost_delay_ms: int, schedule_to_start_ms: int | None
) -> int:
    """When a reaped job that has attempts left is ready again (may be claimed).

    * ``lost_delay_ms == 0`` and no schedule-to-start bound: the job's previous ready
      time ``run_at`` (never later than ``now``).
    * otherwise ``now + lost_delay_ms``: the backoff the policy gives the attempt is
      kept (a job is never claimed before it), and a schedule-to-start bound counts from
      the ready time, so a job with one restarts its wait (keeping an old ready time
      would expire it at once).

    Where it then stands in line is :func:`reap_place_at`'s: its old place, whatever
    the ready time.

    ``run_at`` is ``None`` when the storage does not know it: ``now + lost_delay_ms``.
    """
    if lost_delay_ms == 0 and run_at is not None and schedule_to_start_ms is None:
        return min(run_at, now)
    return now + lost_delay_ms


def reap_place_at(*, place_at: int | None, run_at: int | None, ready_at: int) -> int:
    """The place in line of a reaped job that is queued again: the place it had.

    Claims take ready jobs (ready time ``<= now``) by priority (highest first), then
    *place*, then enqueue order. A job's place is its ready time -- except after a reap:
    a reaped attempt is the worker's loss (it died, hung or lost its storage), not the
    job's, so the job keeps the place it had when it was claimed, ahead of every job of
    its priority enqueued after it, instead of waiting behind the whole backlog. Its
    backoff still holds (it is not claimed before ``ready_at``, :func:`reap_ready_at`);
    once that has passed, it is the next of its priority.

    Args:
        place_at: the job's place when it was claimed, when that was not its ready time
            (it had been reaped before and its backoff kept it out of line); ``None``
            otherwise.
        run_at: the ready time of the attempt that was reaped (``None`` when unknown).
        ready_at: the ready time the reap gives the job (:func:`reap_ready_at`).

    Returns:
        ``min(place_at or run_at, ready_at)`` -- ``ready_at`` when neither is known.
    """
    previous = place_at if place_at is not None else run_at
    if previous is None:
        return ready_at
    return min(previous, ready_at)


def reap_verdict(
    now: int,
    *,
    lease_expires_at: int | None,
    deadline: int | None,
    heartbeat_expires_at: int | None,
    cancel_requested: bool,
    attempt: int,
    max_attempts: int,
    lost_delay_ms: int,
    run_at: int | None,
    schedule_to_start_ms: int | None,
    place_at: int | None = None,
    held: bool = False,
    held_refunds: int = 0,
) -> ReapVerdict | None:
    """Whether a running attempt is reaped at ``now``, and what the reap does.

    The bound that wins when several have passed is the most specific
    (:func:`~queue_core.rules.leases.expired_bound`): ``timeout`` over
    ``heartbeat_timeout`` over ``lease_expired``. Then, in this order:

    1. a pending cancel request ends the job ``cancelled`` (reason ``cancelled``);
    2. attempts remain (``attempt < max_attempts``): queued again, ready at
       :func:`reap_ready_at` -- ``now + lost_delay_ms`` (the delay the core precomputed
       for this attempt), or the job's previous ready time ``run_at`` when that delay is
       0 (and it has no schedule-to-start bound) -- and in the place it had
       (:func:`reap_place_at` of ``place_at``, ``run_at`` and that ready time), so
       once ready it is claimed before the jobs of its priority enqueued after it;
    3. otherwise dead-lettered with reason ``retries_exhausted``.

    A *held* attempt (claimed ahead of a free slot, its body not started as far as
    storage knows: ``SupportsPrefetch``) spends no attempt (SPEC §8): unless a cancel is
    pending, its job is queued again whatever its budget -- ready at once (no backoff:
    it never ran), in its place -- with ``refund`` set. Its record is kept (``lost``, the
    bound's reason): a worker claimed it and lost it. At most
    :data:`MAX_HELD_REFUNDS` times per job (``held_refunds``: the refunds it had): a
    worker tells a held body's start up to 20 ms after it, so a body that kills its
    worker at once can be reaped as held, and it must still reach the dead-letter
    store instead of looping (SPEC §5); past the bound a held attempt is reaped as a
    running one.

    Every reap releases the attempt's lease and concurrency slot.

    Returns:
        The verdict, or ``None`` while every bound is in the future.
    """
    reason = expired_bound(
        now,
        lease_expires_at=lease_expires_at,
        deadline=deadline,
        heartbeat_expires_at=heartbeat_expires_at,
    )
    if reason is None:
        return None
    outcome = reap_outcome(reason)
    if cancel_requested:
        return ReapVerdict(
            reason=reason,
            outcome=outcome,
            state=JobState.CANCELLED,
            job_reason=Reason.CANCELLED.value,
            ready_at=None,
        )
    refund = held and held_refunds < MAX_HELD_REFUNDS
    if refund or attempt < max_attempts:
        ready_at = reap_ready_at(
            now,
            run_at=run_at,
            lost_delay_ms=0 if refund else lost_delay_ms,
            schedule_to_start_ms=schedule_to_start_ms,
        )
        return ReapVerdict(
            reason=reason,
            outcome=outcome,
            state=JobState.QUEUED,
            job_reason=None,
            ready_at=ready_at,
            place_at=reap_place_at(place_at=place_at, run_at=run_at, ready_at=ready_at),
            refund=refund,
        )
    return ReapVerdict(
        reason=reason,
        outcome=outcome,
        state=JobState.DEAD,
        job_reason=Reason.RETRIES_EXHAUSTED.value,
        ready_at=None,
    )


# --------------------------------------------------------------------------- dead letters


REPLAYS_KEY: Final = "replays"
"""The key of ``options`` (a JSON object) that counts the replays leading to a job."""

_WS = " \t\n\r"
_LEADING_COUNT = re.compile(r'\{[ \t\n\r]*"replays"[ \t\n\r]*:[ \t\n\r]*([0-9]+)[ \t\n\r]*(?=[,}])')
"""A ``"replays"`` member written first in the object, as :func:`replay_job` writes it."""


def replay_count(options: str | None, replay_of: str | None) -> int | None:
    """How many replays (``Storage.retry_dead``) led to a job, read from its ``options``
    and ``replay_of``; ``None`` when that cannot be known.

    :func:`replay_job` keeps the count in ``options``, a JSON object, as the member
    ``"replays"`` written first (``{"replays":2,...}``). The count is:

    * ``0`` for a job never replayed: ``replay_of`` is ``None`` and options are ``None``,
      empty, or an object without ``"replays"``;
    * the ``"replays"`` member when it is a non-negative integer written first;
    * ``None`` (unknown) otherwise: options that are not a JSON object, a ``"replays"``
      member that is not a plain count or not first, or a replayed job (``replay_of``
      set) without a count (replayed before counts were kept).

    An unknown count stays unknown along the chain (:func:`replay_job` leaves such
    options alone), so a caller that stops at a bound (auto-replay's ``max_replays``)
    never exceeds it.
    """
    if not options:
        return 0 if replay_of is None else None
    try:
        data = json.loads(options)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if REPLAYS_KEY not in data:
        return 0 if replay_of is None else None
    value = data[REPLAYS_KEY]
    lead = _LEADING_COUNT.match(options.lstrip(_WS))
    if lead is None or type(value) is not int or value != int(lead.group(1)):
        return None
    return value


def _count_replay(options: str | None, replay_of: str | None) -> str | None:
    """``options`` with one more replay counted (see :func:`replay_count`): the
    ``"replays"`` member first, every other member kept as written; unchanged when the
    count is unknown."""
    done = replay_count(options, replay_of)
    if done is None:
        return options
    lead = f'{{"{REPLAYS_KEY}":{done + 1}'
    if not options:
        return lead + "}"
    text = options.lstrip(_WS)
    found = _LEADING_COUNT.match(text)
    if found is not None:
        return lead + text[found.end() :]
    rest = text[1:]
    if rest.lstrip(_WS).startswith("}"):  # an empty object
        return lead + rest.lstrip(_WS)
    return lead + "," + rest


def replay_job(spec: NewJob, *, dead_id: str, new_id: str, queue: str | None, now: int) -> NewJob:
    """The job that ``Storage.retry_dead`` enqueues for a dead-letter entry.

    A dead-letter entry carries the job's spec as it was enqueued (:class:`NewJob`:
    task, queue, payload, priority, every option, and the attempt-1 ``lost_delay_ms``).
    The replay is that spec with a fresh attempt budget (attempts count from 1 again):

    * a new ``id``; ``queue`` replaced when given;
    * ready now: ``run_at = now``, ``delay_ms = 0``;
    * ``replay_of = dead_id`` (the entry it replays, which ``retry_dead`` removes);
    * one more replay counted in ``options``: the JSON object gets (or updates) the
      member ``"replays"``, written first -- ``None`` becomes ``{"replays":1}``,
      ``{"o":1}`` becomes ``{"replays":1,"o":1}``, ``{"replays":1,"o":1}`` becomes
      ``{"replays":2,"o":1}``; every other member is kept as written. Options whose
      count is unknown (see :func:`replay_count`) are kept as they are. The count is
      what auto-replay (``dead_letter_replay``) bounds with ``max_replays``, so it
      survives worker restarts and holds across workers.

    Everything else -- priority, ``max_attempts``, ``lost_delay_ms``, timeouts,
    heartbeat, schedule-to-start, concurrency -- is kept as stored.

    Raises:
        ConfigError: ``invalid_option`` for a flow step's job (``execution_id`` set): its
            execution has already failed, and a lone replayed step would have no
            execution to report to -- replay the execution instead. Storage calls this
            before it removes the entry, so a refused replay changes nothing.
    """
    if spec.execution_id is not None:
        raise ConfigError(
            f"job {spec.id} is step {spec.step_id!r} of flow execution {spec.execution_id}: "
            "a step's dead letter cannot be replayed on its own; replay the execution",
            code="invalid_option",
            field="dead_id",
            value=dead_id,
        )
    return dataclasses.replace(
        spec,
        id=new_id,
        queue=queue if queue is not None else spec.queue,
        run_at=now,
        delay_ms=0,
        replay_of=dead_id,
        options=_count_replay(spec.options, spec.replay_of),
    )


# --------------------------------------------------------------------------- retention

_DAYS = re.compile(r"^(?P<days>\d+(?:\.\d+)?)d(?P<rest>.*)$")


def parse_retention(value: str | int | float | timedelta) -> int:
    """How long finished jobs are kept, in milliseconds (every backend's ``?retention=``).

    Accepts what durations accept (seconds as a number, ``"90s"``, ``"12h"``,
    ``"1h30m"``, a :class:`~datetime.timedelta`) plus a leading day count, since
    retention is naturally counted in days: ``"7d"``, ``"1d12h"``. ``0`` (or ``"0"``,
    ``"0s"``) keeps no finished job: the next prune deletes every job finished at or
    before ``now``. Dead-letter entries are not affected by retention.

    Raises:
        ConfigError: ``invalid_duration`` for anything else (negative values included),
            quoting the bad value.
    """
    if isinstance(value, bool):
        raise _bad_retention(value)
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise _bad_retention(value)
        return int(round(value.total_seconds() * 1000))
    if isinstance(value, (int, float)):
        if value < 0 or value != value:  # negative or NaN
            raise _bad_retention(value)
        return int(round(value * 1000))
    text = value.strip()
    if text in ("0", "0s", "0ms", "0d", "0m", "0h"):
        return 0
    match = _DAYS.match(text)
    if match is not None:
        days_ms = int(round(float(match["days"]) * 86_400_000))
        rest = match["rest"]
        if not rest:
            if days_ms <= 0:
                return 0
            return days_ms
        try:
            return days_ms + to_ms(parse_duration(rest, field="retention"))
        except ConfigError:
            raise _bad_retention(value) from None
    try:
        return to_ms(parse_duration(text, field="retention"))
    except ConfigError:
        raise _bad_retention(value) from None


def _bad_retention(value: object) -> ConfigError:
    return ConfigError(
        f"retention: invalid duration {value!r}; expected 0 (keep nothing), seconds, a "
        "duration such as '12h' or '90m', or days such as '7d' or '1d12h'",
        code="invalid_duration",
        field="retention",
        value=value,
    )
