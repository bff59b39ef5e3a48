"""Flows: DAGs of steps with ``depends_on``, ``max_parallel``, an execution deadline and
execution concurrency (SPEC §7).

The parts that need no storage:

- :mod:`queue_core.rules.flows.spec`: states, reasons, public records and the serializable
  flow definition (:class:`FlowSpec`) stored with each execution;
- :mod:`queue_core.rules.flows.dag`: validation (unknown or duplicate ids, cycles) and order;
- :mod:`queue_core.rules.flows.decide`: the pure decisions storage applies atomically;
- :mod:`queue_core.app.steps.files`: YAML flow files (PyYAML + pydantic, imported lazily);
- :mod:`queue_core.app.steps.script`: running a ``type: script`` step as a subprocess;
- :mod:`queue_core.app.steps.http`: a ``type: http`` step's request (httpx, lazily);
- :mod:`queue_core.app.steps.templates`: step templates in a sandbox (Jinja2, lazily) and
  the masking of secrets;
- :mod:`queue_core.app.steps.gate`, :mod:`queue_core.app.steps.run`: what a worker allows,
  and one attempt of a script or http step on a worker.

Flows in storage and in the facade:

- :mod:`queue_core.storage.flows`: the ``SupportsFlows`` ability and its records;
- :mod:`queue_core.app.steps.jobs`: the step jobs the core computes at ``flow.start``;
- :mod:`queue_core.app.steps.calls`: a step's call, built by parameter name on the worker;
- :mod:`queue_core.flows.api`: ``Flow``, ``ExecutionHandle`` (``queue.flow`` & co.);
- :mod:`queue_core.flows.workflows`: ``Workflow`` (``@queue.workflow``, SPEC §12) and
  :mod:`queue_core.flows.handle`: ``ExecutionHandle`` (with ``retry()``, ``replay()``,
  ``history()``).

``model``, ``dag`` and ``decide`` read no clock and do no I/O; ``files`` and ``script`` are
imported only on demand, so importing :mod:`queue_core` never needs PyYAML or pydantic.

The names below are loaded from :mod:`queue_core.rules.flows.spec` on first use (PEP 562): a
worker with no flow never builds the flow records (worker start-up is spent on imports).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queue_core.records.flows import (
        ExecutionInfo,
        ExecutionReason,
        ExecutionState,
        StepRun,
        StepState,
    )
    from queue_core.records.workflows import HistoryEntry
    from queue_core.rules.flows.spec import (
        ConcurrencySpec,
        FlowSpec,
        StepKind,
        StepSpec,
    )

__all__ = [
    "ConcurrencySpec",
    "ExecutionInfo",
    "ExecutionReason",
    "ExecutionState",
    "FlowSpec",
    "HistoryEntry",
    "StepKind",
    "StepRun",
    "StepSpec",
    "StepState",
]


if not TYPE_CHECKING:  # mypy sees the imports above; a typo stays an error for it

    def __getattr__(name: str) -> Any:
        if name in __all__:
            from queue_core.records import flows as records
            from queue_core.records import workflows
            from queue_core.rules.flows import spec

            source = next(m for m in (records, workflows, spec) if hasattr(m, name))
            value = globals()[name] = getattr(source, name)
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
