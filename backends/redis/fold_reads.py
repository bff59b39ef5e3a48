"""The step reads of a fast flow advance, asked of ``finish.lua`` ahead of it.

A step end's advance (``RedisFlows._fast``, deciding with ``fold.fold_fast``) reads the
states of the steps with pending events and of the dependents of those that succeeded
(``P:xs``), and those dependents' unmet counts (``P:xu``). For the ends of a ``finish``
batch, the jobs part knows which steps ended and, from the step index the flows part keeps,
their dependents: it names them in ``finish.lua``'s arguments (:func:`argv`), which reads
them with the execution's head, after the batch's ends are recorded. The advance then
answers its read from them (:class:`Prefetched`) when they cover it, and reads for itself
otherwise (events of steps another call ended, an index not known yet): one round trip less
per step end, the same values (read in one script, where the advance's own read comes later).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from queue_core.records.jobs import AttemptEnd, Outcome
from queue_core.rules.flows.decide_fast import StepIndex
from queue_core.storage.flows import step_of_job

__all__ = ["MAX_FIELDS", "Asked", "Prefetched", "argv", "asked_for"]

MAX_FIELDS = 1000
"""At most this many step fields are asked ahead per execution (a wider read is the
advance's own: ``HMGET`` takes its fields as one Lua ``unpack``)."""


@dataclass(slots=True)
class Asked:
    """What ``finish.lua`` is asked to read ahead for one execution."""

    steps: list[int] = field(default_factory=list)
    """The ended steps and their dependents (``P:xs`` fields)."""
    deps: list[int] = field(default_factory=list)
    """The dependents of the steps that succeeded (``P:xu`` fields)."""

    def prefetched(self, steps: Sequence[bytes | None], deps: Sequence[bytes | None]) -> Prefetched:
        """What ``finish.lua`` returned for this (the values of the fields asked, in
        order), field by field."""
        return Prefetched(
            dict(zip(self.steps, steps, strict=True)), dict(zip(self.deps, deps, strict=True))
        )


def asked_for(
    ends: Sequence[AttemptEnd], index_of: Callable[[str], StepIndex | None]
) -> dict[str, Asked]:
    """Per execution of a step job among ``ends`` whose step index is known
    (``index_of``), the reads its advance will make."""
    out: dict[str, Asked] = {}
    for end in ends:
        step = step_of_job(end.ref.job_id)
        if step is None:
            continue
        index = index_of(step[0])
        if index is None or step[1] >= len(index.ids):
            continue
        a = out.setdefault(step[0], Asked())
        a.steps.append(step[1])
        if end.outcome is Outcome.SUCCEEDED:
            a.deps += index.dependents[step[1]]
    for a in out.values():
        a.deps = list(dict.fromkeys(a.deps))
        a.steps = list(dict.fromkeys([*a.steps, *a.deps]))
        if len(a.steps) > MAX_FIELDS:
            a.steps, a.deps = [], []
    return {eid: a for eid, a in out.items() if a.steps}


def argv(asked: Mapping[str, Asked]) -> list[str | int]:
    """``finish.lua``'s read section: the count, then per execution its id and the two
    field lists (comma-separated step indexes)."""
    out: list[str | int] = [len(asked)]
    for eid, a in asked.items():
        out += (eid, ",".join(map(str, a.steps)), ",".join(map(str, a.deps)))
    return out


@dataclass(frozen=True, slots=True)
class Prefetched:
    """The step fields ``finish.lua`` read ahead for one execution, as stored."""

    steps: dict[int, bytes | None]
    deps: dict[int, bytes | None]

    def covers(self, steps: Sequence[int], deps: Sequence[int]) -> bool:
        """Whether the read of ``steps`` and ``deps`` can be answered from here."""
        return all(i in self.steps for i in steps) and all(
            d in self.steps and d in self.deps for d in deps
        )

    def values(
        self, steps: Sequence[int], deps: Sequence[int]
    ) -> tuple[list[bytes | None], list[bytes | None]]:
        """The stored values of ``P:xs`` for ``steps`` then ``deps``, and of ``P:xu`` for
        ``deps``, as the advance's own read returns them (call :meth:`covers` first)."""
        return [self.steps[i] for i in [*steps, *deps]], [self.deps[d] for d in deps]
