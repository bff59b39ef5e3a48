"""Tasks: ``@queue.task``, its options, per-call overrides and the ``JobHandle``.

Every option is validated when it is given -- decorator options at decoration, per-call
overrides at :meth:`Task.apply` -- and every bad value is a
:class:`~queue_core.errors.ConfigError` naming the option, the value and what is
accepted.
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, ParamSpec, TypeVar

from queue_core.durations import parse_duration, to_ms
from queue_core.errors import ConfigError, JobCancelled, JobFailed, JobSkipped
from queue_core.model import AttemptRecord, JobInfo, JobRecord, JobState, NewJob, dt_from_ms
from queue_core.policy import (
    RetryPolicy,
    lost_delay_ms,
    merge_policies,
    policy_from_options,
    validate_exception_classes,
)

if TYPE_CHECKING:
    from queue_core.queue import Queue

__all__ = ["Concurrency", "JobHandle", "Replay", "Task"]

P = ParamSpec("P")
R = TypeVar("R")


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"

    def __bool__(self) -> bool:
        return False


UNSET: Final[Any] = _Unset()
"""Marks an option that was not given (``None`` means "off" for several options)."""

ISOLATIONS: Final = ("thread", "process")
_PRIORITY_RANGE: Final = (-(2**31), 2**31 - 1)
DEFAULT_KILL_GRACE: Final = 10.0


def _invalid(field_name: str, value: object, expected: str) -> ConfigError:
    return ConfigError(
        f"invalid {field_name}: {value!r} — expected {expected}",
        code="invalid_option",
        field=field_name,
        value=value,
    )


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Concurrency:
    """Bound on running instances of a task across all workers (SPEC §7).

    Args:
        limit: how many may be active at once, an integer >= 1.
        behavior: ``"queue"``: extra jobs stay queued until a slot frees (active =
            running); ``"skip"``: a new job ends ``skipped`` at enqueue when the limit
            is reached (active = queued + running).
        key: jobs sharing a key share the limit; default the task name.
    """

    limit: int
    behavior: Literal["queue", "skip"] = "queue"
    key: str | None = None

    def __post_init__(self) -> None:
        if not _is_int(self.limit) or not 1 <= int(self.limit) <= 1_000_000:
            raise _invalid("concurrency.limit", self.limit, "an integer from 1 to 1000000")
        if self.behavior not in ("queue", "skip"):
            raise _invalid("concurrency.behavior", self.behavior, "'queue' or 'skip'")
        if self.key is not None and (not isinstance(self.key, str) or not self.key):
            raise _invalid("concurrency.key", self.key, "a non-empty string or None")


@dataclass(frozen=True, slots=True, init=False)
class Replay:
    """Auto-replay of a task's dead jobs after a quiet period (SPEC §6).

    Validated and stored with the task; the automatic replay itself is not performed by
    this version of the worker (replay dead jobs with ``queue.retry_dead``).

    Args:
        after: quiet period before a replay (a duration).
        max_replays: how many times one job may be replayed, 1..100.
    """

    after: float
    max_replays: int

    def __init__(self, after: float | str | timedelta, max_replays: int = 3) -> None:
        object.__setattr__(self, "after", parse_duration(after, field="dead_letter_replay.after"))
        if not _is_int(max_replays) or not 1 <= int(max_replays) <= 100:
            raise _invalid(
                "dead_letter_replay.max_replays", max_replays, "an integer from 1 to 100"
            )
        object.__setattr__(self, "max_replays", int(max_replays))


# --------------------------------------------------------------------------- option checks


def check_name(value: object, field_name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _invalid(field_name, value, "a non-empty string")
    return value


def check_priority(value: object) -> int:
    if not _is_int(value) or not _PRIORITY_RANGE[0] <= int(value) <= _PRIORITY_RANGE[1]:  # type: ignore[call-overload]
        raise _invalid("priority", value, "an integer (higher runs first)")
    return int(value)  # type: ignore[call-overload,no-any-return]


def _check_min_duration(value: object, field_name: str, minimum: float) -> float | None:
    if value is None:
        return None
    seconds = parse_duration(value, field=field_name)  # type: ignore[arg-type]
    if seconds < minimum:
        raise _invalid(field_name, value, f"a duration of at least {minimum:g} s, or None (off)")
    return seconds


def check_timeout(value: object) -> float | None:
    if value is None:
        return None
    return parse_duration(value, field="timeout")  # type: ignore[arg-type]


def check_concurrency(value: object) -> Concurrency | None:
    if value is None or isinstance(value, Concurrency):
        return value
    if _is_int(value):
        return Concurrency(int(value))  # type: ignore[call-overload]
    raise _invalid("concurrency", value, "Concurrency(limit, behavior='queue'|'skip') or None")


def check_isolation(value: object) -> str:
    if value not in ISOLATIONS or not isinstance(value, str):
        raise _invalid("isolation", value, "'thread' or 'process'")
    return value


def check_replay(value: object) -> Replay | None:
    if value is None or isinstance(value, Replay):
        return value
    raise _invalid("dead_letter_replay", value, "Replay(after, max_replays) or None")


def _check_delay(value: object) -> int:
    if value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0
    ):
        return 0
    return to_ms(parse_duration(value, field="delay"))  # type: ignore[arg-type]


def _check_run_at(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return int(round(value.timestamp() * 1000))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return int(round(float(value) * 1000))
    raise _invalid("run_at", value, "a datetime or epoch seconds, or None")


def fq_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSpec:
    """Validated options of a task or of one call (fields ``UNSET`` when not given)."""

    policy: RetryPolicy = field(default_factory=RetryPolicy)
    retry_on: tuple[type[BaseException], ...] = ()
    dont_retry_on: tuple[type[BaseException], ...] = ()
    queue: Any = UNSET
    timeout: Any = UNSET
    heartbeat: Any = UNSET
    schedule_to_start: Any = UNSET
    concurrency: Any = UNSET
    isolation: Any = UNSET
    kill_grace: Any = UNSET
    dead_letter_replay: Any = UNSET
    priority: Any = UNSET


def build_spec(
    *,
    is_async: bool,
    queue: Any = UNSET,
    max_retries: Any = UNSET,
    max_attempts: Any = UNSET,
    retry_backoff: Any = UNSET,
    retry_backoff_kind: Any = UNSET,
    retry_coefficient: Any = UNSET,
    retry_max_delay: Any = UNSET,
    retry_jitter: Any = UNSET,
    retry: Any = UNSET,
    retry_on: Any = UNSET,
    dont_retry_on: Any = UNSET,
    non_retryable: Any = UNSET,
    timeout: Any = UNSET,
    heartbeat: Any = UNSET,
    schedule_to_start: Any = UNSET,
    concurrency: Any = UNSET,
    isolation: Any = UNSET,
    kill_grace: Any = UNSET,
    dead_letter_replay: Any = UNSET,
    priority: Any = UNSET,
) -> TaskSpec:
    """Validate task options (decorator or per-call); raise ConfigError on the first bad one."""

    def given(v: Any) -> Any:
        return None if v is UNSET else v

    policy = policy_from_options(
        max_retries=given(max_retries),
        max_attempts=given(max_attempts),
        retry_backoff=given(retry_backoff),
        retry_backoff_kind=given(retry_backoff_kind),
        retry_coefficient=given(retry_coefficient),
        retry_max_delay=given(retry_max_delay),
        retry_jitter=given(retry_jitter),
        non_retryable=given(non_retryable),
        retry=given(retry),
    )
    if retry_on not in (UNSET, None) and dont_retry_on not in (UNSET, None):
        raise ConfigError(
            f"conflicting options: 'retry_on' ({retry_on!r}) and 'dont_retry_on' "
            f"({dont_retry_on!r}) — give a whitelist or a blacklist, not both",
            code="conflicting_options",
            field="retry_on",
            value=(retry_on, dont_retry_on),
        )
    r_on = validate_exception_classes(given(retry_on), field="retry_on")
    d_on = validate_exception_classes(given(dont_retry_on), field="dont_retry_on")
    iso = UNSET if isolation is UNSET else check_isolation(isolation)
    if iso == "process" and is_async:
        raise ConfigError(
            "conflicting options: isolation='process' applies to sync bodies only; an "
            "async def body runs on the worker's event loop — drop isolation or make it sync",
            code="conflicting_options",
            field="isolation",
            value=isolation,
        )
    return TaskSpec(
        policy=policy,
        retry_on=r_on,
        dont_retry_on=d_on,
        queue=UNSET if queue is UNSET else check_name(queue, "queue"),
        timeout=UNSET if timeout is UNSET else check_timeout(timeout),
        heartbeat=UNSET if heartbeat is UNSET else _check_min_duration(heartbeat, "heartbeat", 1.0),
        schedule_to_start=(
            UNSET
            if schedule_to_start is UNSET
            else _check_min_duration(schedule_to_start, "schedule_to_start", 1.0)
        ),
        concurrency=UNSET if concurrency is UNSET else check_concurrency(concurrency),
        isolation=iso,
        kill_grace=UNSET if kill_grace is UNSET else parse_duration(kill_grace, field="kill_grace"),
        dead_letter_replay=(
            UNSET if dead_letter_replay is UNSET else check_replay(dead_letter_replay)
        ),
        priority=UNSET if priority is UNSET else check_priority(priority),
    )


def _pick(call: Any, task: Any, default: Any) -> Any:
    if call is not UNSET:
        return call
    if task is not UNSET:
        return task
    return default


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else to_ms(seconds)


def call_options_json(spec: TaskSpec) -> str | None:
    """The per-call overrides the worker needs, as compact JSON (``None`` when none)."""
    opts: dict[str, Any] = {}
    if spec.policy.explicit:
        opts["policy"] = {
            name: (list(v) if isinstance(v := getattr(spec.policy, name), tuple) else v)
            for name in sorted(spec.policy.explicit)
        }
    if spec.retry_on:
        opts["retry_on"] = [fq_name(c) for c in spec.retry_on]
    if spec.dont_retry_on:
        opts["dont_retry_on"] = [fq_name(c) for c in spec.dont_retry_on]
    if spec.isolation is not UNSET:
        opts["isolation"] = spec.isolation
    if spec.kill_grace is not UNSET:
        opts["kill_grace"] = spec.kill_grace
    if spec.dead_letter_replay not in (UNSET, None):
        opts["dead_letter_replay"] = [
            spec.dead_letter_replay.after,
            spec.dead_letter_replay.max_replays,
        ]
    if not opts:
        return None
    return json.dumps(opts, separators=(",", ":"), sort_keys=True)


def body_takes_ctx(func: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    p = params.get("ctx")
    return p is not None and p.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


_UUID4_CLEAR: Final = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID4_SET: Final = (4 << 76) | (0x8000 << 48)


def new_job_id() -> str:
    """A random version-4 UUID as 32 hex digits, like ``uuid.uuid4().hex`` (~5x cheaper)."""
    n = int.from_bytes(os.urandom(16), "big")
    return "%032x" % ((n & _UUID4_CLEAR) | _UUID4_SET)


# --------------------------------------------------------------------------- Task


class Task(Generic[P, R]):
    """A function registered on a :class:`~queue_core.Queue` with ``@queue.task``.

    Calling it runs the body inline; :meth:`delay`, :meth:`apply` and :meth:`map`
    enqueue jobs for workers.

    Attributes:
        name: the registry name (``module.qualname`` unless given).
        func: the undecorated body.
        queue_name: the queue its jobs go to unless a call overrides it.
    """

    def __init__(
        self, owner: Queue, func: Callable[P, R], *, name: str, spec: TaskSpec
    ) -> None:
        self._owner = owner
        self.func = func
        self.fn = func
        """Alias of :attr:`func` (child processes unwrap tasks through it)."""
        self.name = name
        self.spec = spec
        self.is_async = inspect.iscoroutinefunction(func)
        self.takes_ctx = body_takes_ctx(func)
        self.queue_name: str = _pick(UNSET, spec.queue, "default")
        self.policy = merge_policies(owner.retry_policy, spec.policy)
        """The queue defaults merged with the task's retry options."""
        timeout = _pick(UNSET, spec.timeout, owner.default_timeout)
        self.timeout: float | None = timeout
        self.heartbeat: float | None = _pick(UNSET, spec.heartbeat, None)
        self.isolation: str = _pick(UNSET, spec.isolation, "thread")
        self.isolation_explicit: bool = spec.isolation is not UNSET
        """False when the task left ``isolation`` to the worker's default."""
        self.kill_grace: float = _pick(UNSET, spec.kill_grace, DEFAULT_KILL_GRACE)
        self.dead_letter_replay: Replay | None = _pick(UNSET, spec.dead_letter_replay, None)
        self.retry_on = spec.retry_on
        self.dont_retry_on = spec.dont_retry_on
        self._template = self._job_fields(spec, TaskSpec())
        self._fixed_lost_delay = (
            lost_delay_ms(self.policy, 1, random.random) if self.policy.jitter == 0 else None
        )
        # lost_delay_ms(self.policy, 1, rng) without re-deriving the base delay per job
        self._lost_base_s = self.policy.base_delay(1)
        self._lost_jitter = self.policy.jitter
        self.__name__ = getattr(func, "__name__", name)
        self.__qualname__ = getattr(func, "__qualname__", name)
        self.__doc__ = getattr(func, "__doc__", None)
        self.__module__ = getattr(func, "__module__", __name__)
        self.__wrapped__ = func

    def _job_fields(self, task: TaskSpec, call: TaskSpec) -> dict[str, Any]:
        owner = self._owner
        policy = self.policy if call is None or not call.policy.explicit else None
        if policy is None:
            policy = self.policy.merged(call.policy)
        conc: Concurrency | None = _pick(call.concurrency, task.concurrency, None)
        timeout = _pick(call.timeout, task.timeout, owner.default_timeout)
        return {
            "task_name": self.name,
            "queue": _pick(call.queue, task.queue, "default"),
            "priority": _pick(call.priority, task.priority, 0),
            "max_attempts": policy.max_attempts,
            "timeout_ms": _ms(timeout),
            "heartbeat_ms": _ms(_pick(call.heartbeat, task.heartbeat, None)),
            "schedule_to_start_ms": _ms(
                _pick(call.schedule_to_start, task.schedule_to_start, None)
            ),
            "concurrency_key": None if conc is None else (conc.key or self.name),
            "concurrency_limit": None if conc is None else conc.limit,
            "concurrency_skip": conc is not None and conc.behavior == "skip",
        }

    # ------------------------------------------------------------------ calling

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the body inline, in this process, like a plain function call."""
        if self.takes_ctx and "ctx" not in kwargs:
            from queue_core.context import JobContext

            kwargs["ctx"] = JobContext(job_id="inline")
        return self.func(*args, **kwargs)

    def _make(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        fields_: dict[str, Any],
        lost: int | None,
        policy: RetryPolicy,
        options: str | None = None,
        delay_ms: int = 0,
        run_at: int | None = None,
    ) -> NewJob:
        payload = self._owner.serializer.dumps_payload(args, kwargs)
        if lost is None:
            lost = (
                int(round(self._lost_base_s * (1.0 - self._lost_jitter * random.random()) * 1000.0))
                if policy is self.policy
                else lost_delay_ms(policy, 1, random.random)
            )
        return NewJob(
            id=new_job_id(),
            payload=payload,
            lost_delay_ms=lost,
            options=options,
            delay_ms=delay_ms,
            run_at=run_at,
            **fields_,
        )

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Enqueue one job with these arguments and the task's options.

        Raises:
            SerializationError: an argument cannot be serialized (nothing is written).
        """
        job = self._make(args, kwargs, self._template, self._fixed_lost_delay, self.policy)
        return self._owner._submit_one(job)

    def apply(
        self,
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        delay: Any = None,
        run_at: Any = None,
        timeout: Any = UNSET,
        priority: Any = UNSET,
        queue: Any = UNSET,
        max_retries: Any = UNSET,
        max_attempts: Any = UNSET,
        retry_backoff: Any = UNSET,
        retry_backoff_kind: Any = UNSET,
        retry_coefficient: Any = UNSET,
        retry_max_delay: Any = UNSET,
        retry_jitter: Any = UNSET,
        retry: Any = UNSET,
        retry_on: Any = UNSET,
        dont_retry_on: Any = UNSET,
        non_retryable: Any = UNSET,
        heartbeat: Any = UNSET,
        schedule_to_start: Any = UNSET,
        concurrency: Any = UNSET,
        isolation: Any = UNSET,
        kill_grace: Any = UNSET,
        dead_letter_replay: Any = UNSET,
    ) -> JobHandle:
        """Enqueue one job with per-call overrides of the task's options.

        Overrides are validated here (``ConfigError``) and merged over the task's
        options: queue defaults -> task -> call, field by field.

        Args:
            args: positional arguments of the body.
            kwargs: keyword arguments of the body.
            delay: wait this long before the job is ready (a duration; 0/None = now).
            run_at: the job is ready at this time (datetime or epoch seconds).
            timeout: per-attempt bound (``None`` = no limit).
            priority: higher runs first within a queue.
            queue: the queue to put the job on.
            max_retries: retries after the first attempt.
            max_attempts: attempts including the first.
            retry_backoff: first retry delay.
            retry_backoff_kind: ``"exponential"`` or ``"fixed"``.
            retry_coefficient: growth factor.
            retry_max_delay: cap on a delay.
            retry_jitter: subtractive jitter fraction.
            retry: a whole RetryPolicy.
            retry_on: exception classes to retry (whitelist).
            dont_retry_on: exception classes never retried.
            non_retryable: exception class names never retried.
            heartbeat: max silence between heartbeats (>= 1 s).
            schedule_to_start: max wait from ready to claimed (>= 1 s).
            concurrency: a Concurrency limit.
            isolation: ``"thread"`` or ``"process"``.
            kill_grace: SIGTERM -> SIGKILL grace for process isolation.
            dead_letter_replay: a Replay setting.

        Returns:
            The handle of the new job.
        """
        spec = build_spec(
            is_async=self.is_async,
            queue=queue,
            max_retries=max_retries,
            max_attempts=max_attempts,
            retry_backoff=retry_backoff,
            retry_backoff_kind=retry_backoff_kind,
            retry_coefficient=retry_coefficient,
            retry_max_delay=retry_max_delay,
            retry_jitter=retry_jitter,
            retry=retry,
            retry_on=retry_on,
            dont_retry_on=dont_retry_on,
            non_retryable=non_retryable,
            timeout=timeout,
            heartbeat=heartbeat,
            schedule_to_start=schedule_to_start,
            concurrency=concurrency,
            isolation=isolation,
            kill_grace=kill_grace,
            dead_letter_replay=dead_letter_replay,
            priority=priority,
        )
        delay_ms = _check_delay(delay)
        run_at_ms = _check_run_at(run_at)
        args_t, kwargs_d = _check_args(args, kwargs)
        fields_ = self._job_fields(self.spec, spec)
        policy = self.policy.merged(spec.policy)
        job = self._make(
            args_t,
            kwargs_d,
            fields_,
            None,
            policy,
            options=call_options_json(spec),
            delay_ms=delay_ms,
            run_at=run_at_ms,
        )
        return self._owner._submit_one(job)

    def map(self, arg_tuples: Iterable[Any]) -> list[JobHandle]:
        """Enqueue one job per element (a tuple of positional arguments) in one batch.

        Raises:
            SerializationError: an element cannot be serialized (nothing is written).
        """
        jobs = [
            self._make(
                tuple(a) if isinstance(a, (tuple, list)) else (a,),
                {},
                self._template,
                self._fixed_lost_delay,
                self.policy,
            )
            for a in arg_tuples
        ]
        return self._owner._submit_many(jobs)

    def __repr__(self) -> str:
        return f"<Task {self.name!r} queue={self.queue_name!r}>"


