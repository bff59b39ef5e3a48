"""Reads and formatting behind the dashboard pages, on the public queue_core API only."""

from __future__ import annotations

import pprint
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from queue_core import AttemptRecord, JobState, Serializer, Storage, SupportsJobScan
from queue_core.records.jobs import JobRecord
from queue_core.rules.paging import check_page

__all__ = [
    "AttemptRow",
    "Decoded",
    "JobPage",
    "attempt_rows",
    "decode_payload",
    "decode_result",
    "fmt_duration",
    "fmt_time",
    "scan_jobs",
]

MAX_RENDERED = 20_000
"""Longest decoded value (characters) shown on a page; longer ones are cut."""


def fmt_time(value: int | datetime | None) -> str:
    """Epoch ms or an aware datetime as ``2026-11-30 16:24:37.120 UTC`` (``-`` for none)."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        dt = value.astimezone(timezone.utc)
    else:
        try:
            dt = datetime.fromtimestamp(value / 1000.0, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):  # a corrupt stored time
            return f"{value} ms (out of range)"
    return dt.strftime("%Y-%m-%d %H:%M:%S.") + f"{dt.microsecond // 1000:03d} UTC"


def fmt_duration(ms: float | None) -> str:
    """A duration in milliseconds for people: ``850 ms``, ``1.25 s``, ``3 m 05 s``."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000.0
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {sec:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} m"


def _shown(value: Any) -> str:
    text = pprint.pformat(value, width=100, sort_dicts=False)
    if len(text) > MAX_RENDERED:
        text = text[:MAX_RENDERED] + f"\n... ({len(text) - MAX_RENDERED} more characters)"
    return text


@dataclass(frozen=True)
class Decoded:
    """A decoded payload or result: the text to show, or why it could not be decoded."""

    text: str | None
    error: str | None = None
    raw: str | None = None
    """A short printable preview of the bytes when decoding failed."""


def _preview(data: bytes) -> str:
    head = data[:300]
    more = f" ... ({len(data)} bytes)" if len(data) > 300 else f" ({len(data)} bytes)"
    return repr(head) + more


def decode_payload(serializer: Serializer, payload: bytes) -> Decoded:
    """A job's arguments decoded with the queue's serializer, as ``args``/``kwargs`` text."""
    try:
        args, kwargs = serializer.loads_payload(payload)
    except Exception as exc:  # noqa: BLE001 - a corrupt payload must still be shown
        return Decoded(
            None,
            f"not decodable with the {serializer.name!r} serializer: {type(exc).__name__}: {exc}",
            _preview(payload),
        )
    return Decoded(_shown({"args": list(args), "kwargs": dict(kwargs)}))


def decode_result(serializer: Serializer, result: bytes | None) -> Decoded | None:
    """A job's stored result decoded with the queue's serializer (``None`` when absent)."""
    if result is None:
        return None
    try:
        value = serializer.loads_result(result)
    except Exception as exc:  # noqa: BLE001
        return Decoded(
            None,
            f"not decodable with the {serializer.name!r} serializer: {type(exc).__name__}: {exc}",
            _preview(result),
        )
    return Decoded(_shown(value))


@dataclass(frozen=True)
class AttemptRow:
    """One attempt record as the job and dead-letter pages show it."""

    record: AttemptRecord
    started: str
    finished: str
    duration: str


def attempt_rows(attempts: Sequence[AttemptRecord]) -> list[AttemptRow]:
    rows = []
    for a in attempts:
        duration = None
        if a.started_at is not None and a.finished_at is not None:
            duration = (a.finished_at - a.started_at).total_seconds() * 1000.0
        rows.append(
            AttemptRow(
                record=a,
                started=fmt_time(a.started_at),
                finished=fmt_time(a.finished_at),
                duration=fmt_duration(duration),
            )
        )
    return rows


@dataclass
class JobPage:
    """One page of the job list."""

    jobs: list[JobRecord] = field(default_factory=list)
    has_next: bool = False
    scanned: int = 0
    """Jobs read to fill the page (task filter only: the protocol has no task filter)."""
    truncated: bool = False
    """The task filter stopped at its scan limit: later matches may exist."""


_SCAN_CHUNK = 200


def scan_jobs(
    storage: Storage,
    *,
    state: JobState | None,
    queue: str | None,
    task: str | None,
    limit: int,
    offset: int,
    max_scan: int = 5000,
) -> JobPage | None:
    """A page of jobs, newest first; ``None`` when the storage cannot list jobs.

    ``SupportsJobScan.list_jobs`` filters by state and queue; a task filter is applied
    here, reading at most ``max_scan`` jobs (the page says so when it stopped there).
    """
    limit, offset = check_page(limit, offset)
    if not isinstance(storage, SupportsJobScan):
        return None
    if task is None:
        rows = storage.list_jobs(state=state, queue=queue, limit=limit + 1, offset=offset)
        return JobPage(jobs=rows[:limit], has_next=len(rows) > limit, scanned=len(rows))
    page = JobPage()
    matched = 0
    read = 0
    while read < max_scan:
        want = min(_SCAN_CHUNK, max_scan - read)
        chunk = storage.list_jobs(state=state, queue=queue, limit=want, offset=read)
        read += len(chunk)
        for job in chunk:
            if job.task_name != task:
                continue
            matched += 1
            if matched <= offset:
                continue
            if len(page.jobs) == limit:
                page.has_next = True
                page.scanned = read
                return page
            page.jobs.append(job)
        if len(chunk) < want:
            page.scanned = read
            return page
    page.scanned = read
    page.truncated = bool(storage.list_jobs(state=state, queue=queue, limit=1, offset=read))
    return page
