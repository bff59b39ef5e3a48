"""The record an id argument names: a whole id or any unique prefix of one.

``jobs show``, ``jobs cancel``, ``dlq show``, ``dlq retry``, ``flow show`` and ``flow
cancel`` take what a person copies from a listing, which abbreviates ids
(:func:`queue_core.rules.ids.short_ids`); :func:`queue_core.rules.ids.resolve_prefix` finds the one
id it starts, or says that it is ambiguous (exit 2) or names nothing (exit 1).
"""

from __future__ import annotations

from queue_core import Queue, SupportsJobScan
from queue_core.rules.ids import resolve_prefix

__all__ = ["dead_id_of", "execution_id_of", "job_id_of"]


def job_id_of(queue: Queue, text: str) -> str:
    """The job id ``text`` names (``NotFound``; ``ConfigError`` ``ambiguous_id``)."""
    storage = queue.storage()

    def page(limit: int, offset: int) -> list[str]:
        if not isinstance(storage, SupportsJobScan):
            return []
        return [j.id for j in storage.list_jobs(limit=limit, offset=offset)]

    return resolve_prefix(
        text, kind="job", exists=lambda i: storage.get_job(i) is not None, page=page
    )


def dead_id_of(queue: Queue, text: str) -> str:
    """The dead-letter id ``text`` names (``NotFound``; ``ConfigError`` ``ambiguous_id``)."""
    return resolve_prefix(
        text,
        kind="dead-letter entry",
        exists=lambda i: queue.dead_letter(i) is not None,
        page=lambda limit, offset: [e.id for e in queue.dead_letters(limit, offset)],
    )


def execution_id_of(queue: Queue, text: str) -> str:
    """The flow execution id ``text`` names (``NotFound``; ``ConfigError``
    ``ambiguous_id``)."""
    from queue_core import NotFound

    def exists(execution_id: str) -> bool:
        try:
            queue.execution(execution_id)
        except NotFound:
            return False
        return True

    def page(limit: int, offset: int) -> list[str]:
        return [e.id for e in queue.executions(limit=limit, offset=offset)]

    return resolve_prefix(text, kind="flow execution", exists=exists, page=page)