def _check_args(args: Any, kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(args, (str, bytes)) or not isinstance(args, Iterable):
        raise _invalid("args", args, "a tuple or list of positional arguments")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise _invalid("kwargs", kwargs, "a dict with string keys, or None")
    return tuple(args), kwargs


# --------------------------------------------------------------------------- JobHandle


class JobHandle:
    """A reference to one enqueued job.

    Attributes:
        id: the job id.
    """

    __slots__ = ("id", "_queue")

    def __init__(self, queue: Queue, job_id: str) -> None:
        self.id = job_id
        self._queue = queue

    def _record(self) -> JobRecord:
        from queue_core.errors import NotFound

        rec = self._queue.storage().get_job(self.id)
        if rec is None:
            raise NotFound(f"no job with id {self.id!r}")
        return rec

    def status(self) -> JobState:
        """The job's current state."""
        return self._record().state

    def info(self) -> JobInfo:
        """A snapshot of the job: state, reason, attempts, result and timestamps."""
        rec = self._record()
        result = None
        if rec.result is not None and rec.state is JobState.SUCCEEDED:
            result = self._queue.serializer.loads_result(rec.result)
        return JobInfo(
            id=rec.id,
            state=rec.state,
            reason=rec.reason,
            task_name=rec.task_name,
            queue=rec.queue,
            attempts=rec.attempts,
            max_attempts=rec.max_attempts,
            result=result,
            error=rec.error.message if rec.error else None,
            error_class=rec.error.error_class if rec.error else None,
            priority=rec.priority,
            enqueued_at=dt_from_ms(rec.enqueued_at),
            run_at=dt_from_ms(rec.run_at),
            started_at=dt_from_ms(rec.started_at),
            finished_at=dt_from_ms(rec.finished_at),
            replay_of=rec.replay_of,
            dead_id=rec.dead_id,
        )

    def attempts(self) -> list[AttemptRecord]:
        """The records of every attempt so far, oldest first."""
        return self._queue.storage().list_attempts(self.id)

    def cancel(self) -> JobState:
        """Cancel the job: a queued job ends at once, a running one is asked to stop."""
        return self._queue.storage().cancel(self.id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job to finish and return its value.

        Args:
            timeout: seconds to wait; ``None`` waits as long as it takes.

        Raises:
            JobFailed: the job is dead; ``.dead`` is its dead-letter entry.
            JobCancelled: the job was cancelled.
            JobSkipped: the job was skipped at enqueue.
            TimeoutError: the job has not finished within ``timeout``.
        """
        end = None if timeout is None else time.monotonic() + timeout
        pause = 0.002
        while True:
            rec = self._record()
            if rec.state.finished:
                return self._value(rec)
            now = time.monotonic()
            if end is not None and now >= end:
                raise TimeoutError(
                    f"job {self.id} has not finished within {timeout} s (state {rec.state})"
                )
            wait = pause if end is None else min(pause, max(0.0, end - now))
            time.sleep(wait)
            pause = min(pause * 1.5, 0.1)

    def _value(self, rec: JobRecord) -> Any:
        if rec.state is JobState.SUCCEEDED:
            if rec.result is None:
                return None
            return self._queue.serializer.loads_result(rec.result)
        if rec.state is JobState.DEAD:
            dead = self._queue.dead_letter(rec.dead_id) if rec.dead_id else None
            err = rec.error
            detail = f": {err.error_class}: {err.message}" if err else ""
            raise JobFailed(
                f"job {self.id} ({rec.task_name}) is dead ({rec.reason}){detail}",
                job_id=self.id,
                dead=dead,
            )
        if rec.state is JobState.SKIPPED:
            raise JobSkipped(f"job {self.id} was skipped ({rec.reason})", job_id=self.id)
        raise JobCancelled(f"job {self.id} ended {rec.state} ({rec.reason})", job_id=self.id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<JobHandle {self.id}>"
