"""Tasks: ``@queue.task``, its options (declared once, in :class:`TaskOptions`), and
per-call overrides.

Every option is validated when it is given -- decorator options at decoration, per-call
overrides at :meth:`Task.apply` -- and every bad value is a
:class:`~queue_core.records.errors.ConfigError` naming the option, the value and what is
accepted. The arguments of a call are bound against the body's signature at
:meth:`Task.delay` / :meth:`Task.apply` / :meth:`Task.map`: a call that does not fit is a
``TypeError`` there, not a failed attempt on a worker.
"""

from __future__ import annotations

import inspect
import math
import random
import sys
from collections.abc import Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Generic, ParamSpec, Protocol, TypeVar, overload

from queue_core.app.control import call_keys, control_fields
from queue_core.app.handle import JobHandle

# The options and the spec builder live in queue_core.app.options / queue_core.app.spec; these
# names are re-exported so ``from queue_core.app.task import X`` keeps working.
from queue_core.app.options import _CALL_ONLY as _CALL_ONLY
from queue_core.app.options import DEFAULT_KILL_GRACE as DEFAULT_KILL_GRACE
from queue_core.app.options import ISOLATIONS as ISOLATIONS
from queue_core.app.options import TASK_OPTIONS as TASK_OPTIONS
from queue_core.app.options import UNSET as UNSET
from queue_core.app.options import CallOptions as CallOptions
from queue_core.app.options import Concurrency as Concurrency
from queue_core.app.options import Duration as Duration
from queue_core.app.options import Replay as Replay
from queue_core.app.options import TaskOptions as TaskOptions
from queue_core.app.options import (
    _check_delay,
    _check_run_at,
    _invalid,
    _reject_unknown,
    concurrency_slot_key,
    unique_key_of,
)
from queue_core.app.options import check_concurrency as check_concurrency
from queue_core.app.options import check_isolation as check_isolation
from queue_core.app.options import check_name as check_name
from queue_core.app.options import check_priority as check_priority
from queue_core.app.options import check_replay as check_replay
from queue_core.app.options import check_timeout as check_timeout
from queue_core.app.options import fq_name as fq_name
from queue_core.app.plain_calls import PlainCalls
from queue_core.app.spec import TaskSpec as TaskSpec
from queue_core.app.spec import _ms, _pick, check_debounce_alone
from queue_core.app.spec import build_spec as build_spec
from queue_core.app.spec import call_options_json as call_options_json
from queue_core.records.errors import ConfigError
from queue_core.records.job_factory import plain_job_factory
from queue_core.records.jobs import NewJob
from queue_core.rules import RetryPolicy, lost_delay_ms, merge_policies
from queue_core.storage.job_ids import new_job_id as new_job_id
from queue_core.storage.job_ids import new_job_ids

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from queue_core.app.owner import TaskOwner

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


