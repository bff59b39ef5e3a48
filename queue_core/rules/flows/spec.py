"""The serializable flow definition stored with each execution, validated (SPEC §7).

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
from typing import Any, Final, Literal

from queue_core.records.errors import ConfigError
from queue_core.rules import RetryPolicy, merge_policies
from queue_core.rules.control import BEHAVIORS
from queue_core.rules.flows import dag

__all__ = [
    "FORMAT",
    "HTTP_METHODS",
    "ConcurrencySpec",
    "FlowSpec",
    "StepKind",
    "StepSpec",
]

HTTP_METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
"""The methods a ``type: http`` step may use."""
FORMAT: Final = 1
"""Version of the JSON form of :class:`FlowSpec`; :meth:`FlowSpec.from_json` refuses others."""


StepKind = Literal["code", "script", "task", "http"]
"""``code``: a function declared with ``@flow.step`` (run as its registered task);
``task``: a registered task named in a flow file; ``script``: a file run as a subprocess;
``http``: one HTTP request per attempt (``flow.http(...)`` or ``type: http``)."""
_KINDS: Final = ("code", "script", "task", "http")
_RUN_BY_DEFINITION: Final = ("script", "http")
"""Kinds the worker runs from the stored definition (no registered task, no parameters)."""


# --------------------------------------------------------------------------- public records


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
            f"{path}.{exc.field}: {exc}",
            code="invalid_flow",
            field=f"{path}.{exc.field}",
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
    """Execution concurrency of a flow: at most ``limit`` active executions (per key).

    ``queue``: a new execution stays ``queued`` until fewer than ``limit`` are
    ``running``/``cancelling``, oldest first. ``skip``: a new execution ends ``skipped``
    (``concurrency_limit``) when ``limit`` are ``queued``/``running``/``cancelling``.
    ``round_robin``, ``cancel_in_progress``, ``latest``: SPEC §13, see
    :func:`~queue_core.rules.flows.decide.admit`.
    """

    limit: int
    behavior: Literal["queue", "skip", "round_robin", "cancel_in_progress", "latest"] = "queue"

    def __post_init__(self) -> None:
        if not _is_int(self.limit) or not 1 <= int(self.limit) <= 1_000_000:
            raise _bad("concurrency.limit", self.limit, "an integer from 1 to 1000000")
        if self.behavior not in BEHAVIORS:
            expected = ", ".join(repr(b) for b in BEHAVIORS)
            raise _bad("concurrency.behavior", self.behavior, f"one of {expected}")


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
    args: tuple[str, ...] = ()
    """``script``: arguments after the file (templates)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """``script``: extra environment variables (values are templates)."""
    url: str | None = None
    """``http``: the URL (a template)."""
    method: str | None = None
    """``http``: ``GET`` (``None``), ``POST``, ``PUT``, ``PATCH``, ``DELETE``, ``HEAD``,
    ``OPTIONS``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """``http``: request headers (values are templates)."""
    body: Any = None
    """``http``: a string is sent as text, other JSON data as JSON (every string in it a
    template); ``None``: no body."""
    expect: tuple[int, ...] = ()
    """``http``: the statuses that succeed; empty: any 2xx."""

    def __post_init__(self) -> None:
        p = f"step {self.id!r}"
        if self.kind not in _KINDS:
            raise _bad(f"{p}.kind", self.kind, "'code', 'script', 'task' or 'http'")
        object.__setattr__(self, "depends_on", _names(self.depends_on, f"{p}.depends_on"))
        if self.kind == "script":
            if not isinstance(self.file, str) or not self.file or self.task is not None:
                raise _bad(f"{p}.file", self.file, "a script step names a file and no task")
        elif self.kind == "http":
            if not isinstance(self.url, str) or not self.url.strip():
                raise _bad(f"{p}.url", self.url, "an http step names a URL (a string)")
            if self.task is not None or self.file is not None:
                raise _bad(f"{p}.kind", self.kind, "an http step names a URL, no task or file")
        elif not isinstance(self.task, str) or not self.task or self.file is not None:
            raise _bad(f"{p}.task", self.task, f"a {self.kind} step names a task and no file")
        self._check_fields(p)
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
        object.__setattr__(self, "dont_retry_on", _names(self.dont_retry_on, f"{p}.dont_retry_on"))

    def _check_fields(self, p: str) -> None:
        """The fields of script and http steps: each only on its kind, each well formed."""
        given = {name for name in _KIND_FIELDS if _given(name, getattr(self, name))}
        for name in sorted(given):
            if _KIND_FIELDS[name] != self.kind:
                raise _bad(
                    f"{p}.{name}", getattr(self, name), f"no {name} (only {_KIND_FIELDS[name]} "
                    f"steps take {name})"
                )
        object.__setattr__(self, "args", _strings(self.args, f"{p}.args"))
        object.__setattr__(self, "env", _string_map(self.env, f"{p}.env"))
        object.__setattr__(self, "headers", _string_map(self.headers, f"{p}.headers"))
        if self.method is not None and self.method not in HTTP_METHODS:
            raise _bad(f"{p}.method", self.method, "one of " + ", ".join(HTTP_METHODS))
        object.__setattr__(self, "expect", _statuses(self.expect, f"{p}.expect"))
        if self.body is not None:
            try:
                json.dumps(self.body, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise _bad(f"{p}.body", self.body, f"text or JSON data ({exc})") from None

    @property
    def node(self) -> dag.Node:
        """The step as :mod:`queue_core.rules.flows.dag` sees it."""
        return dag.Node(
            self.id, self.depends_on, results_as_parameters=self.kind not in _RUN_BY_DEFINITION
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form: every field in a fixed order, and the fields of script and
        http steps when given (so a spec that uses none is stored as before them)."""
        out = self._common_dict()
        for name in _KIND_FIELDS:
            value = getattr(self, name)
            if _given(name, value):
                out[name] = list(value) if isinstance(value, tuple) else (
                    dict(value) if isinstance(value, Mapping) else value
                )
        return out

    def _common_dict(self) -> dict[str, Any]:
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
        for name in ("args", "expect"):
            if isinstance(kwargs.get(name), list):
                kwargs[name] = tuple(kwargs[name])
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
_KIND_FIELDS: Final = {
    "args": "script",
    "env": "script",
    "url": "http",
    "method": "http",
    "headers": "http",
    "body": "http",
    "expect": "http",
}
"""The fields of one kind of step, and that kind (absent from ``to_dict`` when empty)."""


