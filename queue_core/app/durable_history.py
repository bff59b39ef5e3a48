"""A workflow's history from its memos (SPEC §12): what ``ExecutionHandle.history()``
returns, what ``queue-core flow show`` and the dashboard show in a workflow's timeline.

The memos (:mod:`queue_core.records.workflows` lists their keys) are read in the order
the function wrote them (their numbers); each ``ctx`` call that left one becomes one
:class:`~queue_core.records.workflows.HistoryEntry`. Display only: states that depend on
the time (``sleeping``, ``timed_out``) are judged at ``now_ms``.
"""

from __future__ import annotations

import json
from typing import Any

from queue_core.records.jobs import dt_from_ms
from queue_core.records.workflows import HistoryEntry, MemoRecord
from queue_core.storage.workflows import WorkflowState

__all__ = ["history"]


def history(state: WorkflowState, now_ms: int) -> list[HistoryEntry]:
    """The entries of ``state``'s memos, oldest first (see the module docstring)."""
    memos = state.memos
    out: list[HistoryEntry] = []
    for memo in sorted(memos.values(), key=lambda m: m.seq):
        family, _, rest = memo.key.partition(":")
        if family == "s":
            out.append(_entry("step", rest, "done", None, memo.at))
        elif family == "t":
            wake = int(json.loads(memo.value))
            over = wake <= now_ms
            name = f"sleep #{int(rest) + 1}"
            out.append(_entry("sleep", name, "slept" if over else "sleeping", memo.at,
                              wake if over else None, until=wake))  # fmt: skip
        elif family == "e":
            out.append(_wait(memo, memos.get(f"d:{rest}"), now_ms))
        elif family == "c":
            out.append(_child(state, memo))
    return out


def _entry(
    kind: str,
    name: str,
    st: str,
    started: int | None,
    ended: int | None,
    *,
    until: int | None = None,
    key: str | None = None,
) -> HistoryEntry:
    return HistoryEntry(
        kind=kind,
        name=name,
        state=st,
        started_at=dt_from_ms(started),
        ended_at=dt_from_ms(ended),
        until=dt_from_ms(until),
        key=key,
    )


def _wait(memo: MemoRecord, data: MemoRecord | None, now_ms: int) -> HistoryEntry:
    meta: dict[str, Any] = json.loads(memo.value)
    until = meta.get("until")
    if data is not None:
        st, ended = "received", data.at
    elif until is not None and now_ms >= until:
        st, ended = "timed_out", until
    else:
        st, ended = "waiting", None
    name = str(meta.get("name", memo.key))
    return _entry("wait", name, st, meta.get("since"), ended, until=until, key=meta.get("key"))


def _child(state: WorkflowState, memo: MemoRecord) -> HistoryEntry:
    idx = int(json.loads(memo.value)["idx"])
    step = state.steps[idx] if idx < len(state.steps) else None
    job = state.jobs.get(idx)
    ended = job.finished_at if job is not None else None
    name = step.step_id if step is not None else memo.key
    st = step.state.value if step is not None else "unknown"
    return _entry("child", name, st, memo.at, ended)
