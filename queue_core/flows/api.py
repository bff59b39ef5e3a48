"""The flows facade (SPEC §7): ``queue.flow(...)``, ``@flow.step``, ``flow.start``,
:class:`ExecutionHandle`, ``queue.execution(s)`` and ``queue.load_flow``.

A :class:`Flow` is a :class:`~queue_core.flows.FlowSpec` being declared: each
``@flow.step`` registers its function as a task of the queue (so a worker that imports
the module runs it by name) and adds a step. ``flow.start(input)`` computes every step's
job (:mod:`queue_core.app.steps.jobs`) and hands the execution to storage
(:class:`~queue_core.storage.abilities.SupportsFlows`), which runs it from then on: the
definition is stored with the execution, so no process needs the ``Flow`` object again.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, overload

from queue_core.app.context import JobContext
from queue_core.app.execution_control import controlled
from queue_core.app.options import concurrency_slot_key
from queue_core.app.steps.jobs import build_execution
from queue_core.app.task import (
    UNSET,
    Concurrency,
    Task,
    TaskOptions,
    TaskSpec,
    build_spec,
    check_concurrency,
    check_name,
    fq_name,
)
from queue_core.flows.handle import ExecutionHandle, flows_of
from queue_core.flows.host import FlowHost
from queue_core.flows.scheduled import FlowSchedule, schedule_options
from queue_core.records.durations import parse_duration, to_ms
from queue_core.records.errors import ConfigError, NotFound, SerializationError
from queue_core.rules import RetryPolicy
from queue_core.rules.flows import dag
from queue_core.rules.flows.spec import (
    ConcurrencySpec,
    FlowSpec,
    StepSpec,
    retry_fields,
)
from queue_core.storage.flows import NewExecution

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from queue_core.app.options import TaskOptions

__all__ = ["ExecutionHandle", "Flow", "flows_of", "load_flow"]


def _invalid(field: str, value: object, expected: str) -> ConfigError:
    return ConfigError(
        f"invalid {field}: {value!r} — expected {expected}",
        code="invalid_option",
        field=field,
        value=value,
    )


def _input_bytes(owner: FlowHost, flow: str, value: object) -> bytes:
    """An execution's input as stored (the serializer's result encoding).

    Raises:
        SerializationError: naming the flow and the input's type, before anything is
            stored (the serializer's own message speaks of a result).
    """
    try:
        return owner.serializer.dumps_result(value)
    except SerializationError as exc:
        raise SerializationError(
            f"the input of flow {flow!r} ({type(value).__name__}) cannot be serialized: {exc}"
        ) from None


def _ms(seconds: Any) -> int | None:
    return None if seconds is UNSET or seconds is None else to_ms(seconds)


def _step_spec(step_id: str, task_name: str, ts: TaskSpec, depends_on: tuple[str, ...]) -> StepSpec:
    """A code step from a task's validated options (only those given explicitly)."""
    return StepSpec(id=step_id, kind="code", task=task_name, **_option_fields(ts, depends_on))


def _option_fields(ts: TaskSpec, depends_on: tuple[str, ...]) -> dict[str, Any]:
    """The :class:`StepSpec` fields of a step's validated options and dependencies."""
    return dict(
        depends_on=depends_on,
        queue=None if ts.queue is UNSET else ts.queue,
        priority=None if ts.priority is UNSET else ts.priority,
        timeout_ms=None if ts.timeout is UNSET else (_ms(ts.timeout) or 0),
        heartbeat_ms=_ms(ts.heartbeat),
        schedule_to_start_ms=_ms(ts.schedule_to_start),
        isolation=None if ts.isolation is UNSET else ts.isolation,
        kill_grace_ms=_ms(ts.kill_grace),
        retry=retry_fields(ts.policy),
        retry_on=tuple(fq_name(c) for c in ts.retry_on),
        dont_retry_on=tuple(fq_name(c) for c in ts.dont_retry_on),
    )


_NOT_HTTP_OPTIONS = (
    "concurrency",
    "dead_letter_replay",
    "isolation",
    "kill_grace",
    "heartbeat",
    "unique_key",
    "unique_for",
    "rate_limit",
)
"""Task options that mean nothing for an http step (it runs no body of the queue's)."""


class Flow:
    """A flow of a queue: a DAG of steps with an execution-wide deadline (SPEC §7).

    Built by ``queue.flow(name, ...)`` (steps declared with :meth:`step`) or by
    ``queue.load_flow(path)`` (a YAML flow file; its steps are fixed).

    Attributes:
        name: the flow's name (executions are listed under it).
    """

    def __init__(
        self,
        owner: FlowHost,
        name: str,
        *,
        concurrency: Concurrency | int | None = None,
        max_parallel: int = 0,
        timeout: float | str | timedelta | None = None,
        retry: RetryPolicy | None = None,
        queue: str | None = None,
        spec: FlowSpec | None = None,
        schedule: FlowSchedule | None = None,
    ) -> None:
        self._owner = owner
        self.name = check_name(name, "name")
        conc = check_concurrency(concurrency)
        self._conc_key = None if conc is None else (f"{name}:{conc.key}" if conc.key else name)
        # a key function: the slot key is "<flow>:<key(input)>", computed by start()
        self._conc_key_fn = None if conc is None or isinstance(conc.key, str) else conc.key
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise _invalid("retry", retry, "a RetryPolicy(...) or None")
        timeout_ms = None if timeout is None else to_ms(parse_duration(timeout, field="timeout"))
        if spec is None:
            self._fields: dict[str, Any] = {
                "name": name,
                "concurrency": (
                    None if conc is None else ConcurrencySpec(conc.limit, conc.behavior)
                ),
                "max_parallel": max_parallel,
                "timeout_ms": timeout_ms,
                "retry": retry_fields(retry),
                "queue": None if queue is None else check_name(queue, "queue"),
            }
            self._steps: tuple[StepSpec, ...] = ()
            # the flow's own fields are checked now, with a stand-in step
            FlowSpec(**self._fields, steps=(StepSpec(id="_", kind="code", task="_"),))
            self._fixed = False
        else:
            self._conc_key = None if spec.concurrency is None else spec.name
            self._conc_key_fn = None
            self._fields = _spec_fields(spec)
            self._steps = spec.steps
            self._fixed = True
        self._ids = {s.id: i for i, s in enumerate(self._steps)}
        """Step id -> index, for checking each step added (``dag.check_next``)."""
        self._step_of_task: dict[int, str] = {}
        if schedule is not None:
            self._schedule(schedule, queue)

    def _schedule(self, schedule: FlowSchedule, queue: str | None) -> str:
        """Register the periodic task that starts this flow on ``schedule``; its name.

        The execution id is derived from the tick job's id, so a tick job that runs again
        (its worker died after starting the execution) finds the execution it started
        instead of starting a second one.

        Raises:
            ConfigError: a bad schedule (``invalid_option``, ``invalid_duration``,
                ``invalid_cron``, ``conflicting_options``), nothing registered.
        """
        options = schedule_options(schedule)
        input_value = options.pop("input", None)
        owner = self._owner
        _input_bytes(owner, self.name, input_value)  # refused now, not at every tick
        name = f"{self.name}.schedule"

        def start_scheduled(ctx: JobContext = JobContext.INJECTED) -> str:
            execution_id = hashlib.sha256(ctx.job_id.encode()).hexdigest()[:32]
            try:
                ExecutionHandle(owner, execution_id).status()  # this tick's job ran before
            except NotFound:
                self._start(input_value, execution_id)
            return execution_id

        start_scheduled.__qualname__ = start_scheduled.__name__ = name.replace(".", "_")
        if queue is not None:
            options["queue"] = queue
        owner.periodic(**options, name=name)(start_scheduled)
        return name

    @property
    def spec(self) -> FlowSpec:
        """The definition as declared so far (what each execution stores).

        Raises:
            ConfigError: ``invalid_flow`` while the flow has no step.
        """
        return FlowSpec(**self._fields, steps=self._steps)

    def __repr__(self) -> str:
        return f"<Flow {self.name!r} steps={[s.id for s in self._steps]}>"

    def _add(self, step: StepSpec) -> None:
        """Append a step that ``dag.check_next`` accepted."""
        self._ids[step.id] = len(self._steps)
        self._steps = (*self._steps, step)

    # ------------------------------------------------------------------ declaring

    @overload
    def step(self, func: Callable[..., Any], /) -> Task[Any, Any]: ...

    @overload
    def step(
        self,
        func: None = None,
        /,
        *,
        id: str | None = None,
        depends_on: Sequence[Task[Any, Any] | str] = (),
        **options: Unpack[TaskOptions],
    ) -> Callable[[Callable[..., Any]], Task[Any, Any]]: ...

    def step(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        id: str | None = None,
        depends_on: Sequence[Task[Any, Any] | str] = (),
        **options: Unpack[TaskOptions],
    ) -> Task[Any, Any] | Callable[[Callable[..., Any]], Task[Any, Any]]:
        """Declare a step: ``@flow.step`` or ``@flow.step(id=..., depends_on=[...], ...)``.

        The function is registered as a task of the queue named ``<flow>.<step id>``
        (a worker that imports the module declaring the flow knows it) and returned as
        that :class:`~queue_core.Task`. Its parameters
        named after a dependency receive that step's result; ``input`` receives the
        execution input; ``ctx`` the :class:`~queue_core.JobContext` (with
        ``ctx.execution_id`` and ``ctx.step_id``). Options are the task options of
        SPEC §2, merged queue defaults → flow → step; ``concurrency`` and
        ``dead_letter_replay`` are not step options.

        Raises:
            ConfigError: a bad option, an unknown dependency, a cycle, a duplicate id,
                or a flow loaded from a file (its steps are fixed).
            TypeError: an unknown option.
        """
        self._refuse_if_fixed()
        for bad in ("concurrency", "dead_letter_replay"):
            if options.get(bad) is not None:
                raise _invalid(
                    bad,
                    options.get(bad),
                    "no value: not a step option (flows take concurrency=, steps do not)",
                )
        deps = tuple(self._dep_id(d) for d in depends_on)
        build_spec(is_async=False, options=options)  # bad options fail before decoration

        def decorate(fn: Callable[..., Any]) -> Task[Any, Any]:
            step_id = id if id is not None else getattr(fn, "__name__", None)
            if not isinstance(step_id, str) or not step_id:
                raise _invalid("id", step_id, "a step id (the function's name by default)")
            ts = build_spec(is_async=inspect.iscoroutinefunction(fn), options=options)
            task_name = f"{self.name}.{step_id}"
            step = _step_spec(step_id, task_name, ts, deps)
            dag.check_next(step.node, self._ids)  # bad or duplicate id, unknown dependency
            task: Task[Any, Any] = self._owner.task(name=task_name, **options)(fn)
            self._add(step)
            self._step_of_task[builtins_id(task)] = step_id
            return task

        return decorate(func) if func is not None else decorate

    def http(
        self,
        id: str,
        url: str,
        *,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        expect: Sequence[int] | int = (),
        depends_on: Sequence[Task[Any, Any] | str] = (),
        **options: Unpack[TaskOptions],
    ) -> str:
        """Declare a ``type: http`` step: one request per attempt, run by any worker that
        allows its host (``http_hosts``), from the stored definition (no task is
        registered).

        ``url``, the values of ``headers`` and every string in ``body`` are templates
        (``{{ input.x }}``, ``{{ results.step_id }}``, ``{{ attempt }}``,
        ``{{ execution_id }}``, ``{{ secrets.NAME }}``) rendered at each attempt. A
        string ``body`` is sent as text, other data as JSON; ``expect`` lists the statuses
        that succeed (default any 2xx, else the attempt fails with reason
        ``http_status``). The result (the body parsed as JSON, else its text) goes to the
        dependents: a code step's parameter named after ``id`` receives it.

        Options are the task options that apply to a request: ``timeout`` (bounds the
        request), the retry options, ``queue``, ``priority``, ``schedule_to_start``.

        Returns:
            ``id``, to name in the ``depends_on`` of later steps.

        Raises:
            ConfigError: a bad field (``invalid_flow``, naming it; a template with a
                syntax error) or option, an unknown dependency, a duplicate id, a flow
                loaded from a file.
            TypeError: an unknown option.
        """
        self._refuse_if_fixed()
        for bad in _NOT_HTTP_OPTIONS:
            if options.get(bad) is not None:
                raise _invalid(bad, options.get(bad), "no value: not an option of http steps")
        ts = build_spec(is_async=True, options=options)
        if not isinstance(id, str) or not id:
            raise _invalid("id", id, "a step id (a non-empty string)")
        if isinstance(method, str):
            method = method.upper()
        step = StepSpec(
            id=id,
            kind="http",
            url=url,
            method=None if method == "GET" else method,
            headers=dict(headers or {}),
            body=body,
            expect=(expect,) if isinstance(expect, int) else tuple(expect),
            **_option_fields(ts, tuple(self._dep_id(d) for d in depends_on)),
        )
        _check_templates(step)
        dag.check_next(step.node, self._ids)  # bad or duplicate id, unknown dependency
        self._add(step)
        return id

    def _refuse_if_fixed(self) -> None:
        if self._fixed:
            raise ConfigError(
                f"flow {self.name!r} was loaded from {self._fields['source']}; its steps are "
                "fixed — declare steps on a flow made with queue.flow(...)",
                code="invalid_flow",
                field="steps",
            )

    def _dep_id(self, dep: Task[Any, Any] | str) -> str:
        if isinstance(dep, str):
            return dep
        found = self._step_of_task.get(builtins_id(dep))
        if found is None:
            raise _invalid("depends_on", dep, f"a step of flow {self.name!r} (or its id)")
        return found

    # ------------------------------------------------------------------ running

    def start(self, input: Any = None) -> ExecutionHandle:
        """Start an execution with ``input``; it is ``running`` or ``queued`` (waiting for
        a concurrency slot) when this returns — or ``skipped`` (``concurrency_limit``).

        Raises:
            ConfigError: ``unsupported`` when the storage lacks flows; ``invalid_flow``
                for a flow without steps; ``invalid_option`` when the concurrency key
                function returns anything but a non-empty string (nothing is stored).
            SerializationError: ``input`` cannot be serialized (nothing is stored).
        """
        return self._start(input, new_execution_id())

    def _start(self, input: Any, execution_id: str) -> ExecutionHandle:
        """:meth:`start` with a chosen execution id (a scheduled start derives it from
        its tick's job, so a retried tick job finds its execution instead of a second)."""
        flows = flows_of(self._owner)
        new = self.new_execution(input, execution_id)
        flows.start_execution(controlled(self._owner.storage(), new))
        return ExecutionHandle(self._owner, new.id)

    def new_execution(
        self, input: Any, execution_id: str, parent: tuple[str, int] | None = None
    ) -> NewExecution:
        """The execution of this flow for ``input`` as storage starts it (``parent``: a
        workflow's execution and step, for ``ctx.run_flow``).

        Raises:
            ConfigError: ``invalid_flow`` without steps; a bad concurrency key.
            SerializationError: ``input`` cannot be serialized.
        """
        if not self._steps:
            raise ConfigError(
                f"flow {self.name!r} has no steps — declare some with @flow.step",
                code="invalid_flow",
                field="steps",
            )
        owner = self._owner
        conc_key = self._conc_key
        if self._conc_key_fn is not None:
            conc_key = concurrency_slot_key(self._conc_key_fn, self.name, (input,), {})
        timeout = owner.default_timeout
        return build_execution(
            self.spec,
            execution_id=execution_id,
            input=_input_bytes(owner, self.name, input),
            empty_payload=owner.serializer.dumps_payload((), {}),
            queue_defaults=owner.retry_policy,
            default_timeout_ms=None if timeout is None else to_ms(timeout),
            rng=random.random,
            conc_key=conc_key,
            parent=parent,
        )


_ids_lock = threading.Lock()
_ids_last = [0, 0]  # epoch ms of the last id, sequence within it


def new_execution_id() -> str:
    """A time-ordered execution id, 32 hex digits: epoch ms (12), a sequence within that
    ms in this process (4), random (16). Queued executions are promoted oldest first by
    ``(created_at, id)`` (:func:`queue_core.rules.flows.decide.promote`); executions started in
    the same millisecond by one process therefore keep their start order (random ids
    made that order arbitrary)."""
    ms = time.time_ns() // 1_000_000
    with _ids_lock:
        if ms <= _ids_last[0]:
            ms = _ids_last[0]
            _ids_last[1] += 1
        else:
            _ids_last[0], _ids_last[1] = ms, 0
        seq = _ids_last[1] & 0xFFFF
    return f"{ms:012x}{seq:04x}{os.urandom(8).hex()}"


def builtins_id(obj: object) -> int:
    """Identity of a task object (``id`` is a parameter name in :meth:`Flow.step`)."""
    return id(obj)


def _spec_fields(spec: FlowSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "concurrency": spec.concurrency,
        "max_parallel": spec.max_parallel,
        "timeout_ms": spec.timeout_ms,
        "retry": spec.retry,
        "queue": spec.queue,
        "source": spec.source,
    }


def _check_templates(step: StepSpec) -> None:
    """Refuse a template field of ``step`` with a syntax error (``invalid_flow``)."""
    from queue_core.app.steps.templates import check_template, has_template

    fields = [("url", step.url)]
    fields += [(f"headers.{k}", v) for k, v in step.headers.items()]
    pending: list[tuple[str, Any]] = [("body", step.body)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, str):
            fields.append((path, value))
        elif isinstance(value, Mapping):
            pending.extend((f"{path}.{k}", v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            pending.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
    for path, text in fields:
        problem = None if text is None or not has_template(text) else check_template(text)
        if problem is not None:
            where = f"step {step.id!r}.{path}"
            raise ConfigError(f"{where}: {problem}", code="invalid_flow", field=where, value=text)


def load_flow(owner: FlowHost, path: str | os.PathLike[str]) -> Flow:
    """A flow from a YAML flow file (:func:`queue_core.app.steps.files.load_flow_file`)."""
    from queue_core.app.steps.files import load_flow_file

    spec = load_flow_file(path)
    return Flow(owner, spec.name, spec=spec)
