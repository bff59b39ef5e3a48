"""A storage fault inside a workflow's attempt (a memo write, the read of its run) is not
the workflow's failure: found by the chaos drain through a Redis restart
(tests/chaos/test_chaos_durable.py), shown here on memory with one injected fault."""

from __future__ import annotations

from typing import Any

import pytest

from backends.memory import MemoryStorage
from queue_core import DurableContext, Queue, RetryPolicy
from queue_core.records.errors import ExecutionFailed, SerializationError, StorageUnavailable


class _Flaky(MemoryStorage):
    """Memory whose ``faults`` next calls of ``fail_on`` raise ``StorageUnavailable``."""

    fail_on = "put_memo"
    faults = 1

    def put_memo(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail_on == "put_memo" and self.faults:
            self.faults -= 1
            raise StorageUnavailable("Connection closed by server.")
        return super().put_memo(*args, **kwargs)

    def workflow_state(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail_on == "workflow_state" and self.faults:
            self.faults -= 1
            raise StorageUnavailable("Connection closed by server.")
        return super().workflow_state(*args, **kwargs)


@pytest.mark.parametrize("fail_on", ["put_memo", "workflow_state"])
def test_a_storage_fault_in_a_workflow_attempt_spends_no_attempt(fail_on: str) -> None:
    storage = _Flaky()
    storage.fail_on = fail_on
    queue = Queue(storage=storage)
    calls: list[int] = []

    def fetch() -> int:
        calls.append(1)
        return 7

    @queue.workflow(retry=RetryPolicy(max_attempts=1))
    def wf(ctx: DurableContext) -> int:
        return int(ctx.step("fetch", fetch)) + 1

    execution = wf.start()
    queue.run_worker(burst=True, install_signal_handlers=False)
    try:
        assert execution.result(timeout=5) == 8
        assert len(calls) == 1 if fail_on == "workflow_state" else len(calls) == 2
    finally:
        queue.close()


def test_the_same_error_raised_by_the_workflows_own_code_is_its_failure() -> None:
    """Only queue-core's own storage calls are given back unspent: a body that raises
    ``StorageUnavailable`` itself fails like any body (the marker is not on the class)."""
    queue = Queue(storage=MemoryStorage())

    @queue.workflow(retry=RetryPolicy(max_attempts=1))
    def wf(ctx: DurableContext) -> int:
        raise StorageUnavailable("the body's own client")

    execution = wf.start()
    queue.run_worker(burst=True, install_signal_handlers=False)
    try:
        with pytest.raises(ExecutionFailed):
            execution.result(timeout=5)
    finally:
        queue.close()


def test_a_step_result_larger_than_storage_keeps_raises_at_the_step() -> None:
    """``SupportsResultLimit`` (SQS: 1.5 MB): a ``ctx.step`` result too large to store
    raises ``SerializationError`` naming both sizes where the step is called, before any
    write -- not a ``StorageError`` from the storage that cannot keep it."""

    class Bounded(MemoryStorage):
        def max_result_bytes(self) -> int:
            return 200

    storage = Bounded()
    queue = Queue(storage=storage)

    @queue.workflow(retry=RetryPolicy(max_attempts=1))
    def wf(ctx: DurableContext) -> str:
        small = ctx.step("small", lambda: "x" * 10)
        try:
            ctx.step("big", lambda: "x" * 300)
        except SerializationError as exc:
            return f"{small} {exc}"
        return "stored"

    execution = wf.start()
    queue.run_worker(burst=True, install_signal_handlers=False)
    try:
        said = execution.result(timeout=5)
        assert said.startswith("x" * 10 + " ctx.step result of 302 bytes"), said
        assert "(200 bytes)" in said
        state = storage.workflow_state(execution.id)
        assert state is not None and set(state.memos) == {"s:small"}
    finally:
        queue.close()
