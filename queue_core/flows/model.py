"""Flow states, reasons, public records and the serializable flow definition (SPEC §7).

The flow definition (:class:`FlowSpec`) is stored with each execution as stable JSON
(:meth:`FlowSpec.to_json`), so any worker of the queue runs an execution's steps without
importing the flow's module or loading its file. Times inside a spec are integer
milliseconds (``*_ms``), like the rest of the storage protocol.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Final, Literal

from queue_core.errors import ConfigError
from queue_core.flows import dag
from queue_core.model import AttemptRecord, _MappingMixin
from queue_core.policy import RetryPolicy, merge_policies

__all__ = [
    "FORMAT",
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

FORMAT: Final = 1
"""Version of the JSON form of :class:`FlowSpec`; :meth:`FlowSpec.from_json` refuses others."""


class ExecutionState(str, Enum):
    """The state of a flow execution (SPEC §7)."""

    QUEUED = "queued"
    """Waiting for an execution ``concurrency`` slot (``behavior="queue"``)."""
    RUNNING = "running"
    CANCELLING = "cancelling"
    """Cancel requested: running steps are being stopped; no step starts."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """A step ended without succeeding (reason ``step_failed``)."""
    TIMED_OUT = "timed_out"
    """The execution ``timeout`` passed (reason ``flow_timeout``)."""
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    """Not run: a ``skip`` concurrency limit was reached at start (``concurrency_limit``)."""

    @property
    def finished(self) -> bool:
        """``True`` for the final states."""
        return self not in _ACTIVE_EXECUTION

    def __str__(self) -> str:
        return self.value


_ACTIVE_EXECUTION: Final = frozenset(
    {ExecutionState.QUEUED, ExecutionState.RUNNING, ExecutionState.CANCELLING}
)


class StepState(str, Enum):
    """The state of one step of an execution: ``pending``, the job states of §5, ``not_run``."""

    PENDING = "pending"
    """Waiting for its dependencies or for a ``max_parallel`` place; no job exists yet."""
    QUEUED = "queued"
    """Its job is queued: ready, or waiting in a retry backoff."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    TIMED_OUT = "timed_out"
    """Stopped by the execution's deadline (attempt reason ``flow_timeout``)."""
    NOT_RUN = "not_run"
    """Its execution ended before it could start (or before its retry could)."""

    @property
    def finished(self) -> bool:
        """``True`` once the step can change no more."""
        return self not in _ACTIVE_STEP

    def __str__(self) -> str:
        return self.value


_ACTIVE_STEP: Final = frozenset({StepState.PENDING, StepState.QUEUED, StepState.RUNNING})


class ExecutionReason(str, Enum):
    """Why an execution (or a ``not_run`` step) ended as it did (SPEC §7)."""

    STEP_FAILED = "step_failed"
    FLOW_TIMEOUT = "flow_timeout"
    CANCELLED = "cancelled"
    CONCURRENCY_LIMIT = "concurrency_limit"

    def __str__(self) -> str:
        return self.value


StepKind = Literal["code", "script", "task"]
"""``code``: a function declared with ``@flow.step`` (run as its registered task);
``task``: a registered task named in a flow file; ``script``: a file run as a subprocess."""
_KINDS: Final = ("code", "script", "task")


# --------------------------------------------------------------------------- public records


@dataclass(frozen=True, slots=True, kw_only=True, eq=True)
class ExecutionInfo(_MappingMixin):
    """One execution as ``queue.executions()`` lists it (SPEC §7); JSON uses these names."""

    id: str
    flow: str
    state: ExecutionState
    reason: ExecutionReason | None
    created_at: datetime
    started_at: datetime | None
    """When it left ``queued``; ``None`` while queued, or if it never started."""
    finished_at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=True)
class StepRun(_MappingMixin):
    """One step of an execution (SPEC §7): ``execution.steps()`` returns these."""

    step_id: str
    state: StepState
    reason: str | None
    """The job's reason (``retries_exhausted``, ``fatal``, …), ``flow_timeout`` for a step
    stopped by the deadline, or for ``not_run`` the execution's reason."""
    job_id: str | None
    """``None`` while ``pending`` (no job exists before a step is ready)."""
    attempts: list[AttemptRecord] = field(default_factory=list)
    """Every attempt record of the step's job (SPEC §5), oldest first."""