def _names(names: Sequence[str]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _misfits(sig: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """Everything wrong with a call (``inspect`` reports only the first problem): too
    many positional arguments, unexpected keywords, values given twice, missing ones."""
    params = list(sig.parameters.values())
    kinds = inspect.Parameter
    by_position = (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in by_position]
    var_args = any(p.kind is kinds.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind is kinds.VAR_KEYWORD for p in params)
    by_name = {p.name: p for p in params}
    filled = {p.name for p in positional[: len(args)]}
    named = {
        k for k in kwargs
        if k in by_name and by_name[k].kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)
    }  # fmt: skip
    problems = []
    if len(args) > len(positional) and not var_args:
        problems.append(
            f"too many positional arguments ({len(args)} given, it takes {len(positional)})"
        )
    unexpected = [k for k in kwargs if k not in named and not var_kw]
    if unexpected:
        what = (
            "an unexpected keyword argument"
            if len(unexpected) == 1
            else ("unexpected keyword arguments")
        )
        problems.append(f"got {what} {_names(unexpected)}")
    twice = [k for k in kwargs if k in filled and k in named]
    if twice:
        problems.append(f"got multiple values for {_names(twice)}")
    missing = [
        p.name for p in params
        if p.default is p.empty and p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
        and p.name not in filled and p.name not in named
    ]  # fmt: skip
    if missing:
        one = len(missing) == 1
        problems.append(
            f"missing {'a required argument' if one else 'required arguments'}: {_names(missing)}"
        )
    return problems


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
        self, owner: TaskOwner, func: Callable[P, R], *, name: str, spec: TaskSpec
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
        self._calls = PlainCalls(
            owner,
            plain_job_factory(self._template),
            self.policy,
            (self._fast_min, self._fast_max),
            self.check_arguments,
        )
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
        unique_key = _pick(call.unique_key, task.unique_key, None)
        debounce = _pick(call.debounce, task.debounce, None)
        # a call's option beside the task's (a checked debounce: (seconds, max, key))
        check_debounce_alone(unique_key, None if debounce is None else debounce[0])
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
            # a key function is kept here and applied per call by _make
            "concurrency_key": None if conc is None else (conc.key or self.name),
            "concurrency_limit": None if conc is None else conc.limit,
            "concurrency_skip": conc is not None and conc.behavior == "skip",
            "unique_key": unique_key,
            "unique_for_ms": _ms(_pick(call.unique_for, task.unique_for, None)),
            **control_fields(
                self.name,
                None if conc is None else conc.behavior,
                _pick(call.rate_limit, task.rate_limit, None),
                debounce,
            ),
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
            why = "; ".join(_misfits(sig, args, kwargs)) or str(exc)
            raise TypeError(
                f"{self.__name__}.{method}(): {why} — task {self.name!r} takes {_describe(sig)}"
            ) from None

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the body inline, in this process, like a plain function call."""
        if self.takes_ctx and "ctx" not in kwargs:
            from queue_core.app.context import JobContext

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
        job_id: str | None = None,
    ) -> NewJob:
        payload = self._owner.serializer.dumps_payload(args, kwargs)
        key = fields_["concurrency_key"]
        if key is not None and key.__class__ is not str:
            slot = concurrency_slot_key(key, self.name, args, kwargs)
            fields_ = {**fields_, "concurrency_key": slot}
        if lost is None:
            lost = (
                self._calls.lost_delay()
                if policy is self.policy
                else lost_delay_ms(policy, 1, random.random)
            )
        key = fields_["unique_key"]
        if key is not None:  # scoped to the task: two tasks may use the same key text
            key = f"{self.name}:{unique_key_of(key, args, kwargs)}"
            fields_ = {**fields_, "unique_key": key}
        fields_ = call_keys(self.name, fields_, args, kwargs)
        return NewJob(
            id=job_id or new_job_id(),
            payload=payload,
            lost_delay_ms=lost,
            options=options,
            delay_ms=delay_ms if fields_["debounce_ms"] is None else fields_["debounce_ms"],
            run_at=run_at,
            **fields_,
        )

    def tick_job(self, args: tuple[Any, ...], kwargs: dict[str, Any], run_at: int) -> NewJob:
        """The job of a call with the task's own options, ready at ``run_at`` (epoch ms):
        what a periodic tick enqueues."""
        return self._make(
            args, kwargs, self._template, self._calls.fixed_lost, self.policy, run_at=run_at
        )

    def _plain(self, args: tuple[Any, ...], kwargs: dict[str, Any], job_id: str) -> NewJob:
        """The job of a call with the task's own options (``delay``, ``map``)."""
        if self._calls.factory is None:  # a unique key or a concurrency key function
            return self._make(
                args, kwargs, self._template, self._calls.fixed_lost, self.policy, job_id=job_id
            )
        return self._calls.job(args, kwargs, job_id)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Enqueue one job with these arguments and the task's options.

        Raises:
            TypeError: the arguments do not fit the body's signature (nothing is written).
            SerializationError: an argument cannot be serialized (nothing is written).
        """
        if kwargs or not self._fast_min <= len(args) <= self._fast_max:
            self.check_arguments(args, kwargs, "delay")
        handle = self._calls.delay(args, kwargs)  # a storage taking template rows
        if handle is not None:
            return handle
        return self._owner._submit_one(self._plain(args, kwargs, new_job_id()))

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
        args_t, kwargs_d = check_args(args, kwargs)
        self.check_arguments(args_t, kwargs_d, "apply")
        fields_ = self._job_fields(self.spec, spec)
        if fields_["debounce_key"] is not None and (delay_ms or run_at_ms is not None):
            raise ConfigError(
                f"conflicting options: delay/run_at on a debounced task ({self.name}) — its "
                "run time is the debounce's (now + debounce, at most debounce_max after the "
                "burst's first call)",
                code="conflicting_options",
                field="delay" if delay_ms else "run_at",
                value=delay if delay_ms else run_at,
            )
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
        items = arg_tuples if isinstance(arg_tuples, list) else list(arg_tuples)
        handles = self._calls.map(items)  # a storage taking template rows
        if handles is not None:
            return handles
        if self._calls.factory is not None:
            return self._owner._submit_many(self._calls.jobs(items))
        jobs = []
        for a, job_id in zip(items, new_job_ids(len(items)), strict=True):
            args = tuple(a) if isinstance(a, (tuple, list)) else (a,)
            if not self._fast_min <= len(args) <= self._fast_max:
                self.check_arguments(args, {}, "map")
            jobs.append(self._plain(args, {}, job_id))
        return self._owner._submit_many(jobs)

    # ------------------------------------------------------------------ async producer

    async def delay_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """:meth:`delay` for event loops: the storage write runs in a worker thread, so
        the loop keeps running (FastAPI endpoints, aiohttp handlers, ...).

        Arguments are checked and serialized before the thread starts: a call that does
        not fit raises ``TypeError`` / ``SerializationError`` at once, nothing written.
        """
        from queue_core.app._aio import run_sync

        if kwargs or not self._fast_min <= len(args) <= self._fast_max:
            self.check_arguments(args, kwargs, "delay_async")
        job = self._plain(args, kwargs, new_job_id())
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
        from queue_core.app._aio import run_sync

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


class TaskDecorator(Protocol):
    """What ``@queue.task(...)`` with options returns: a decorator that keeps the body's
    types (``Task[P, R]``, or ``AsyncTask[P, R]`` for an ``async def`` body)."""

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> AsyncTask[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


def check_args(args: Any, kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` / ``kwargs`` of a call (``apply``, ``periodic``) as a tuple and a dict, or
    ``ConfigError`` (``invalid_option``) naming the one of the wrong kind."""
    if isinstance(args, (str, bytes)) or not isinstance(args, Iterable):
        raise _invalid("args", args, "a tuple or list of positional arguments")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise _invalid("kwargs", kwargs, "a dict with string keys, or None")
    return tuple(args), kwargs
