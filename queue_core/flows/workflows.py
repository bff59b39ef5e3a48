"""The workflows facade (SPEC §12): ``@queue.workflow``, ``workflow.start`` and
``queue.send_event``.

A :class:`Workflow` is a one-step flow definition (``FlowSpec.kind == "workflow"``) whose
step, the function step ``main``, runs the workflow function as the body of a task
registered under the workflow's name (:func:`queue_core.app.durable.workflow_body`).
``start(*args, **kwargs)`` stores an execution whose function job carries the call's
arguments; from then on storage runs it like a flow's execution (the same
``ExecutionHandle``, states, deadline, concurrency, CLI and dashboard), and the function
adds children at run time.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

from queue_core.app.durable import DurableContext, check_event, workflow_body
from queue_core.app.options import concurrency_slot_key
from queue_core.app.spec import build_spec
from queue_core.app.steps.jobs import build_execution
from queue_core.app.task import Concurrency, check_concurrency, check_name, default_task_name
from queue_core.flows.api import _invalid, _option_fields, new_execution_id
from queue_core.flows.handle import ExecutionHandle, workflows_of
from queue_core.flows.host import FlowHost
from queue_core.records.durations import parse_duration, to_ms
from queue_core.records.errors import ConfigError
from queue_core.records.workflows import FUNCTION_STEP
from queue_core.rules import RetryPolicy
from queue_core.rules.flows.spec import ConcurrencySpec, FlowSpec, StepSpec, retry_fields

if TYPE_CHECKING:
    from queue_core.app.options import TaskOptions
    from queue_core.app.task import Task

__all__ = ["Workflow", "send_event"]

P = ParamSpec("P")
R = TypeVar("R")


class Workflow(Generic[P, R]):
    """A durable workflow of a queue (SPEC §12), made by ``@queue.workflow``.

    Attributes:
        name: the workflow's name (its executions are listed under it, and its function
            runs as the task of that name).
        spec: its stored definition (one function step, ``main``).
        task: the task its function step runs.
    """

    def __init__(
        self,
        owner: FlowHost,
        fn: Callable[Concatenate[DurableContext, P], R]
        | Callable[Concatenate[DurableContext, P], Coroutine[Any, Any, R]],
        *,
        name: str | None = None,
        timeout: float | str | timedelta | None = None,
        retry: RetryPolicy | None = None,
        concurrency: Concurrency | int | None = None,
        queue: str | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"@queue.workflow expects a function, got {fn!r}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise _invalid("retry", retry, "a RetryPolicy(...) or None")
        self.name = check_name(name, "name") if name is not None else default_task_name(fn)
        conc = check_concurrency(concurrency)
        self._conc_key = None if conc is None else (conc.key if isinstance(conc.key, str) else None)
        self._conc_key_fn = None if conc is None or isinstance(conc.key, str) else conc.key
        self._owner = owner
        is_async = inspect.iscoroutinefunction(fn)
        options: TaskOptions = {"dont_retry_on": [ConfigError]}  # its own mistakes are fatal
        if retry is not None:
            options["retry"] = retry
        if queue is not None:
            options["queue"] = check_name(queue, "queue")
        if not is_async:
            options["isolation"] = "thread"  # never the worker's default "process"
        body = workflow_body(owner, fn)
        ts = build_spec(is_async=is_async, options=options)
        step = StepSpec(id=FUNCTION_STEP, kind="code", task=self.name, **_option_fields(ts, ()))
        self.spec = FlowSpec(
            name=self.name,
            kind="workflow",
            steps=(step,),
            concurrency=None if conc is None else ConcurrencySpec(conc.limit, conc.behavior),
            timeout_ms=None if timeout is None else to_ms(parse_duration(timeout, field="timeout")),
            retry=retry_fields(retry),
            queue=options.get("queue"),
        )
        self.task: Task[Any, Any] = owner.task(name=self.name, **options)(body)
        self.__wrapped__ = fn
        self.__doc__ = getattr(fn, "__doc__", None)

    def start(self, *args: P.args, **kwargs: P.kwargs) -> ExecutionHandle:
        """Start an execution of the workflow with these arguments (after its
        ``DurableContext``); it is ``running`` or ``queued`` (waiting for a concurrency
        place) when this returns, or ``skipped`` (a ``skip`` limit).

        Raises:
            TypeError: the arguments do not fit the function (nothing is stored).
            SerializationError: an argument cannot be serialized (nothing is stored).
            ConfigError: ``unsupported`` on a storage without ``SupportsWorkflows``; a bad
                concurrency key.
        """
        storage = workflows_of(self._owner)
        self.task.check_arguments(args, kwargs, "start")
        owner = self._owner
        conc_key = self._conc_key
        if self._conc_key_fn is not None:
            conc_key = concurrency_slot_key(self._conc_key_fn, self.name, args, kwargs)
        elif self.spec.concurrency is not None and conc_key is None:
            conc_key = self.name
        payload = owner.serializer.dumps_payload(args, kwargs)
        timeout = owner.default_timeout
        new = build_execution(
            self.spec,
            execution_id=new_execution_id(),
            input=owner.serializer.dumps_result({"args": list(args), "kwargs": kwargs}),
            empty_payload=payload,
            payload=payload,
            queue_defaults=owner.retry_policy,
            default_timeout_ms=None if timeout is None else to_ms(timeout),
            rng=random.random,
            conc_key=conc_key,
        )
        storage.start_execution(new)
        return ExecutionHandle(owner, new.id)

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r}>"


def send_event(owner: FlowHost, name: str, key: str | None = None, data: Any = None) -> int:
    """``queue.send_event``: store the event and wake every matching wait; how many."""
    check_event(name, key)
    payload = owner.serializer.dumps_result(data)
    return workflows_of(owner, "events").send_event(name, key, payload)
