"""Tasks: ``@queue.task``, its options (declared once, in :class:`TaskOptions`), and
per-call overrides.

Every option is validated when it is given -- decorator options at decoration, per-call
overrides at :meth:`Task.apply` -- and every bad value is a
:class:`~queue_core.errors.ConfigError` naming the option, the value and what is
accepted. The arguments of a call are bound against the body's signature at
:meth:`Task.delay` / :meth:`Task.apply` / :meth:`Task.map`: a call that does not fit is a
``TypeError`` there, not a failed attempt on a worker.
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
import os
import random
import sys
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, ParamSpec, TypedDict, TypeVar

from typing_extensions import Unpack

from queue_core.durations import parse_duration, to_ms
from queue_core.errors import ConfigError
from queue_core.handle import JobHandle
from queue_core.model import NewJob
from queue_core.policy import (
    BackoffKind,
    RetryPolicy,
    lost_delay_ms,
    merge_policies,
    policy_from_options,
    validate_exception_classes,
)

if TYPE_CHECKING:
    from queue_core.queue import Queue

__all__ = [
    "AsyncTask",
    "CallOptions",
    "Concurrency",
    "JobHandle",
    "Replay",
    "Task",
    "TaskOptions",
]

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


Duration = float | str | timedelta
"""A duration: seconds as a number, a Go-style string (``"90s"``, ``"1h30m"``) or a
``timedelta``."""


class TaskOptions(TypedDict, total=False):
    """The task options of SPEC §2, declared once.

    ``@queue.task(**options)`` and ``Task.apply(..., **options)`` take exactly these
    keywords (``apply`` also takes ``delay`` and ``run_at``, see :class:`CallOptions`);
    an option that is not given keeps the task's value, then the queue's default.
    Meaning and defaults:

    * ``queue`` -- queue name (``"default"``).
    * ``max_retries`` / ``max_attempts`` -- retries after the first attempt / attempts
      including the first; give one, not both (0 retries).
    * ``retry_backoff`` -- first retry delay (1 s).
    * ``retry_backoff_kind`` -- ``"exponential"`` or ``"fixed"`` (exponential).
    * ``retry_coefficient`` -- growth factor of exponential backoff (2.0).
    * ``retry_max_delay`` -- cap on any delay (10 min).
    * ``retry_jitter`` -- subtractive jitter fraction in [0, 1] (0.1).
    * ``retry`` -- a whole :class:`~queue_core.RetryPolicy` instead of the flat options.
    * ``retry_on`` / ``dont_retry_on`` -- exception classes: whitelist / blacklist.
    * ``non_retryable`` -- exception class *names* never retried.
    * ``timeout`` -- bound on one attempt; ``None`` = no limit (the queue's
      ``default_timeout``, else 300 s).
    * ``heartbeat`` -- max silence between ``ctx.heartbeat()`` calls, >= 1 s (off).
    * ``schedule_to_start`` -- max wait between ready and claimed, >= 1 s (off).
    * ``concurrency`` -- a :class:`Concurrency` limit across all workers (none).
    * ``isolation`` -- ``"thread"`` or ``"process"`` for sync bodies (the worker's
      default, thread).
    * ``kill_grace`` -- SIGTERM -> SIGKILL grace for process isolation (10 s).
    * ``dead_letter_replay`` -- a :class:`Replay` setting (off).
    * ``priority`` -- higher runs first within a queue (0).
    """

    queue: str
    max_retries: int | None
    max_attempts: int | None
    retry_backoff: Duration | None
    retry_backoff_kind: BackoffKind | None
    retry_coefficient: float | None
    retry_max_delay: Duration | None
    retry_jitter: float | None
    retry: RetryPolicy | None
    retry_on: Iterable[type[BaseException]] | type[BaseException] | None
    dont_retry_on: Iterable[type[BaseException]] | type[BaseException] | None
    non_retryable: Iterable[str] | None
    timeout: Duration | None
    heartbeat: Duration | None
    schedule_to_start: Duration | None
    concurrency: Concurrency | int | None
    isolation: Literal["thread", "process"]
    kill_grace: Duration
    dead_letter_replay: Replay | None
    priority: int


class CallOptions(TaskOptions, total=False):
    """:class:`TaskOptions` plus what only one call can say: when the job is ready.

    * ``delay`` -- wait this long before the job is ready (a duration; 0/None = now).
    * ``run_at`` -- the job is ready at this time (a datetime or epoch seconds).
    """

    delay: Duration | None
    run_at: datetime | float | None


TASK_OPTIONS: Final[frozenset[str]] = frozenset(TaskOptions.__annotations__)
_CALL_ONLY: Final[frozenset[str]] = frozenset({"delay", "run_at"})


def _reject_unknown(options: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        import difflib

        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(allowed), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise TypeError(
            f"{where} got unexpected keyword argument(s) {', '.join(hints)}; "
            f"options are: {', '.join(sorted(allowed))}"
        )


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


def build_spec(*, is_async: bool, options: TaskOptions | None = None) -> TaskSpec:
    """Validate task options (decorator or per-call); raise ConfigError on the first bad one.

    Raises:
        TypeError: an option that is not one of :class:`TaskOptions`.
        ConfigError: a bad value or conflicting options.
    """
    opts: dict[str, Any] = dict(options) if options else {}
    _reject_unknown(opts, TASK_OPTIONS, "task options")

    def given(v: Any) -> Any:
        return None if v is UNSET else v

    def get(name: str) -> Any:
        return opts.get(name, UNSET)

    queue, timeout, heartbeat = get("queue"), get("timeout"), get("heartbeat")
    schedule_to_start, concurrency = get("schedule_to_start"), get("concurrency")
    isolation, kill_grace = get("isolation"), get("kill_grace")
    dead_letter_replay, priority = get("dead_letter_replay"), get("priority")
    retry_on, dont_retry_on = get("retry_on"), get("dont_retry_on")

    policy = policy_from_options(
        max_retries=given(get("max_retries")),
        max_attempts=given(get("max_attempts")),
        retry_backoff=given(get("retry_backoff")),
        retry_backoff_kind=given(get("retry_backoff_kind")),
        retry_coefficient=given(get("retry_coefficient")),
        retry_max_delay=given(get("retry_max_delay")),
        retry_jitter=given(get("retry_jitter")),
        non_retryable=given(get("non_retryable")),
        retry=given(get("retry")),
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


def call_signature(func: Callable[..., Any]) -> inspect.Signature | None:
    """The signature a call of ``func`` binds against: its own, minus the ``ctx``
    parameter the worker injects. ``None`` when it cannot be inspected."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    if body_takes_ctx(func):
        sig = sig.replace(parameters=[p for n, p in sig.parameters.items() if n != "ctx"])
    return sig


