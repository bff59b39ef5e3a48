"""Stored records that cannot be read as written (a poison row): one rule for every backend.

A job stored with one corrupt field -- a Redis hash with ``ma=banana``, a SQLite row with
``run_at='yesterday'``, a DynamoDB item whose number is a string, a field that is missing
-- must not take its neighbours down. Every backend decodes defensively in one place (its
record decoding) with these helpers:

* :func:`problems` -- what is wrong with a decoded record: each field whose value is not
  of the type its dataclass declares (``bool`` is not an ``int``), as ``name=value``.
* :func:`salvage` -- build a record from per-field readers, keeping every field that can
  be read and a neutral value (``0``, ``""``, ``None``…) for each one that cannot; with
  :func:`mark_job` a :class:`~queue_core.records.jobs.JobRecord` then says so
  (reason ``corrupt_record``, the error names the bad fields), so read paths (``jobs
  list``, ``jobs show``, the dashboard, ``Queue.job(id).info()``) show it instead of
  crashing.
* :func:`corrupt_end` -- the attempt end that dead-letters a claimed job whose record is
  corrupt, alone: reason ``corrupt_record``, attempts unused. Its neighbours in the same
  claim batch run; :func:`split_claimed` sorts a batch.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import types as _pytypes
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Final, TypeVar

from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    ClaimedJob,
    Decision,
    ErrorInfo,
    JobRecord,
    JobState,
    Outcome,
    Reason,
)

__all__ = [
    "CORRUPT_CLASS",
    "corrupt_end",
    "corrupt_error",
    "describe",
    "mark_job",
    "problems",
    "salvage",
    "split_claimed",
]

CORRUPT_CLASS: Final = "CorruptRecord"
"""The ``error_class`` (and ``error_type``) recorded for a corrupt stored record."""

R = TypeVar("R")
_NONE = type(None)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_specs: dict[type, tuple[tuple[str, tuple[type, ...]], ...]] = {}


def _types(hint: Any) -> tuple[type, ...]:
    origin = typing.get_origin(hint)
    if origin is typing.Union or isinstance(hint, _pytypes.UnionType):
        return tuple(t for a in typing.get_args(hint) for t in _types(a))
    if hint is typing.Any:
        return (object,)
    if origin is not None:
        return (origin,)
    return (hint,) if isinstance(hint, type) else (object,)


def _spec(cls: type) -> tuple[tuple[str, tuple[type, ...]], ...]:
    """``(field, accepted types)`` of dataclass ``cls``, from its annotations (cached)."""
    spec = _specs.get(cls)
    if spec is None:
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        spec = _specs[cls] = tuple((n, _types(hints[n])) for n in names)
    return spec


def _fits(value: Any, types: tuple[type, ...]) -> bool:
    if value is None:
        return _NONE in types
    if type(value) is bool and bool not in types and object not in types:
        return False
    return isinstance(value, types)


def _show(name: str, value: Any) -> str:
    text = repr(value)
    return f"{name}={text[:40] + '...' if len(text) > 43 else text}"


def problems(record: Any) -> list[str]:
    """The fields of dataclass ``record`` whose value is not of their declared type, as
    ``name=value`` (value shortened); empty when every field is well typed."""
    return [
        _show(name, getattr(record, name))
        for name, types in _spec(type(record))
        if not _fits(getattr(record, name), types)
    ]


def describe(found: Iterable[str]) -> str:
    """The one-line message of a corrupt record: ``stored record is corrupt: a=..., b=...``."""
    return "stored record is corrupt: " + ", ".join(found)


def corrupt_error(found: Iterable[str]) -> ErrorInfo:
    """The :class:`ErrorInfo` recorded for a corrupt record (class ``CorruptRecord``)."""
    return ErrorInfo(error_class=CORRUPT_CLASS, error_type=CORRUPT_CLASS, message=describe(found))


def _neutral(types: tuple[type, ...]) -> Any:
    if _NONE in types:
        return None
    kind = types[0]
    if issubclass(kind, Enum):
        return JobState.DEAD if kind is JobState else None
    neutral: dict[type, Any] = {
        int: 0, str: "", bytes: b"", bool: False, list: [], dict: {}, tuple: (),
        datetime: _EPOCH,
    }  # fmt: skip
    return neutral.get(kind)


def salvage(cls: Callable[..., R], read: Mapping[str, Callable[[], Any]]) -> tuple[R, list[str]]:
    """A record of dataclass ``cls`` from per-field readers, and the fields that failed.

    Each field's reader is called once; a reader that raises (or a value of the wrong
    type) leaves the field at a neutral value -- ``None`` where the field may be
    ``None``, else ``0``, ``""``, ``b""``, ``False``, an empty container, the epoch, or
    :attr:`JobState.DEAD <queue_core.records.jobs.JobState.DEAD>` for a job state -- and
    is listed as ``name=value`` (or ``name missing or unreadable``). A field without a
    reader takes its dataclass default, else its neutral value.
    """
    kwargs: dict[str, Any] = {}
    found: list[str] = []
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.default is not dataclasses.MISSING
    }
    for name, types in _spec(cls):  # type: ignore[arg-type]
        reader = read.get(name)
        if reader is None:
            kwargs[name] = defaults.get(name, _neutral(types))
            continue
        try:
            value = reader()
        except Exception as exc:  # noqa: BLE001 - any failure to read is a corrupt field
            found.append(f"{name} unreadable ({type(exc).__name__}: {str(exc)[:60]})")
            kwargs[name] = _neutral(types)
            continue
        if _fits(value, types):
            kwargs[name] = value
        else:
            found.append(_show(name, value))
            kwargs[name] = _neutral(types)
    return cls(**kwargs), found


def mark_job(record: JobRecord, found: list[str]) -> JobRecord:
    """``record`` (a salvaged job) saying it is corrupt: reason ``corrupt_record`` and an
    error naming the bad fields; unchanged when ``found`` is empty."""
    if not found:
        return record
    return dataclasses.replace(
        record, reason=Reason.CORRUPT_RECORD.value, error=corrupt_error(found)
    )


def corrupt_end(job: ClaimedJob, found: list[str]) -> AttemptEnd:
    """The end of claimed ``job``'s attempt when its stored record is corrupt: the job is
    dead-lettered ``corrupt_record`` with an error naming the bad fields; the attempt
    (outcome ``failed``) spends nothing, since the job never ran."""
    return AttemptEnd(
        ref=job.ref,
        outcome=Outcome.FAILED,
        decision=Decision(action=Action.DEAD, reason=Reason.CORRUPT_RECORD.value),
        reason=Reason.CORRUPT_RECORD.value,
        error=corrupt_error(found),
    )


def split_claimed(jobs: list[ClaimedJob]) -> tuple[list[ClaimedJob], list[AttemptEnd]]:
    """A claim batch split into the jobs to run and the ends that dead-letter the corrupt
    ones (:func:`corrupt_end`), keeping the batch's order."""
    good: list[ClaimedJob] = []
    ends: list[AttemptEnd] = []
    for job in jobs:
        found = problems(job)
        if found:
            ends.append(corrupt_end(job, found))
        else:
            good.append(job)
    return good, ends
