"""A task's plain calls: ``delay`` and ``map`` with the task's own options.

A plain call (no per-call options, no unique key, no concurrency key function) differs
from its task's other plain calls only in id, payload and lost delay, so
:class:`PlainCalls` builds its job from the task's
:class:`~queue_core.records.job_factory.JobFactory`
and draws the lost delay from the policy's first delay computed once (the jitter itself is
:func:`~queue_core.rules.retry.jittered`, the rule every delay uses).

On a storage with :class:`~queue_core.storage.abilities.SupportsTemplateEnqueue` (SQLite,
PostgreSQL, Redis) :meth:`PlainCalls.map` and :meth:`PlainCalls.delay` hand it the task's
job once as the template and one ``(id, payload, lost_delay_ms)`` tuple per job instead of
a :class:`~queue_core.records.jobs.NewJob` per job. Arguments are bound and serialized
first: an element that does not fit raises ``TypeError`` (one that cannot be serialized
``SerializationError``) with nothing written. Header providers (which rewrite each job's
options) and eager mode take the ordinary path (:meth:`TaskOwner.template_sink` says so).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queue_core.app.handle import JobHandle
from queue_core.records.durations import to_ms
from queue_core.rules.decide import lost_delay_ms
from queue_core.rules.retry import jittered
from queue_core.storage.job_ids import new_job_id, new_job_ids

if TYPE_CHECKING:
    from queue_core.app.owner import TaskOwner
    from queue_core.records.job_factory import JobFactory
    from queue_core.records.jobs import NewJob
    from queue_core.rules.retry import RetryPolicy
    from queue_core.storage.abilities import SupportsTemplateEnqueue

__all__ = ["PlainCalls"]

CheckArguments = Callable[[tuple[Any, ...], dict[str, Any], str], None]


class PlainCalls:
    """The plain calls of one task (built once, with the task).

    Args:
        owner: the task's queue.
        factory: the job of a plain call but id, payload and lost delay, or ``None``
            when every call computes a field (a unique key, a concurrency key function):
            then :meth:`delay` and :meth:`map` return ``None`` and the task builds jobs
            itself.
        policy: the task's merged retry policy (its first delay is the lost delay).
        arity: the positional argument counts that need no binding check.
        check: binds ``(args, kwargs, method)`` against the body or raises ``TypeError``.
    """

    __slots__ = (
        "_base_s",
        "_check",
        "_high",
        "_jitter",
        "_low",
        "_owner",
        "_template",
        "factory",
        "fixed_lost",
    )

    def __init__(
        self,
        owner: TaskOwner,
        factory: JobFactory | None,
        policy: RetryPolicy,
        arity: tuple[int, float],
        check: CheckArguments,
    ) -> None:
        self._owner = owner
        self.factory = factory
        self.fixed_lost = lost_delay_ms(policy, 1, random.random) if policy.jitter == 0 else None
        """The lost delay of every plain job when the policy has no jitter."""
        self._base_s = policy.base_delay(1)
        self._jitter = policy.jitter
        self._low, self._high = arity
        self._check = check
        self._template: NewJob | None = None

    def lost_delay(self) -> int:
        """A plain job's lost delay: ``lost_delay_ms(policy, 1, random.random)`` without
        computing the base delay again."""
        if self.fixed_lost is not None:
            return self.fixed_lost
        return to_ms(jittered(self._base_s, self._jitter, random.random()))

    def job(self, args: tuple[Any, ...], kwargs: dict[str, Any], job_id: str) -> NewJob:
        """The job of one plain call (``factory`` must be set)."""
        assert self.factory is not None
        payload = self._owner.serializer.dumps_payload(args, kwargs)
        return self.factory(job_id, payload, self.lost_delay())

    def _args(self, item: Any) -> tuple[Any, ...]:
        args = tuple(item) if isinstance(item, (tuple, list)) else (item,)
        if not self._low <= len(args) <= self._high:
            self._check(args, {}, "map")
        return args

    def jobs(self, items: list[Any]) -> list[NewJob]:
        """The jobs of ``map(items)`` (``factory`` must be set)."""
        return [
            self.job(self._args(a), {}, job_id)
            for a, job_id in zip(items, new_job_ids(len(items)), strict=True)
        ]

    def _template_job(self) -> NewJob:
        job = self._template
        if job is None:
            assert self.factory is not None
            job = self._template = self.factory("", b"", 0)  # id, payload, lost delay: per job
        return job

    def sink(self) -> SupportsTemplateEnqueue | None:
        """The storage to hand this task's plain jobs to as template rows, or ``None``
        (every call computes a field, or the queue says the ordinary path)."""
        return None if self.factory is None else self._owner.template_sink()

    def map(self, items: list[Any]) -> list[JobHandle[Any]] | None:
        """Enqueue one job per element of ``items`` (a tuple or list of positional
        arguments, or one argument) as template rows; their handles, in order. ``None``
        when the ordinary path must take them."""
        sink = self.sink()
        if sink is None:
            return None
        dumps = self._owner.serializer.dumps_payload
        ids = new_job_ids(len(items))
        rows = [
            (job_id, dumps(self._args(a), {}), self.lost_delay())
            for a, job_id in zip(items, ids, strict=True)
        ]
        if rows:
            sink.enqueue_template(self._template_job(), rows)
        return [JobHandle(self._owner, job_id) for job_id in ids]

    def delay(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> JobHandle[Any] | None:
        """``task.delay(*args, **kwargs)`` (arguments already bound) as a template row, or
        ``None`` when the ordinary path must take it."""
        sink = self.sink()
        if sink is None:
            return None
        job_id = new_job_id()
        payload = self._owner.serializer.dumps_payload(args, kwargs)
        sink.enqueue_template(self._template_job(), [(job_id, payload, self.lost_delay())])
        return JobHandle(self._owner, job_id)