# --------------------------------------------------------------------------- definition


def _bad(path: str, value: object, expected: str) -> ConfigError:
    return ConfigError(
        f"{path}: invalid value {value!r} — expected {expected}",
        code="invalid_flow",
        field=path,
        value=value,
    )


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _opt_ms(value: object, path: str, *, allow_zero: bool = False) -> int | None:
    low = 0 if allow_zero else 1
    if value is None:
        return None
    if not _is_int(value) or int(value) < low:  # type: ignore[call-overload]
        raise _bad(path, value, f"an integer number of milliseconds >= {low}, or null")
    return int(value)  # type: ignore[call-overload,no-any-return]


def _opt_str(value: object, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _bad(path, value, "a non-empty string or null")
    return value


def _names(value: object, path: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise _bad(path, value, "a list of strings")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise _bad(f"{path}[{i}]", item, "a non-empty string")
    return tuple(value)


def _retry_fields(value: object, path: str) -> dict[str, Any]:
    """Validate explicit retry fields through :class:`RetryPolicy`; JSON-ready copy."""
    if not isinstance(value, Mapping):
        raise _bad(path, value, "a mapping of RetryPolicy fields")
    try:
        policy = RetryPolicy(**value)
    except TypeError as exc:
        raise _bad(path, dict(value), f"RetryPolicy fields only ({exc})") from None
    except ConfigError as exc:
        raise ConfigError(
            f"{path}.{exc.field}: {exc}", code="invalid_flow", field=f"{path}.{exc.field}",
            value=exc.value,
        ) from None
    return _policy_fields(policy)


def _policy_fields(policy: RetryPolicy) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted(policy.explicit):
        v = getattr(policy, name)
        out[name] = list(v) if isinstance(v, tuple) else v
    return out


def retry_fields(policy: RetryPolicy | None) -> dict[str, Any]:
    """The explicitly given fields of ``policy`` in the JSON form a spec stores."""
    return {} if policy is None else _policy_fields(policy)


@dataclass(frozen=True, slots=True)
class ConcurrencySpec:
    """Execution concurrency of a flow: at most ``limit`` active executions.

    ``queue``: a new execution stays ``queued`` until fewer than ``limit`` are
    ``running``/``cancelling``, oldest first. ``skip``: a new execution ends ``skipped``
    (``concurrency_limit``) when ``limit`` are ``queued``/``running``/``cancelling``.
    """

    limit: int
    behavior: Literal["queue", "skip"] = "queue"

    def __post_init__(self) -> None:
        if not _is_int(self.limit) or not 1 <= int(self.limit) <= 1_000_000:
            raise _bad("concurrency.limit", self.limit, "an integer from 1 to 1000000")
        if self.behavior not in ("queue", "skip"):
            raise _bad("concurrency.behavior", self.behavior, "'queue' or 'skip'")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepSpec:
    """One step of a flow definition, in the form stored with each execution.

    Option fields left ``None`` were not given: the step inherits them (queue defaults →
    flow → step). ``timeout_ms == 0`` means the step gave ``timeout=None`` (no limit).
    """

    id: str
    kind: StepKind
    depends_on: tuple[str, ...] = ()
    task: str | None = None
    """``code`` / ``task``: the registered task name the worker runs."""
    file: str | None = None
    """``script``: absolute path of the file to run (resolved from the flow file)."""
    queue: str | None = None
    priority: int | None = None
    timeout_ms: int | None = None
    """Bound on one attempt; ``None`` = inherit, ``0`` = no limit."""
    heartbeat_ms: int | None = None
    schedule_to_start_ms: int | None = None
    isolation: Literal["thread", "process"] | None = None
    kill_grace_ms: int | None = None
    retry: Mapping[str, Any] = field(default_factory=dict)
    """The step's explicitly given :class:`RetryPolicy` fields (seconds for durations)."""
    retry_on: tuple[str, ...] = ()
    """Fully qualified exception class names (``retry_on``)."""
    dont_retry_on: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        p = f"step {self.id!r}"
        if self.kind not in _KINDS:
            raise _bad(f"{p}.kind", self.kind, "'code', 'script' or 'task'")
        object.__setattr__(self, "depends_on", _names(self.depends_on, f"{p}.depends_on"))
        if self.kind == "script":
            if not isinstance(self.file, str) or not self.file or self.task is not None:
                raise _bad(f"{p}.file", self.file, "a script step names a file and no task")
        elif not isinstance(self.task, str) or not self.task or self.file is not None:
            raise _bad(f"{p}.task", self.task, f"a {self.kind} step names a task and no file")
        _opt_str(self.queue, f"{p}.queue")
        if self.priority is not None and not _is_int(self.priority):
            raise _bad(f"{p}.priority", self.priority, "an integer or null")
        _opt_ms(self.timeout_ms, f"{p}.timeout_ms", allow_zero=True)
        for name in ("heartbeat_ms", "schedule_to_start_ms", "kill_grace_ms"):
            _opt_ms(getattr(self, name), f"{p}.{name}")
        if self.isolation not in (None, "thread", "process"):
            raise _bad(f"{p}.isolation", self.isolation, "'thread', 'process' or null")
        object.__setattr__(self, "retry", _retry_fields(self.retry, f"{p}.retry"))
        object.__setattr__(self, "retry_on", _names(self.retry_on, f"{p}.retry_on"))
        object.__setattr__(
            self, "dont_retry_on", _names(self.dont_retry_on, f"{p}.dont_retry_on")
        )

    @property
    def node(self) -> dag.Node:
        """The step as :mod:`queue_core.flows.dag` sees it."""
        return dag.Node(self.id, self.depends_on, results_as_parameters=self.kind != "script")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (every field, in a fixed order)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "depends_on": list(self.depends_on),
            "task": self.task,
            "file": self.file,
            "queue": self.queue,
            "priority": self.priority,
            "timeout_ms": self.timeout_ms,
            "heartbeat_ms": self.heartbeat_ms,
            "schedule_to_start_ms": self.schedule_to_start_ms,
            "isolation": self.isolation,
            "kill_grace_ms": self.kill_grace_ms,
            "retry": dict(self.retry),
            "retry_on": list(self.retry_on),
            "dont_retry_on": list(self.dont_retry_on),
        }

    @classmethod
    def from_dict(cls, data: object, *, path: str = "step") -> StepSpec:
        """Rebuild a step from :meth:`to_dict` output; unknown keys are refused."""
        if not isinstance(data, Mapping):
            raise _bad(path, data, "a mapping")
        unknown = sorted(set(data) - _STEP_KEYS)
        if unknown:
            raise _bad(f"{path}.{unknown[0]}", data[unknown[0]], "no such step field")
        if "id" not in data or "kind" not in data:
            raise _bad(path, dict(data), "a step with 'id' and 'kind'")
        kwargs = dict(data)
        for name in ("depends_on", "retry_on", "dont_retry_on"):
            if name in kwargs:
                kwargs[name] = _names(kwargs[name], f"{path}.{name}")
        try:
            return cls(**kwargs)
        except ConfigError as exc:
            # name the step by its position in the stored list, as the other paths do
            named = f"step {data['id']!r}"
            field_path = (exc.field or path).replace(named, path)
            raise ConfigError(
                str(exc).replace(named, path), code=exc.code, field=field_path, value=exc.value
            ) from None


_STEP_KEYS: Final = frozenset(
    StepSpec.__dataclass_fields__
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowSpec:
    """A flow definition: its steps and the limits of its executions (SPEC §7).

    Validated at construction: the step graph by :func:`queue_core.flows.dag.validate`
    (``ConfigError`` ``invalid_flow`` naming ``steps[i]...``), the options by the same
    rules as task options.
    """

    name: str
    steps: tuple[StepSpec, ...]
    concurrency: ConcurrencySpec | None = None
    max_parallel: int = 0
    """At most this many steps of one execution running at once; ``0`` = no limit."""
    timeout_ms: int | None = None
    """Execution deadline, counted from the moment the execution is ``running``."""
    retry: Mapping[str, Any] = field(default_factory=dict)
    """The flow's explicitly given :class:`RetryPolicy` fields (merge: queue → flow → step)."""
    queue: str | None = None
    """Queue of the steps' jobs unless a step names its own; ``None`` = ``"default"``."""
    source: str | None = None
    """The flow file this spec was loaded from, if any (for display)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise _bad("name", self.name, "a non-empty string")
        if isinstance(self.steps, (str, bytes)) or not isinstance(self.steps, Sequence):
            raise _bad("steps", self.steps, "a list of StepSpec")
        steps = tuple(self.steps)
        for i, step in enumerate(steps):
            if not isinstance(step, StepSpec):
                raise _bad(f"steps[{i}]", step, "a StepSpec")
        object.__setattr__(self, "steps", steps)
        if self.concurrency is not None and not isinstance(self.concurrency, ConcurrencySpec):
            raise _bad("concurrency", self.concurrency, "a ConcurrencySpec or null")
        if not _is_int(self.max_parallel) or int(self.max_parallel) < 0:
            raise _bad("max_parallel", self.max_parallel, "an integer >= 0 (0 = no limit)")
        _opt_ms(self.timeout_ms, "timeout_ms")
        object.__setattr__(self, "retry", _retry_fields(self.retry, "retry"))
        _opt_str(self.queue, "queue")
        _opt_str(self.source, "source")
        dag.validate([s.node for s in steps], collection="steps")

    # ------------------------------------------------------------------ reading

    def step(self, step_id: str) -> StepSpec:
        """The step with this id (``KeyError`` when there is none)."""
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    def order(self) -> list[str]:
        """Step ids in a stable topological order (dependencies first)."""
        return dag.topological_order([s.node for s in self.steps])

    def step_policy(self, step_id: str, queue_defaults: RetryPolicy | None = None) -> RetryPolicy:
        """The retry policy of a step: queue defaults → flow → step, field by field."""
        step = self.step(step_id)
        return merge_policies(
            queue_defaults, RetryPolicy(**self.retry), RetryPolicy(**step.retry)
        )

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form: every field, steps in definition order."""
        return {
            "format": FORMAT,
            "name": self.name,
            "concurrency": (
                None
                if self.concurrency is None
                else {"limit": self.concurrency.limit, "behavior": self.concurrency.behavior}
            ),
            "max_parallel": self.max_parallel,
            "timeout_ms": self.timeout_ms,
            "retry": dict(self.retry),
            "queue": self.queue,
            "source": self.source,
            "steps": [s.to_dict() for s in self.steps],
        }

    def to_json(self) -> str:
        """Stable JSON: sorted keys, no whitespace; equal specs give equal text."""
        return json.dumps(
            self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
            allow_nan=False,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> FlowSpec:
        """Rebuild a spec from :meth:`to_json` output.

        Raises:
            ConfigError: ``invalid_flow`` for text that is not a valid spec of this
                :data:`FORMAT`, naming the bad field.
        """
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(
                f"flow definition is not JSON: {exc}", code="invalid_flow", value=text
            ) from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: object) -> FlowSpec:
        """Rebuild a spec from :meth:`to_dict` output; unknown keys are refused."""
        if not isinstance(data, Mapping):
            raise _bad("flow", data, "a JSON object")
        if data.get("format") != FORMAT:
            raise _bad("format", data.get("format"), f"{FORMAT} (this version's format)")
        unknown = sorted(set(data) - _FLOW_KEYS - {"format"})
        if unknown:
            raise _bad(unknown[0], data[unknown[0]], "no such flow field")
        raw_steps = data.get("steps")
        if not isinstance(raw_steps, list):
            raise _bad("steps", raw_steps, "a list of steps")
        steps = tuple(
            StepSpec.from_dict(s, path=f"steps[{i}]") for i, s in enumerate(raw_steps)
        )
        conc = data.get("concurrency")
        concurrency: ConcurrencySpec | None = None
        if conc is not None:
            if not isinstance(conc, Mapping) or set(conc) - {"limit", "behavior"}:
                raise _bad("concurrency", conc, "null or {limit, behavior}")
            concurrency = ConcurrencySpec(conc.get("limit"), conc.get("behavior", "queue"))  # type: ignore[arg-type]
        kwargs = {k: v for k, v in data.items() if k not in ("format", "steps", "concurrency")}
        return cls(steps=steps, concurrency=concurrency, **kwargs)


_FLOW_KEYS: Final = frozenset(FlowSpec.__dataclass_fields__)
