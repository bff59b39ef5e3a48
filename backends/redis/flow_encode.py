"""The plan operations of a flow change as ``lua/_flow.lua`` reads them: one JSON list of
``[kind, fields...]`` per operation (:func:`encode_ops`), their bytes passed beside it."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from backends.redis.records import job_args
from queue_core.records.workflows import PARKED_AT, EventWait
from queue_core.rules.flows import plan, workflow

__all__ = ["Blobs", "encode_ops"]


def _s(value: object) -> str:
    return "" if value is None else str(value)


Blobs = list[Any]
"""The bytes a plan's operations carry (a memo's value, a child job's arguments), passed
to ``flow_apply.lua`` after its other arguments; an operation names them by number."""


def _blob(blobs: Blobs, *values: Any) -> int:
    blobs.extend(values)
    return len(blobs) - len(values) + 1


def _wait(w: EventWait) -> str:
    return json.dumps([w.memo_key, w.name, w.key, w.since, w.until])


_ENCODE: dict[type, Callable[[Any, Blobs], list[Any]]] = {  # the op kinds of lua/_flow.lua
    plan.SetStep: lambda o, b: ["S", o.idx, o.state.value, _s(o.reason), *o.dependents],
    plan.SetExecution: lambda o, b: [
        "X", o.state.value, _s(o.reason and o.reason.value), _s(o.failed_step), _s(o.deadline_at)
    ],
    plan.Started: lambda o, b: ["B", _s(o.deadline_at)],
    plan.EndJob: lambda o, b: [
        "E", o.idx, o.when.value, o.state.value, o.reason, _s(o.outcome and o.outcome.value)
    ],
    plan.RequestCancel: lambda o, b: ["C", o.idx],
    plan.Release: lambda o, b: ["R", o.idx, _s(o.deadline_at)],
    plan.PutMemo: lambda o, b: ["M", o.key, _blob(b, o.value)],
    plan.DropMemos: lambda o, b: ["D", *o.keys],
    plan.AddStep: lambda o, b: [
        "A", o.idx, o.step, o.state.value, 0 if o.job is None else _blob(b, *job_args(o.job)),
        _s(o.job and o.job.flow_deadline_at),
    ],
    plan.SetReady: lambda o, b: [
        "Y", o.idx, str(o.at), str(2 * PARKED_AT if o.at >= PARKED_AT else o.at)
    ],
    plan.Wake: lambda o, b: ["K", o.idx],
    plan.SetAwaiting: lambda o, b: ["G", ",".join(map(str, o.idxs))],
    plan.AddWaiter: lambda o, b: ["W", o.wait.memo_key, o.wait.name, _wait(o.wait)],
    plan.DropWaiter: lambda o, b: ["w", o.memo_key],
    plan.Reopened: lambda o, b: ["O"],
    plan.SetUnmet: lambda o, b: ["U", o.idx, o.unmet],
}  # fmt: skip


def encode_ops(ops: Sequence[plan.Op], blobs: Blobs | None = None) -> str:
    """The JSON of ``ops`` for ``lua/_flow.lua``; their bytes go to ``blobs``."""
    out, last, b = [], None, [] if blobs is None else blobs
    for op in ops:
        if isinstance(op, plan.Finished):  # a sub-execution's end: its parent's step state
            sub = "" if last is None else workflow.sub_step_state(last.state).value
            out.append(["F", sub, _s(last and last.reason and last.reason.value)])
            continue
        last = op if isinstance(op, plan.SetExecution) else last
        out.append(_ENCODE[type(op)](op, b))
    return json.dumps(out)
