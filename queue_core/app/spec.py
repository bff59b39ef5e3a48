"""The validated options of a task or of one call (:class:`TaskSpec`), built from
:class:`~queue_core.app.options.TaskOptions` by :func:`build_spec`, and the per-call
overrides a worker needs (:func:`call_options_json`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from queue_core.app.control import check_debounce, check_rate_limit
from queue_core.app.options import (
    TASK_OPTIONS,
    UNSET,
    TaskOptions,
    _check_min_duration,
    _reject_unknown,
    check_concurrency,
    check_isolation,
    check_name,
    check_priority,
    check_replay,
    check_timeout,
    check_unique_for,
    check_unique_key,
    fq_name,
)
from queue_core.records.base import Record
from queue_core.records.durations import parse_duration, to_ms
from queue_core.records.errors import ConfigError
from queue_core.rules import RetryPolicy, policy_from_options, validate_exception_classes

__all__ = ["TaskSpec", "build_spec", "call_options_json"]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class TaskSpec(Record):
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
    unique_key: Any = UNSET
    unique_for: Any = UNSET
    rate_limit: Any = UNSET
    debounce: Any = UNSET
    """``(seconds, max seconds, key)`` (:func:`~queue_core.app.control.check_debounce`)."""


def build_spec(*, is_async: bool, options: TaskOptions | None = None) -> TaskSpec:
    """Validate task options (decorator or per-call); raise ConfigError on the first bad one.

    Raises:
        TypeError: an option that is not one of :class:`TaskOptions`.
        ConfigError: a bad value or conflicting options.
    """
    opts: dict[str, Any] = dict(options) if options else {}
    _reject_unknown(opts, TASK_OPTIONS, "task options")

    def get(name: str) -> Any:
        return opts.get(name, UNSET)

    policy = _policy(get)
    r_on, d_on = _exception_lists(get("retry_on"), get("dont_retry_on"))
    iso = _isolation(get("isolation"), is_async=is_async)
    queue, timeout, heartbeat = get("queue"), get("timeout"), get("heartbeat")
    schedule_to_start, concurrency = get("schedule_to_start"), get("concurrency")
    kill_grace = get("kill_grace")
    dead_letter_replay, priority = get("dead_letter_replay"), get("priority")
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
        **_limits(get),
    )


def check_debounce_alone(unique_key: Any, debounce: Any) -> None:
    """Refuse ``debounce`` with ``unique_key`` (either ``UNSET``/``None`` passes), in one
    set of options and in a task's merged with a call's.

    Raises:
        ConfigError: ``conflicting_options``.
    """
    if unique_key in (UNSET, None) or debounce in (UNSET, None):
        return
    raise ConfigError(
        "conflicting options: debounce with unique_key — a debounced task already "
        "keeps one queued job per debounce_key; drop unique_key",
        code="conflicting_options",
        field="debounce",
        value=debounce,
    )


def _limits(get: Callable[[str], Any]) -> dict[str, Any]:
    """``unique_key``, ``unique_for``, ``rate_limit`` and the debounce options validated
    (``UNSET`` when not given)."""
    key, unique_for, rate = get("unique_key"), get("unique_for"), get("rate_limit")
    debounce = [get(n) for n in ("debounce", "debounce_max", "debounce_key")]
    given = any(d is not UNSET for d in debounce)
    check_debounce_alone(key, debounce[0])
    return {
        "unique_key": UNSET if key is UNSET else check_unique_key(key),
        "unique_for": UNSET if unique_for is UNSET else check_unique_for(unique_for),
        "rate_limit": UNSET if rate is UNSET else check_rate_limit(rate),
        "debounce": (
            check_debounce(*(None if d is UNSET else d for d in debounce)) if given else UNSET
        ),
    }


def _given(v: Any) -> Any:
    return None if v is UNSET else v


def _policy(get: Callable[[str], Any]) -> RetryPolicy:
    """The retry policy of the flat retry options (or of ``retry``)."""
    return policy_from_options(
        max_retries=_given(get("max_retries")),
        max_attempts=_given(get("max_attempts")),
        retry_backoff=_given(get("retry_backoff")),
        retry_backoff_kind=_given(get("retry_backoff_kind")),
        retry_coefficient=_given(get("retry_coefficient")),
        retry_max_delay=_given(get("retry_max_delay")),
        retry_jitter=_given(get("retry_jitter")),
        non_retryable=_given(get("non_retryable")),
        retry=_given(get("retry")),
    )


def _exception_lists(
    retry_on: Any, dont_retry_on: Any
) -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """``retry_on`` / ``dont_retry_on`` validated: a whitelist or a blacklist, not both."""
    if retry_on not in (UNSET, None) and dont_retry_on not in (UNSET, None):
        raise ConfigError(
            f"conflicting options: 'retry_on' ({retry_on!r}) and 'dont_retry_on' "
            f"({dont_retry_on!r}) — give a whitelist or a blacklist, not both",
            code="conflicting_options",
            field="retry_on",
            value=(retry_on, dont_retry_on),
        )
    r_on = validate_exception_classes(_given(retry_on), field="retry_on")
    d_on = validate_exception_classes(_given(dont_retry_on), field="dont_retry_on")
    return r_on, d_on


def _isolation(isolation: Any, *, is_async: bool) -> Any:
    """``isolation`` validated (``UNSET`` when not given); process applies to sync bodies."""
    iso = UNSET if isolation is UNSET else check_isolation(isolation)
    if iso == "process" and is_async:
        raise ConfigError(
            "conflicting options: isolation='process' applies to sync bodies only; an "
            "async def body runs on the worker's event loop — drop isolation or make it sync",
            code="conflicting_options",
            field="isolation",
            value=isolation,
        )
    return iso


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