def _positional_fast_path(sig: inspect.Signature | None) -> tuple[int, float]:
    """``(min, max)`` counts of positional-only calls that certainly bind.

    A call with no keyword arguments and a positional count in this range fits the
    signature without :meth:`inspect.Signature.bind` (the common ``.delay(a, b)``); any
    other call is bound in full. ``(1, 0)`` (an empty range) when there is no fast path.
    """
    if sig is None:
        return 0, math.inf
    required = 0
    most: float = 0
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            most += 1
            if p.default is p.empty:
                required = int(most)
        elif p.kind is p.VAR_POSITIONAL:
            most = math.inf
        elif p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            return 1, 0
    return required, most


def _describe(sig: inspect.Signature) -> str:
    """``(a: int, b: str = 'x', *, flag: bool)``, string annotations shown as written."""
    parts: list[str] = []
    kw_marker = False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not kw_marker:
            parts.append("*")
            kw_marker = True
        elif p.kind is p.VAR_POSITIONAL:
            kw_marker = True
        star = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        text = star + p.name
        if p.annotation is not p.empty:
            ann = p.annotation
            text += ": " + (ann if isinstance(ann, str) else inspect.formatannotation(ann))
        if p.default is not p.empty:
            text += f" = {p.default!r}"
        parts.append(text)
        if p.kind is p.POSITIONAL_ONLY and (
            (nxt := _next_kind(sig, p.name)) is None or nxt is not p.POSITIONAL_ONLY
        ):
            parts.append("/")
    return f"({', '.join(parts)})" if parts else "no arguments"


