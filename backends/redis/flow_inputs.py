"""Redis: a flow step's inputs (the execution's input and its dependencies' results) and
the step indexes a worker keeps so that they are one round trip.

:class:`Indexes` maps an execution id to (spec hash, step index) as read; a step's
dependencies never change (a workflow only adds steps), so a step the index knows is read
without the step list (``sp``, O(steps) bytes), and a hash that no longer matches (an id
stored again after a prune) is read again. :class:`RedisFlows` keeps one and uses it for
its advances too.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Sequence

from backends.redis.errors import translate_errors
from backends.redis.store import RedisStore
from queue_core.records.errors import NotFound
from queue_core.rules.flows.decide_fast import StepIndex, step_index
from queue_core.storage.flows import StepInputs

__all__ = ["Indexes", "StepInputsReader", "parse_index"]

_KEPT = 1024
"""Executions whose step index is kept (all forgotten past this many)."""


@functools.lru_cache(maxsize=64)
def parse_index(sp: bytes) -> StepIndex:
    """The :class:`StepIndex` of an ``sp`` field (JSON ``[[id, [deps]], ...]``), built once
    per distinct value (the steps of an execution never change)."""
    return step_index([(sid, tuple(deps)) for sid, deps in json.loads(sp)])


class Indexes(dict[str, tuple[bytes, StepIndex]]):
    """Step indexes read: execution id -> (spec hash, index)."""

    def remember(self, eid: str, sh: bytes | None, index: StepIndex) -> None:
        """Keep ``eid``'s step index as read with its spec hash."""
        if len(self) >= _KEPT:
            self.clear()
        self[eid] = (sh or b"", index)


class StepInputsReader:
    """``get_step_inputs`` and ``get_step_inputs_batch`` on ``store``, by ``indexes``."""

    def __init__(self, store: RedisStore, indexes: Indexes) -> None:
        self.store = store
        self.indexes = indexes

    def get(self, execution_id: str, step_id: str) -> StepInputs:
        """``SupportsFlows.get_step_inputs``: the input and the dependencies' results, in
        one round trip when the execution's step index is known (same spec hash)."""
        known = self.indexes.get(execution_id)
        if known is not None and step_id in known[1].pos:
            sh, inputs = self._read([(execution_id, known[1], step_id)])[0]
            if sh == known[0]:
                return inputs
        x = self.store.key("x", execution_id)
        with translate_errors("get_step_inputs"):
            sh, sp = self.store.client.hmget(x, ["sh", "sp"])
        if sp is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        index = parse_index(sp)
        if step_id not in index.pos:
            raise NotFound(f"execution {execution_id} has no step {step_id!r}")
        self.indexes.remember(execution_id, sh, index)
        return self._read([(execution_id, index, step_id)])[0][1]

    def batch(self, steps: Sequence[tuple[str, str]]) -> list[StepInputs | None]:
        """``SupportsStepInputsBatch.get_step_inputs_batch``: one pipelined round trip for
        the steps of executions whose index is kept, the others one by one."""
        out: list[StepInputs | None] = [None] * len(steps)
        known = [(n, self.indexes.get(eid), eid, sid) for n, (eid, sid) in enumerate(steps)]
        asked = [(n, kept[0], (eid, kept[1], sid)) for n, kept, eid, sid in known
                 if kept is not None and sid in kept[1].pos]  # fmt: skip
        got = self._read([one for _, _, one in asked]) if asked else []
        for (n, kept_sh, _), (sh, inputs) in zip(asked, got, strict=True):
            if sh == kept_sh:
                out[n] = inputs
        for n, (eid, sid) in enumerate(steps):
            if out[n] is None:
                with contextlib.suppress(NotFound):
                    out[n] = self.get(eid, sid)
        return out

    def _read(
        self, asked: Sequence[tuple[str, StepIndex, str]]
    ) -> list[tuple[bytes | None, StepInputs]]:
        """Per ``(execution id, its step index, step id)``: the execution's stored spec
        hash and the step's inputs (only its dependencies' results), one pipeline."""
        key, deps_of = self.store.key, [index.depends_on[index.pos[sid]] for _, index, sid in asked]
        with translate_errors("get_step_inputs"):
            pipe = self.store.client.pipeline(transaction=False)
            for (eid, index, _), deps in zip(asked, deps_of, strict=True):
                pipe.hmget(key("x", eid), ["in", "sh"])
                if deps:
                    pipe.hmget(key("xo", eid), [str(index.pos[d]) for d in deps])
            got = iter(pipe.execute())
        out: list[tuple[bytes | None, StepInputs]] = []
        for deps in deps_of:
            (inp, sh), values = next(got), next(got) if deps else ()
            out.append(
                (sh, StepInputs(input=inp or b"", results=dict(zip(deps, values, strict=True))))
            )
        return out
