"""The facade's side of unique jobs and rate limits: enqueue through the storage's
abilities (:class:`~queue_core.storage.SupportsUniqueJobs`,
:class:`~queue_core.storage.SupportsRateLimits`), refusing clearly when it has none.

The rules themselves are pure, in :mod:`queue_core.policy.limits`.
"""

from __future__ import annotations

from collections.abc import Sequence

from queue_core.errors import ConfigError
from queue_core.model import NewJob
from queue_core.storage import Storage, SupportsRateLimits, SupportsUniqueJobs

__all__ = ["enqueue_limited"]


def _unsupported(storage: Storage, option: str, ability: str) -> ConfigError:
    return ConfigError(
        f"{option} is not supported by {type(storage).__name__}: it lacks the {ability} "
        f"ability — use a storage that has it (every in-repo backend does) or drop "
        f"{option}",
        code="invalid_option",
        field=option,
        value=type(storage).__name__,
    )


def enqueue_limited(storage: Storage, jobs: Sequence[NewJob]) -> list[str]:
    """Enqueue ``jobs`` (some with a unique key or a rate key); the job id each one got:
    its own, or for a held unique key the holder's.

    Raises:
        ConfigError: ``code="invalid_option"`` when the storage lacks the ability a job
            needs (nothing is written).
    """
    if any(j.rate_key is not None for j in jobs) and not isinstance(storage, SupportsRateLimits):
        raise _unsupported(storage, "rate_limit", "SupportsRateLimits")
    if all(j.unique_key is None for j in jobs):
        storage.enqueue(jobs)
        return [j.id for j in jobs]
    if not isinstance(storage, SupportsUniqueJobs):
        raise _unsupported(storage, "unique_key", "SupportsUniqueJobs")
    return [e.job_id for e in storage.enqueue_unique(jobs)]
