"""``Task.map`` and ``Task.delay`` through :class:`~queue_core.storage.SupportsTemplateEnqueue`.

A plain task's jobs (no per-call options, no unique key, no concurrency key function)
differ only in id, payload and lost delay. On a storage with ``enqueue_template`` (SQLite,
Redis) :func:`map_template` and :func:`delay_template` hand it the task's job as the
template and one ``(id, payload, lost_delay_ms)`` tuple per job, instead of a
:class:`~queue_core.model.NewJob` per job.
Arguments are bound and serialized first, as in ``Task.map``: an element that does not
fit raises ``TypeError`` (one that cannot be serialized ``SerializationError``) with
nothing written. Header providers (which rewrite each job's options) and eager mode take
the ordinary path.
"""

from __future__ import annotations

import random
import sys
from typing import TYPE_CHECKING, Any

from queue_core.handle import JobHandle
from queue_core.jobbuild import new_job_id, new_job_ids
from queue_core.storage import SupportsTemplateEnqueue

if TYPE_CHECKING:
    from queue_core.model import NewJob
    from queue_core.queue import Queue
    from queue_core.task import Task

__all__ = ["delay_template", "map_template", "template_sink"]


def _sink_of(owner: Queue) -> SupportsTemplateEnqueue | None:
    """``owner``'s storage if it has ``enqueue_template`` (the protocol check, slow for a
    per-call path, is made once per storage)."""
    storage = owner._storage
    cached = owner.__dict__.get("_template_sink")
    if cached is None or cached[0] is not storage:
        cached = (storage, storage if isinstance(storage, SupportsTemplateEnqueue) else None)
        owner.__dict__["_template_sink"] = cached
    sink: SupportsTemplateEnqueue | None = cached[1]
    return sink


def template_sink(task: Task[Any, Any]) -> SupportsTemplateEnqueue | None:
    """The storage to hand ``task``'s plain jobs to, or ``None`` (ordinary path)."""
    owner = task._owner
    if (
        task._factory is None
        or owner._header_providers
        or owner.eager
        or sys.modules["queue_core.queue"].EAGER_EVERYWHERE
    ):
        return None
    return _sink_of(owner)


def _template(task: Task[Any, Any]) -> NewJob:
    job: NewJob | None = task.__dict__.get("_template_job")
    if job is None:
        assert task._factory is not None
        job = task._factory("", b"", 0)  # id, payload and lost delay: per job
        task.__dict__["_template_job"] = job
    return job


def map_template(
    task: Task[Any, Any], items: list[Any], sink: SupportsTemplateEnqueue
) -> list[JobHandle[Any]]:
    """Enqueue one job of ``task`` per element of ``items`` (a tuple or list of
    positional arguments, or one argument) through ``sink``; their handles, in order."""
    dumps = task._owner.serializer.dumps_payload
    low, high = task._fast_min, task._fast_max
    lost = task._fixed_lost_delay
    base_s, jitter, rnd = task._lost_base_s, task._lost_jitter, random.random
    ids = new_job_ids(len(items))
    rows: list[tuple[str, bytes, int]] = []
    for a, job_id in zip(items, ids, strict=True):
        args = tuple(a) if isinstance(a, (tuple, list)) else (a,)
        if not low <= len(args) <= high:
            task.check_arguments(args, {}, "map")
        if lost is None:  # as Task._plain: a jittered lost delay per job
            rows.append(
                (job_id, dumps(args, {}), int(round(base_s * (1.0 - jitter * rnd()) * 1000.0)))
            )
        else:
            rows.append((job_id, dumps(args, {}), lost))
    if rows:
        sink.enqueue_template(_template(task), rows)
    owner = task._owner
    return [JobHandle(owner, job_id) for job_id in ids]


def delay_template(
    task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> JobHandle[Any] | None:
    """``task.delay(*args, **kwargs)`` (arguments already bound) through the template,
    or ``None`` when the ordinary path must take it."""
    sink = template_sink(task)
    if sink is None:
        return None
    job_id = new_job_id()
    owner = task._owner
    payload = owner.serializer.dumps_payload(args, kwargs)
    lost = task._fixed_lost_delay
    if lost is None:  # as Task._plain
        lost = int(round(task._lost_base_s * (1.0 - task._lost_jitter * random.random()) * 1000.0))
    sink.enqueue_template(_template(task), [(job_id, payload, lost)])
    return JobHandle(owner, job_id)