def _next_kind(sig: inspect.Signature, name: str) -> Any:
    names = list(sig.parameters)
    i = names.index(name) + 1
    return sig.parameters[names[i]].kind if i < len(names) else None


def default_task_name(func: Callable[..., Any]) -> str:
    """``module.qualname`` of ``func``, with the module a worker will import.

    A function declared in a script run as ``python tasks.py`` lives in ``__main__``,
    a name no worker can import; like celery and rq, the task takes the module name
    the script has when imported (``tasks``): from ``__main__.__spec__`` when it was
    run with ``python -m pkg.tasks``, else from the file name. Only a ``__main__``
    without a file (a REPL, ``python -c``) keeps ``__main__``: such tasks can run only
    in a worker of the same process (``queue.run_worker``).

    Raises:
        ConfigError: the script's file name is not an importable module name.
    """
    module = getattr(func, "__module__", None) or "__main__"
    qualname = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", func))
    if module in _MAIN_NAMES:  # __mp_main__: the script imported again in a spawned child
        module = _main_module_name(module, qualname)
    return f"{module}.{qualname}"


_MAIN_NAMES: Final = ("__main__", "__mp_main__")


def _main_module_name(module: str, qualname: str) -> str:
    main = sys.modules.get(module)
    spec = getattr(main, "__spec__", None)
    spec_name = getattr(spec, "name", None)
    if isinstance(spec_name, str) and spec_name and spec_name not in _MAIN_NAMES:
        # python -m pkg.tasks: the spec names the module (a package's __main__ too).
        return spec_name
    file = getattr(main, "__file__", None)
    if not isinstance(file, str) or not file:
        return module
    stem = Path(file).stem
    if not stem.isidentifier():
        raise ConfigError(
            f"invalid task name for {qualname!r}: it is declared in the script {file!r}, "
            f"run as __main__, and {stem!r} is not an importable module name, so no worker "
            "could import the task — rename the file (e.g. tasks.py) or pass name=",
            code="invalid_option",
            field="name",
            value=file,
        )
    return stem


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
    enqueue jobs for workers; :meth:`delay_async` and :meth:`apply_async` do the same
    from an event loop without blocking it.

    Typed: ``P`` is the body's parameters and ``R`` its result, so a type checker checks
    the arguments of :meth:`delay` and knows that ``handle.result()`` returns ``R``
    (:meth:`delay` returns a ``JobHandle[R]``). An ``async def`` body returning ``T``
    gives an :class:`AsyncTask` ``[P, T]``: its jobs' results are ``T``.

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
        self.signature: inspect.Signature | None = call_signature(func)
        """The body's signature without the injected ``ctx`` parameter (what a call
        binds against), or ``None`` when it cannot be inspected."""
        self._fast_min, self._fast_max = _positional_fast_path(self.signature)
        self.queue_name: str = _pick(UNSET, spec.queue, owner.default_queue)
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
            "queue": _pick(call.queue, task.queue, owner.default_queue),
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

    def check_arguments(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], method: str = "delay"
    ) -> None:
        """Bind ``args``/``kwargs`` against the body's signature (without ``ctx``).

        Raises:
            TypeError: naming the task, what does not fit and the parameters it takes.
        """
        sig = self.signature
        if sig is None:
            return
        try:
            sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(
                f"{self.__name__}.{method}(): {exc} — task {self.name!r} takes "
                f"{_describe(sig)}"
            ) from None

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

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Enqueue one job with these arguments and the task's options.

        Raises:
            TypeError: the arguments do not fit the body's signature (nothing is written).
            SerializationError: an argument cannot be serialized (nothing is written).
        """
        if kwargs or not self._fast_min <= len(args) <= self._fast_max:
            self.check_arguments(args, kwargs, "delay")
        job = self._make(args, kwargs, self._template, self._fixed_lost_delay, self.policy)
        return self._owner._submit_one(job)

    def apply(
        self,
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Unpack[CallOptions],
    ) -> JobHandle[R]:
        """Enqueue one job with per-call overrides of the task's options.

        Overrides are validated here (``ConfigError``) and merged over the task's
        options: queue defaults -> task -> call, field by field. The options are those
        of :class:`TaskOptions` (``timeout``, ``priority``, ``queue``, ``max_retries``,
        ...) plus ``delay`` and ``run_at`` (:class:`CallOptions`).

        Args:
            args: positional arguments of the body.
            kwargs: keyword arguments of the body.
            **options: per-call overrides; see :class:`CallOptions`.

        Returns:
            The handle of the new job.

        Raises:
            TypeError: the arguments do not fit the body's signature, or an unknown option.
            ConfigError: a bad option value.
            SerializationError: an argument cannot be serialized (nothing is written).
        """
        opts: dict[str, Any] = dict(options)
        _reject_unknown(opts, TASK_OPTIONS | _CALL_ONLY, f"{self.name}.apply()")
        delay = opts.pop("delay", None)
        run_at = opts.pop("run_at", None)
        spec = build_spec(is_async=self.is_async, options=opts)  # type: ignore[arg-type]
        delay_ms = _check_delay(delay)
        run_at_ms = _check_run_at(run_at)
        args_t, kwargs_d = _check_args(args, kwargs)
        self.check_arguments(args_t, kwargs_d, "apply")
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

    def map(self, arg_tuples: Iterable[Any]) -> list[JobHandle[R]]:
        """Enqueue one job per element (a tuple of positional arguments) in one batch.

        Raises:
            TypeError: an element does not fit the body's signature (nothing is written).
            SerializationError: an element cannot be serialized (nothing is written).
        """
        jobs = []
        for a in arg_tuples:
            args = tuple(a) if isinstance(a, (tuple, list)) else (a,)
            if not self._fast_min <= len(args) <= self._fast_max:
                self.check_arguments(args, {}, "map")
            jobs.append(
                self._make(args, {}, self._template, self._fixed_lost_delay, self.policy)
            )
        return self._owner._submit_many(jobs)

    # ------------------------------------------------------------------ async producer

    async def delay_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """:meth:`delay` for event loops: the storage write runs in a worker thread, so
        the loop keeps running (FastAPI endpoints, aiohttp handlers, ...).

        Arguments are checked and serialized before the thread starts: a call that does
        not fit raises ``TypeError`` / ``SerializationError`` at once, nothing written.
        """
        from queue_core._aio import run_sync

        if kwargs or not self._fast_min <= len(args) <= self._fast_max:
            self.check_arguments(args, kwargs, "delay_async")
        job = self._make(args, kwargs, self._template, self._fixed_lost_delay, self.policy)
        return await run_sync(self._owner._submit_one, job)

    async def apply_async(
        self,
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Unpack[CallOptions],
    ) -> JobHandle[R]:
        """:meth:`apply` for event loops (the storage write runs in a worker thread).

        Raises:
            TypeError, ConfigError, SerializationError: as :meth:`apply`.
        """
        from queue_core._aio import run_sync

        return await run_sync(self.apply, args, kwargs, **options)

    def __repr__(self) -> str:
        return f"<Task {self.name!r} queue={self.queue_name!r}>"


class AsyncTask(Task[P, R]):
    """A :class:`Task` whose body is ``async def ... -> R``: calling it inline returns
    the coroutine; its jobs' results (``handle.result()``) are ``R``."""

    def __call__(  # type: ignore[override]
        self, *args: P.args, **kwargs: P.kwargs
    ) -> Coroutine[Any, Any, R]:
        """Call the body inline: returns its coroutine (await it)."""
        return super().__call__(*args, **kwargs)  # type: ignore[return-value]


def _check_args(args: Any, kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(args, (str, bytes)) or not isinstance(args, Iterable):
        raise _invalid("args", args, "a tuple or list of positional arguments")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise _invalid("kwargs", kwargs, "a dict with string keys, or None")
    return tuple(args), kwargs
