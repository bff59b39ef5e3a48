"""The fast advance of a Redis flow execution: O(dependents) reads per step end.

The common advance (the pending events are claims, successes and retries of a
``running`` execution without ``max_parallel``, nothing failed, deadline not passed) is
decided by :func:`queue_core.flows.decide_fast.step_ended_fast` from:

- the execution's fields and its counters of steps by state (``c.<state>`` in
  ``P:x:<e>``, kept by ``xs_set`` in Lua wherever a step state is written);
- the pending events (``P:xe:<e>``);
- the states of the events' steps and of their dependents (HMGET ``P:xs:<e>``), and the
  dependents' unmet-dependency counters (HMGET ``P:xu:<e>``, lowered by ``flow_apply``
  with each success).

The spec's index (dependents of each step) is built once per spec
(:func:`backends.redis.flow_records.index_of`). The result goes through the same
``flow_apply.lua`` under the same optimistic lock (the execution's version, read with
the fields: anything written since makes the apply refuse and the caller read again).
An advance with no pending event (another advancer folded them) writes nothing when
:func:`~queue_core.flows.decide_fast.advance_idle` says so. Any other case returns
``None`` and :class:`backends.redis.flows.RedisFlows` decides on the full execution, as
before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from backends.redis.errors import translate_errors
from backends.redis.flow_records import Exec, Op, index_of, parse_step, text, transition_ops
from queue_core.model import ReapedJob

if TYPE_CHECKING:  # at run time from backends.redis.flow_names, on a first flow operation
    from queue_core.flows.decide_fast import ExecutionHead, StepIndex
    from queue_core.flows.model import ExecutionState, StepState

    Result = tuple[bool, ExecutionState | None, list[ReapedJob], str | None]
    Event = tuple[int, StepState, str]

__all__ = ["FastAdvance"]


def _head(f: dict[str, bytes | None]) -> tuple[ExecutionHead, dict[StepState, int]]:
    """The execution's fields and its counts of steps by state, as read."""
    from backends.redis.flow_names import COUNTED, ExecutionHead, ExecutionReason, ExecutionState

    rs = text(f["rs"])
    head = ExecutionHead(
        state=ExecutionState(text(f["st"])),
        max_parallel=int(f["mp"] or 0),
        deadline_at=None if f["dl"] is None else int(f["dl"]),
        reason=None if rs is None else ExecutionReason(rs),
        failed_step=text(f["fs"]),
    )
    return head, {s: int(f[f"c.{s.value}"] or 0) for s in COUNTED}


class FastAdvance:
    """Mixed into :class:`backends.redis.flows.RedisFlows`."""

    _r: Any

    def _x(self, kind: str, name: str) -> str:  # pragma: no cover - RedisFlows'
        raise NotImplementedError

    def _apply(
        self, now: int, cas: list[list[str]], ops: list[Op]
    ) -> list[ReapedJob] | None:  # pragma: no cover - RedisFlows'
        raise NotImplementedError

    def _try_fast(self, eid: str, now: int) -> Result | None:
        """One optimistic attempt of the fast advance; ``None`` when it does not apply."""
        from backends.redis.flow_names import FAST_HEAD, ExecutionState, StepState, advance_idle

        with translate_errors("read execution"):
            pipe = self._r.pipeline(transaction=True)
            pipe.hmget(self._x("x", eid), FAST_HEAD)
            pipe.lrange(self._x("xe", eid), 0, -1)
            row, raw_events = pipe.execute()
        f = dict(zip(FAST_HEAD, row, strict=True))
        if f["st"] is None or int(f["c.pending"] or -1) < 0:
            return None  # gone, or started before the counters existed (never counted)
        index = index_of(f["sp"])
        head, counts = _head(f)
        if not raw_events:  # e.g. another advancer folded this caller's event already
            if advance_idle(head, counts, len(index.ids), now):
                return True, head.state, [], None
            return None
        if head.state is not ExecutionState.RUNNING or head.failed_step or head.max_parallel:
            return None
        events: list[Event] = []
        for raw in raw_events:
            i, st, reason = raw.decode().split("|", 2)
            events.append((int(i), StepState(st), reason))
        states, unmet = self._read_steps(eid, index, events)
        if states is None:
            return None
        x = Exec(eid, f, index, [])
        folded = _fold(x, eid, head, counts, states, unmet, events, now)
        if folded is None:
            return None
        ops, head = folded
        ops.append(["events", eid, str(len(events))])
        reaped = self._apply(now, [["x", eid, text(f["v"]) or "0"]], ops)
        if reaped is None:
            return False, None, [], None
        ck = x.conc_key if head.state.finished else None
        return True, head.state, reaped, ck

    def _read_steps(
        self, eid: str, index: StepIndex, events: Sequence[Event]
    ) -> tuple[dict[int, StepState] | None, dict[int, int]]:
        """The states of the events' steps and their dependents, and the dependents'
        unmet counters; ``None`` when a counter is missing (the full decision judges)."""
        from backends.redis.flow_names import S

        wanted: dict[int, None] = {}
        dependents: dict[int, None] = {}
        for i, st, _ in events:
            wanted[i] = None
            if st is S.SUCCEEDED:
                dependents.update(dict.fromkeys(index.dependents[i]))
        wanted.update(dependents)
        with translate_errors("read execution"):
            pipe = self._r.pipeline(transaction=True)
            pipe.hmget(self._x("xs", eid), [str(i) for i in wanted])
            if dependents:
                pipe.hmget(self._x("xu", eid), [str(d) for d in dependents])
            got = pipe.execute()
        if any(v is None for v in got[0]):
            return None, {}
        states = {i: parse_step(v)[0] for i, v in zip(wanted, got[0], strict=True)}
        unmet: dict[int, int] = {}
        if dependents:
            if any(v is None for v in got[1]):
                return None, {}
            unmet = {d: int(v) for d, v in zip(dependents, got[1], strict=True)}
        return states, unmet


def _fold(
    x: Exec,
    eid: str,
    head: ExecutionHead,
    counts: dict[StepState, int],
    states: dict[int, StepState],
    unmet: dict[int, int],
    events: Sequence[Event],
    now: int,
) -> tuple[list[Op], ExecutionHead] | None:
    """The ops of ``events``, each judged on the state the previous one left, and the head
    after them; ``None`` when one needs the full decision (an event after the end, or a
    case :func:`step_ended_fast` does not cover)."""
    from backends.redis.flow_names import ExecutionState, S, step_ended_fast

    index = x.index
    ops: list[Op] = []
    for i, st, reason in events:
        sid = index.ids[i]
        cur = states[i]
        if head.state is not ExecutionState.RUNNING:
            return None  # an event after the end: the full decision judges it
        if st is S.RUNNING:  # claimed after an end that was not advanced yet
            ops.append(["step", eid, str(i), S.RUNNING.value, "1", ""])
            states[i] = S.RUNNING
            continue
        deps = {
            index.ids[d]: (states[d], unmet[d])
            for d in (index.dependents[i] if st is S.SUCCEEDED else ())
        }
        t = step_ended_fast(head, index, counts, sid, cur, st, deps, now)
        if t is None:
            return None
        ops += transition_ops(x, t, {sid: reason})
        head = replace(head, state=t.state, reason=t.reason)
        states[i] = st
        counts[st] = counts.get(st, 0) + 1
        if st is S.SUCCEEDED:
            for d in index.dependents[i]:
                unmet[d] -= 1
        for r in t.release:
            states[index.pos[r]] = S.QUEUED
    return ops, head
