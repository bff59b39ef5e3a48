"""Flow control of flow executions (SPEC §13) at start: the abilities an execution's concurrency
behaviour needs, and its step jobs under ``round_robin``.

``cancel_in_progress`` and ``latest`` are judged at start by
:func:`~queue_core.rules.flows.decide.admit` and applied by a storage with
:class:`~queue_core.storage.control.SupportsSupersede`. ``round_robin`` admits like
``queue`` (per key), and the step jobs of the flow's executions are claimed in turns over
the executions' keys (group: the flow's name), so one tenant's burst of executions does
not hold back another's steps.
"""

from __future__ import annotations

import dataclasses

from queue_core.app.control import SUPERSEDING
from queue_core.app.limited import require
from queue_core.storage.abilities import SupportsRoundRobin, SupportsSupersede
from queue_core.storage.flows import NewExecution

__all__ = ["controlled"]


def controlled(storage: object, new: NewExecution) -> NewExecution:
    """``new`` as its concurrency behaviour needs it stored; checks that ``storage`` can.

    Raises:
        ConfigError: ``invalid_option`` naming the ability the storage lacks (nothing is
            stored).
    """
    conc = new.concurrency
    if conc is None or conc.behavior in ("queue", "skip"):
        return new
    if conc.behavior in SUPERSEDING:
        require(storage, f"concurrency behavior {conc.behavior!r}", SupportsSupersede)
        return new
    require(storage, "concurrency behavior 'round_robin'", SupportsRoundRobin)
    jobs = tuple(
        dataclasses.replace(
            job,
            concurrency_key=new.conc_key,
            concurrency_limit=None,  # the execution holds the limit; steps only take turns
            concurrency_behavior="round_robin",
            concurrency_group=new.flow,
        )
        for job in new.jobs
    )
    return dataclasses.replace(new, jobs=jobs)