def _given(name: str, value: object) -> bool:
    """Whether a kind's field holds a value (``body`` may be any JSON but ``None``)."""
    if value is None:
        return False
    if name == "body":
        return True
    return not (isinstance(value, (tuple, list, Mapping)) and len(value) == 0)


def _strings(value: object, path: str) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _bad(path, value, "a list of strings")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise _bad(f"{path}[{i}]", item, "a string")
    return tuple(value)


def _string_map(value: object, path: str) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise _bad(path, value, "a mapping of names to strings")
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise _bad(f"{path}", key, "names that are non-empty strings")
        if not isinstance(item, str):
            raise _bad(f"{path}.{key}", item, "a string (quote numbers in YAML)")
    return dict(value)


def _statuses(value: object, path: str) -> tuple[int, ...]:
    if _is_int(value):
        value = (value,)
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _bad(path, value, "a status code or a list of them (100-599)")
    for i, item in enumerate(value):
        if not _is_int(item) or not 100 <= int(item) <= 599:
            raise _bad(f"{path}[{i}]", item, "a status code from 100 to 599")
    return tuple(int(v) for v in value)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowSpec:
    """A flow definition: its steps and the limits of its executions (SPEC §7).

    Validated at construction: the step graph by :func:`queue_core.rules.flows.dag.validate`
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
    kind: Literal["flow", "workflow"] = "flow"
    """``"workflow"`` (SPEC §12): one declared step, the function step (id ``main``), a
    ``code`` step running the workflow function; children are added at run time."""

    def __post_init__(self) -> None:
        if self.kind not in ("flow", "workflow"):
            raise _bad("kind", self.kind, "'flow' or 'workflow'")
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
        if self.kind == "workflow" and (len(steps) != 1 or steps[0].kind != "code"):
            raise _bad("steps", [s.id for s in steps], "a workflow's one code step")

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
        return merge_policies(queue_defaults, RetryPolicy(**self.retry), RetryPolicy(**step.retry))

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form: every field, steps in definition order (``kind`` only for a
        workflow, so a flow's stored form and hash are as before workflows)."""
        out: dict[str, Any] = {
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
        if self.kind != "flow":
            out["kind"] = self.kind
        return out

    def to_json(self) -> str:
        """Stable JSON: sorted keys, no whitespace; equal specs give equal text."""
        return json.dumps(
            self.to_dict(),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
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
        steps = tuple(StepSpec.from_dict(s, path=f"steps[{i}]") for i, s in enumerate(raw_steps))
        conc = data.get("concurrency")
        concurrency: ConcurrencySpec | None = None
        if conc is not None:
            if not isinstance(conc, Mapping) or set(conc) - {"limit", "behavior"}:
                raise _bad("concurrency", conc, "null or {limit, behavior}")
            concurrency = ConcurrencySpec(conc.get("limit"), conc.get("behavior", "queue"))  # type: ignore[arg-type]
        kwargs = {k: v for k, v in data.items() if k not in ("format", "steps", "concurrency")}
        return cls(steps=steps, concurrency=concurrency, **kwargs)


_FLOW_KEYS: Final = frozenset(FlowSpec.__dataclass_fields__)
