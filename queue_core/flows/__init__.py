"""Flows: DAGs of steps with ``depends_on``, ``max_parallel``, an execution deadline and
execution concurrency (SPEC §7).

The parts that need no storage:

- :mod:`queue_core.flows.model`: states, reasons, public records and the serializable
  flow definition (:class:`FlowSpec`) stored with each execution;
- :mod:`queue_core.flows.dag`: validation (unknown or duplicate ids, cycles) and order;
- :mod:`queue_core.flows.decide`: the pure decisions storage applies atomically;
- :mod:`queue_core.flows.files`: YAML flow files (PyYAML + pydantic, imported lazily);
- :mod:`queue_core.flows.script`: running a ``type: script`` step as a subprocess.

Flows in storage and in the facade:

- :mod:`queue_core.flows.storage`: the ``SupportsFlows`` ability and its records;
- :mod:`queue_core.flows.jobs`: the step jobs the core computes at ``flow.start``;
- :mod:`queue_core.flows.calls`: a step's call, built by parameter name on the worker;
- :mod:`queue_core.flows.api`: ``Flow``, ``ExecutionHandle`` (``queue.flow`` & co.).

``model``, ``dag`` and ``decide`` read no clock and do no I/O; ``files`` and ``script`` are
imported only on demand, so importing :mod:`queue_core` never needs PyYAML or pydantic.

The names below are loaded from :mod:`queue_core.flows.model` on first use (PEP 562): a
worker with no flow never builds the flow records (worker start-up is spent on imports).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queue_core.flows.model import (
        ConcurrencySpec,
        ExecutionInfo,
        ExecutionReason,
        ExecutionState,
        FlowSpec,
        StepKind,
        StepRun,
        StepSpec,
        StepState,
    )

__all__ = [
    "ConcurrencySpec",
    "ExecutionInfo",
    "ExecutionReason",
    "ExecutionState",
    "FlowSpec",
    "StepKind",
    "StepRun",
    "StepSpec",
    "StepState",
]


if not TYPE_CHECKING:  # mypy sees the imports above; a typo stays an error for it

    def __getattr__(name: str) -> Any:
        if name in __all__:
            from queue_core.flows import model

            value = globals()[name] = getattr(model, name)
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
