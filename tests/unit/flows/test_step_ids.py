"""SPEC §7: only a dependency id that a step takes as a parameter must be an identifier.

``@flow.step(id="fetch-users")`` with a dependent that takes no parameter of it, in code
and in a YAML flow file (``type: task`` and ``type: script`` steps), declared and run
to success by a worker; a body with ``**kwargs`` receives the result under its id.
"""

from __future__ import annotations

from typing import Any

import pytest

from queue_core import ConfigError, Queue
from queue_core.records.flows import ExecutionState


def test_a_code_flow_with_a_dashed_step_id_runs() -> None:
    queue = Queue("memory://")
    flow = queue.flow("users")

    @flow.step(id="fetch-users")
    def fetch() -> list[str]:
        return ["ann", "bob"]

    @flow.step(depends_on=[fetch])
    def report() -> str:  # takes no parameter of fetch-users
        return "reported"

    @flow.step(depends_on=["fetch-users"])
    def count(**results: Any) -> int:  # receives it under its id
        return len(results["fetch-users"])

    execution = flow.start()
    queue.run_worker(burst=True, install_signal_handlers=False)
    assert execution.status() is ExecutionState.SUCCEEDED
    assert execution.result(timeout=1) == {
        "fetch-users": ["ann", "bob"],
        "report": "reported",
        "count": 2,
    }


def test_a_dependency_named_like_a_reserved_parameter_is_still_refused() -> None:
    flow = Queue("memory://").flow("reserved")

    @flow.step(id="input")
    def first() -> int:
        return 1

    with pytest.raises(ConfigError) as info:

        @flow.step(depends_on=["input"])
        def second(input: Any) -> None: ...

    assert info.value.code == "invalid_flow"
    assert "'input' is the parameter of the execution input" in str(info.value)
