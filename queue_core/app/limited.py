"""The facade's side of the enqueue-time abilities: unique jobs, rate limits and flow
control (SPEC §11, §13). Each job goes to the storage operation that honours what it
asks for, and a storage without the ability is refused clearly, before anything is
written.

The rules themselves are pure, in :mod:`queue_core.rules.limits` and
:mod:`queue_core.rules.control`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from queue_core.app.control import SUPERSEDING
from queue_core.records.errors import ConfigError
from queue_core.records.jobs import Enqueued, NewJob
from queue_core.storage.abilities import (
    SupportsDebounce,
    SupportsRateLimits,
    SupportsRoundRobin,
    SupportsSupersede,
    SupportsUniqueJobs,
)
from queue_core.storage.protocol import Storage

__all__ = ["enqueue_limited", "needs_abilities", "require"]


def _unsupported(storage: object, option: str, ability: type) -> ConfigError:
    return ConfigError(
        f"{option} is not supported by {type(storage).__name__}: it lacks the "
        f"{ability.__name__} ability ({ability.__module__}) — use a storage that has it "
        f"(memory:// does; see docs/backend-abilities/) or drop {option}",
        code="invalid_option",
        field=option,
        value=type(storage).__name__,
    )


def require(storage: object, option: str, ability: type) -> None:
    """Raise ``ConfigError`` (``invalid_option``) when ``storage`` lacks ``ability``."""
    if not isinstance(storage, ability):
        raise _unsupported(storage, option, ability)


def needs_abilities(job: NewJob) -> bool:
    """Whether ``job`` asks for an enqueue-time ability (plain jobs: ``False``, cheaply)."""
    return (
        job.unique_key is not None
        or job.rate_key is not None
        or job.debounce_key is not None
        or job.concurrency_behavior is not None
    )


def _checked(storage: Storage, job: NewJob) -> str:
    """Check the abilities ``job`` needs; the kind of enqueue it takes."""
    if job.rate_key is not None:
        require(storage, "rate_limit", SupportsRateLimits)
    behavior = job.concurrency_behavior
    if behavior == "round_robin":
        require(storage, "concurrency behavior 'round_robin'", SupportsRoundRobin)
    if behavior in SUPERSEDING:
        require(storage, f"concurrency behavior {behavior!r}", SupportsSupersede)
        return "supersede"
    if job.debounce_key is not None:
        require(storage, "debounce", SupportsDebounce)
        return "debounce"
    if job.unique_key is not None:
        require(storage, "unique_key", SupportsUniqueJobs)
        return "unique"
    return "plain"


def _enqueue_of(storage: Any, kind: str) -> Callable[[Sequence[NewJob]], list[Enqueued]] | None:
    return {
        "supersede": getattr(storage, "enqueue_superseding", None),
        "debounce": getattr(storage, "enqueue_debounced", None),
        "unique": getattr(storage, "enqueue_unique", None),
    }.get(kind)


def enqueue_limited(storage: Storage, jobs: Sequence[NewJob]) -> list[str]:
    """Enqueue ``jobs`` (some asking for abilities); the job id each one got: its own,
    or the holder's for a held unique key or a debounced call merged into its job.

    Consecutive jobs of one kind go in one call, in order.

    Raises:
        ConfigError: ``code="invalid_option"`` when the storage lacks the ability a job
            needs (nothing is written).
    """
    kinds = [_checked(storage, j) for j in jobs]
    ids: list[str] = []
    start = 0
    for kind, run in itertools.groupby(kinds):
        n = len(list(run))
        batch = jobs[start : start + n]
        start += n
        enqueue = _enqueue_of(storage, kind)
        if enqueue is None:
            storage.enqueue(batch)
            ids += [j.id for j in batch]
        else:
            ids += [e.job_id for e in enqueue(batch)]
    return ids
