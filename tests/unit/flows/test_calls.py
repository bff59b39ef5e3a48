"""A step's call is built by parameter name from the stored inputs."""

from __future__ import annotations

import inspect
import json
from typing import Any

from queue_core.app.steps.calls import step_kwargs
from queue_core.storage.flows import StepInputs

INPUTS = StepInputs(input=b'{"day": 1}', results={"a": b"3", "b": b'"x"'})


def _sig(fn: Any) -> inspect.Signature:
    return inspect.signature(fn)


def test_parameters_named_after_dependencies_and_input_receive_values() -> None:
    def step(a: int, input: dict[str, int]) -> None: ...

    assert step_kwargs(_sig(step), INPUTS, json.loads) == {"a": 3, "input": {"day": 1}}


def test_unasked_values_are_not_passed_and_var_kwargs_get_all() -> None:
    def none() -> None: ...

    def everything(**kw: Any) -> None: ...

    assert step_kwargs(_sig(none), INPUTS, json.loads) == {}
    assert step_kwargs(_sig(everything), INPUTS, json.loads) == {
        "input": {"day": 1},
        "a": 3,
        "b": "x",
    }
    assert step_kwargs(None, StepInputs(input=b"null"), json.loads) == {"input": None}
