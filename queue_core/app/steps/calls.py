"""How a worker builds a step's call from the stored inputs (SPEC §7).

A step job's payload carries no arguments; when a worker claims it, it reads the
execution input and its dependencies' results (``get_step_inputs``) and passes them by
parameter name: a parameter named after a dependency receives that step's result,
``input`` the execution input (``ctx`` is the worker's, as for any task). A body that
takes ``**kwargs`` receives all of them. Pure: the caller passes the decoder.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from queue_core.storage.flows import StepInputs

__all__ = ["step_kwargs", "step_values"]


def step_values(inputs: StepInputs, loads: Callable[[bytes], Any]) -> tuple[Any, dict[str, Any]]:
    """The decoded execution input and ``{dependency id: result}``."""
    results = {dep: None if raw is None else loads(raw) for dep, raw in inputs.results.items()}
    return loads(inputs.input), results


def step_kwargs(
    signature: inspect.Signature | None, inputs: StepInputs, loads: Callable[[bytes], Any]
) -> dict[str, Any]:
    """The keyword arguments of a step's body (``signature`` without ``ctx``).

    ``None`` (a signature that cannot be inspected) passes everything.
    """
    value, results = step_values(inputs, loads)
    offered = {"input": value, **results}
    if signature is None or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()
    ):
        return offered
    return {name: v for name, v in offered.items() if name in signature.parameters}
