"""Building many :class:`~queue_core.records.jobs.NewJob` records that differ only in id, payload
and lost delay, cheaply.

``NewJob(**fields)`` (a frozen, slotted dataclass of 25 fields) costs about as much as
the rest of building a job: every field goes through keyword binding and a
``object.__setattr__`` looked up per field. A task's plain calls (``delay`` and ``map``
with no per-call options, no unique key and no concurrency key function) differ only in
id, payload and lost delay, so :class:`JobFactory` keeps the other 22 values with their
slot setters and fills a new instance directly: the same object ``NewJob(...)`` would
give (equal, same type), at about a third of the cost (bench/enqueue.py --profile).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Final

from queue_core.records.jobs import NewJob

__all__ = ["JobFactory", "expand_template", "plain_job_factory"]


_PER_JOB: Final = ("id", "payload", "lost_delay_ms")


def _setter(name: str) -> Callable[[Any, Any], None]:
    return NewJob.__dict__[name].__set__  # type: ignore[no-any-return]


_SET_ID, _SET_PAYLOAD, _SET_LOST = (_setter(n) for n in _PER_JOB)


def _defaults() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(NewJob):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"NewJob.{f.name} has a default factory: JobFactory cannot share it")
    return out


class JobFactory:
    """New jobs whose fields but ``id``, ``payload`` and ``lost_delay_ms`` are fixed.

    Args:
        fields: values of the other fields (those left out take NewJob's defaults).

    Raises:
        TypeError: a field NewJob does not have, or a required one missing.
    """

    __slots__ = ("_fixed",)

    def __init__(self, fields: dict[str, Any]) -> None:
        names = [f.name for f in dataclasses.fields(NewJob)]
        unknown = set(fields) - set(names)
        if unknown:
            raise TypeError(f"NewJob has no field(s) {sorted(unknown)}")
        values = {**_defaults(), **fields}
        missing = [n for n in names if n not in values and n not in _PER_JOB]
        if missing:
            raise TypeError(f"JobFactory needs a value for {missing}")
        self._fixed = tuple((_setter(n), values[n]) for n in names if n not in _PER_JOB)

    def __call__(self, job_id: str, payload: bytes, lost_delay_ms: int) -> NewJob:
        """The job ``NewJob(id=job_id, payload=payload, lost_delay_ms=lost_delay_ms,
        **fields)`` would be."""
        job = object.__new__(NewJob)
        _SET_ID(job, job_id)
        _SET_PAYLOAD(job, payload)
        _SET_LOST(job, lost_delay_ms)
        for set_field, value in self._fixed:
            set_field(job, value)
        return job


def plain_job_factory(template: dict[str, Any]) -> JobFactory | None:
    """The factory of a task's plain calls (its ``_template`` fields, no per-call
    options), or ``None`` when each call computes a field (a unique key, a concurrency
    or rate key function, a debounce key) or takes a flow-control behaviour: those go
    through ``Task._make`` and the queue's enqueue path."""
    key = template.get("concurrency_key")
    if template.get("unique_key") is not None or (key is not None and key.__class__ is not str):
        return None
    rate = template.get("rate_key")
    if rate is not None and rate.__class__ is not str:  # a rate key function
        return None
    if template.get("debounce_key") is not None or template.get("concurrency_behavior"):
        return None  # flow control (SPEC §13) goes through the storage's abilities
    return JobFactory({**template, "options": None, "delay_ms": 0, "run_at": None})


def expand_template(template: NewJob, jobs: Sequence[tuple[str, bytes, int]]) -> list[NewJob]:
    """The jobs
    :meth:`~queue_core.storage.abilities.SupportsTemplateEnqueue.enqueue_template` stores:
    ``template`` with the ``(id, payload, lost_delay_ms)`` of each element of ``jobs``."""
    hit = _factories.get(id(template))
    if hit is None or hit[0] is not template:  # built once per template (one per task)
        if len(_factories) >= 256:
            _factories.clear()
        fields = {f.name: getattr(template, f.name) for f in dataclasses.fields(NewJob)}
        hit = _factories[id(template)] = (
            template,
            JobFactory({k: v for k, v in fields.items() if k not in _PER_JOB}),
        )
    factory = hit[1]
    return [factory(job_id, payload, lost) for job_id, payload, lost in jobs]


_factories: dict[int, tuple[NewJob, JobFactory]] = {}
