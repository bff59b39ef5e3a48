"""Helpers of the bulk commands (``jobs list``, ``dlq retry --all``, ``dlq purge``):
confirmation, progress bars, dead-letter scans, job rows.

Everything here uses the public API of :mod:`queue_core` (the ``Queue`` facade, the
``Storage`` protocol and its optional ``SupportsJobScan`` ability).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from queue_core import DeadJob, JobInfo, JobState, Queue
from queue_core.records.jobs import JobRecord, dt_from_ms, ms_from_dt

__all__ = [
    "CHUNK",
    "PAGE",
    "ConfirmationRefused",
    "confirm",
    "dead_entries",
    "job_info",
    "progress",
    "purge_in_chunks",
    "show_progress",
    "stdin_is_interactive",
]

PAGE = 500
"""Dead-letter entries read per ``list_dead`` call while scanning."""

CHUNK = 500
"""Dead-letter entries deleted per ``purge_dead`` call while a progress bar is shown."""


class ConfirmationRefused(Exception):
    """A bulk change needs confirmation, and nobody can give it (stdin is not a terminal)."""


def stdin_is_interactive() -> bool:
    """Whether a person can answer a prompt (stdin is a terminal)."""
    return sys.stdin is not None and sys.stdin.isatty()


def show_progress(as_json: bool) -> bool:
    """Progress bars go to stderr, only when it is a terminal and never with ``--json``."""
    return not as_json and sys.stderr is not None and sys.stderr.isatty()


def confirm(question: str, *, yes: bool, option_hint: str = "--yes") -> None:
    """Ask ``question`` on stderr unless ``yes``; a "no" aborts (exit 1).

    Raises:
        ConfirmationRefused: ``yes`` is false and stdin is not a terminal: a prompt
            would read end-of-file (or wait forever on a pipe nobody writes to).
    """
    if yes:
        return
    if not stdin_is_interactive():
        raise ConfirmationRefused(
            f"refusing to go ahead without confirmation: stdin is not a terminal, so "
            f"nobody can answer {question!r}; pass {option_hint} to confirm in a script"
        )
    click.confirm(question, abort=True, err=True)


@contextmanager
def progress(enabled: bool, length: int, label: str) -> Iterator[Callable[[int], None]]:
    """A click progress bar on stderr, or a no-op ``update(n)`` when not ``enabled``."""
    if not enabled or length <= 0:
        yield lambda n: None
        return
    bar = click.progressbar(
        length=length,
        label=label,
        file=sys.stderr,
        show_pos=True,
        show_eta=True,
    )
    with bar:
        yield bar.update


def dead_entries(queue: Queue, task_name: str | None) -> list[DeadJob]:
    """Every dead-letter entry (of one task), newest first, read a page at a time.

    Entries are de-duplicated by id: a listing that shifts while it is paged (an entry
    added or removed meanwhile) can show one twice.
    """
    seen: set[str] = set()
    out: list[DeadJob] = []
    offset = 0
    storage = queue.storage()
    while True:
        page = storage.list_dead(PAGE, offset, task_name)
        for entry in page:
            if entry.id not in seen:
                seen.add(entry.id)
                out.append(entry)
        if len(page) < PAGE:
            return out
        offset += len(page)


def purge_in_chunks(
    queue: Queue,
    task_name: str | None,
    before: int | None,
    entries: list[DeadJob],
    update: Callable[[int], None],
) -> int:
    """Delete dead-letter entries oldest first, ``CHUNK`` at a time, so a bar can move.

    ``Storage.purge_dead`` deletes everything dead at or before a time: the chunks are
    cut at the ``dead_at`` of every ``CHUNK``-th entry of ``entries`` (the scan behind
    the confirmation), oldest first. A last call with the user's own bound (``before``,
    or none) then deletes exactly what a single ``purge_dead`` call would have, entries
    that died during the purge included.

    Returns:
        The number of entries removed.
    """
    storage = queue.storage()
    times = sorted(ms_from_dt(e.dead_at) for e in entries)
    removed = 0
    for index in range(CHUNK - 1, len(times) - 1, CHUNK):
        done = storage.purge_dead(task_name, times[index])
        removed += done
        update(done)
    done = storage.purge_dead(task_name, before)
    update(done)
    return removed + done


def job_info(queue: Queue, record: JobRecord) -> JobInfo:
    """The :class:`~queue_core.JobInfo` of a listed job, as ``JobHandle.info()`` builds it.

    A stored result that the queue's serializer cannot decode is shown as ``None``
    rather than failing the whole listing (``jobs show`` reports the error itself).
    """
    result = None
    if record.result is not None and record.state is JobState.SUCCEEDED:
        try:
            result = queue.serializer.loads_result(record.result)
        except Exception:  # noqa: BLE001 - one corrupt result must not hide the page
            result = None
    return JobInfo(
        id=record.id,
        state=record.state,
        reason=record.reason,
        task_name=record.task_name,
        queue=record.queue,
        attempts=record.attempts,
        max_attempts=record.max_attempts,
        result=result,
        error=record.error.message if record.error else None,
        error_class=record.error.error_class if record.error else None,
        priority=record.priority,
        enqueued_at=dt_from_ms(record.enqueued_at),
        run_at=dt_from_ms(record.run_at),
        started_at=dt_from_ms(record.started_at),
        finished_at=dt_from_ms(record.finished_at),
        replay_of=record.replay_of,
        dead_id=record.dead_id,
    )
