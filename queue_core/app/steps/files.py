"""YAML flow files, compatible with Sluice flow files (SPEC §7 "Flow files").

::

    id: sync-orders
    concurrency: { limit: 1, behavior: queue }
    max_parallel: 4
    timeout: 2h
    retry: { max_attempts: 3, backoff: exponential, initial: 30s, max: 10m }
    tasks:
      - id: extract
        type: script
        file: pipelines/extract.py
        timeout: 30m
      - id: load
        type: script
        file: pipelines/load.py
        depends_on: [extract]
        retry: { max_attempts: 1 }

The rest of the Sluice format: ``type: http`` tasks (``url``, ``method``, ``headers``,
``body``, ``expect``), ``args`` and ``env`` of script tasks, and templates in those
fields (``{{ input.x }}``, ``{{ secrets.NAME }}``, …), stored as written and rendered
by the worker at each attempt (:mod:`queue_core.app.steps.templates`); a template with a
syntax error is refused here.

:func:`load_flow_file` parses a file with PyYAML's safe loader (duplicate keys, anchors,
aliases and nesting deeper than 64 levels refused before anything is built), validates
it with a pydantic schema, and returns a :class:`~queue_core.flows.FlowSpec`. PyYAML
and pydantic (the ``flows`` extra) are imported on first use only.

Where the file is silent the flow system's defaults apply: retry ``max_attempts: 1``
(1-20), ``backoff: fixed``, ``initial: 10s``, ``max: 10m``, no jitter (exponential
backoff doubles); task ``timeout: 24h``; ``concurrency.behavior: queue``; no execution
timeout; ``max_parallel: 0`` (no limit). A ``namespace.yaml`` beside the flow file may set
``defaults.retry`` and ``defaults.timeout`` (the default task timeout); retry fields merge
namespace → flow → task, field by field, later wins.

A bad file is refused whole, before anything is stored:
:class:`~queue_core.records.errors.ConfigError`
with ``code`` ``invalid_flow`` or ``invalid_duration``, ``field`` the path of the first bad
value (``tasks[1].depends_on[0]``, ``retry.max_attempts``, the bare key for an unknown
top-level key), and a message that starts with the file and names every problem found.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from queue_core.app.steps.gate import trust_flow_file
from queue_core.records.durations import to_ms
from queue_core.records.errors import ConfigError
from queue_core.rules.flows import dag
from queue_core.rules.flows.spec import ConcurrencySpec, FlowSpec, StepSpec

if TYPE_CHECKING:
    from queue_core.app.steps.schema import (
        FlowModel,
        NamespaceModel,
        RetryModel,
        TaskModel,
    )

__all__ = ["DEFAULT_KILL_GRACE_MS", "DEFAULT_RETRY", "DEFAULT_TASK_TIMEOUT_MS", "load_flow_file"]

DEFAULT_RETRY: Final[Mapping[str, Any]] = {
    "max_attempts": 1,
    "backoff": "fixed",
    "initial": 10.0,
    "max_delay": 600.0,
    "coefficient": 2.0,
    "jitter": 0.0,
}
"""The retry policy of a flow file that says nothing (RetryPolicy field names)."""
DEFAULT_TASK_TIMEOUT_MS: Final = 24 * 3600 * 1000
DEFAULT_KILL_GRACE_MS: Final = 10_000
"""SIGTERM → SIGKILL grace of a script step."""
NAMESPACE_FILE: Final = "namespace.yaml"
_MAX_LISTED: Final = 5


def load_flow_file(path: str | os.PathLike[str]) -> FlowSpec:
    """Read, validate and resolve a YAML flow file.

    Args:
        path: the flow file. ``type: script`` files are resolved relative to its
            directory; ``namespace.yaml`` is looked up in the same directory.

    Returns:
        The flow definition, every option resolved: the flow's retry policy is complete
        (defaults filled in), each task carries its own retry fields, its timeout and,
        for scripts, the absolute path of the file.

    Raises:
        ConfigError: ``invalid_flow`` / ``invalid_duration`` for a bad file (see the
            module docstring); ``missing_driver`` when PyYAML or pydantic is missing.
    """
    _imports()
    file = Path(path).absolute()
    trust_flow_file(file)
    namespace_file = file.parent / NAMESPACE_FILE
    namespace: NamespaceModel | None = None
    if namespace_file.is_file() and namespace_file != file:
        from queue_core.app.steps.schema import NamespaceModel

        namespace = _validate(NamespaceModel, _read_yaml(namespace_file), namespace_file)
    from queue_core.app.steps.schema import FlowModel

    flow = _validate(FlowModel, _read_yaml(file), file)
    try:
        return _build(flow, namespace, file)
    except ConfigError as exc:
        raise ConfigError(
            f"{file}: {exc}", code=exc.code, field=exc.field, value=exc.value
        ) from None


# --------------------------------------------------------------------------- reading


def _imports() -> Any:
    try:
        import pydantic  # noqa: F401
        import yaml
    except ImportError as exc:
        raise ConfigError(
            f"flow files need PyYAML and pydantic ({exc.name} is missing) — "
            "install the extra: pip install 'queue-core[flows]'",
            code="missing_driver",
            value=exc.name,
        ) from None
    return yaml


def _read_yaml(file: Path) -> object:
    yaml = _imports()
    from queue_core.app.steps.schema import DuplicateKey, StrictLoader, UnsafeYaml

    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{file}: cannot read the flow file: {exc}", code="invalid_flow", value=str(file)
        ) from None
    try:
        data = yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except UnsafeYaml as exc:
        raise ConfigError(
            f"{file}: refused before validation: {exc}", code="invalid_flow", value=str(file)
        ) from None
    except (yaml.YAMLError, DuplicateKey) as exc:
        raise ConfigError(
            f"{file}: not valid YAML: {exc}", code="invalid_flow", value=str(file)
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{file}: expected a mapping of keys (id, tasks, …) at the top of the file, "
            f"got {type(data).__name__}",
            code="invalid_flow",
            value=data,
        )
    return data


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _validate(model: Any, data: object, file: Path) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems = [_describe(e, model) for e in errors]
        first = errors[0]
        more = len(problems) - _MAX_LISTED
        text = "; ".join(problems[:_MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")
        raise ConfigError(
            f"{file}: {text}",
            code="invalid_duration" if first["type"] == "invalid_duration" else "invalid_flow",
            field=_path(first["loc"]),
            value=first.get("input"),
        ) from None


def _model_at(model: Any, loc: tuple[int | str, ...]) -> Any:
    """The pydantic model class that validates the mapping at ``loc`` (``None`` if none)."""
    import typing

    from pydantic import BaseModel

    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return None
        pending, model = [field.annotation], None
        while pending:  # unwrap Optional[...], list[...], Annotated[...]
            tp = pending.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                model = tp
                break
            pending.extend(typing.get_args(tp))
    return model


def _describe(error: Mapping[str, Any], root: Any) -> str:
    path = _path(error["loc"]) or "(file)"
    kind = error["type"]
    if kind == "extra_forbidden":
        parent = _model_at(root, tuple(error["loc"][:-1]))
        accepted = "" if parent is None else " — expected one of " + ", ".join(parent.model_fields)
        return f"{path}: unknown key{accepted}"
    if kind == "missing":
        return f"{path}: required key is missing"
    if kind == "invalid_duration":
        return f"{path}: {error['msg']}"
    msg = str(error["msg"])
    value = error.get("input")
    text = f"{path}: invalid value {value!r} — {msg[:1].lower()}{msg[1:]}"
    if kind == "string_type" and isinstance(value, (bool, int, float)):
        # YAML reads on/off/yes/no/true/false (and 2024, 1.5) unquoted as a non-string
        text += f"; YAML read the unquoted value as {type(value).__name__}: quote it ('...')"
    return text


# --------------------------------------------------------------------------- building


def _retry_fields(model: RetryModel | None) -> dict[str, Any]:
    if model is None:
        return {}
    out: dict[str, Any] = {}
    if model.max_attempts is not None:
        out["max_attempts"] = model.max_attempts
    if model.backoff is not None:
        out["backoff"] = model.backoff
    if model.initial is not None:
        out["initial"] = model.initial
    if model.max is not None:
        out["max_delay"] = model.max
    return out


def _build(flow: FlowModel, namespace: NamespaceModel | None, file: Path) -> FlowSpec:
    defaults = namespace.defaults if namespace is not None else None
    retry = dict(DEFAULT_RETRY)
    retry.update(_retry_fields(defaults.retry if defaults is not None else None))
    retry.update(_retry_fields(flow.retry))
    task_timeout = (
        defaults.timeout if defaults is not None and defaults.timeout is not None else None
    )
    base = file.parent
    nodes: list[dag.Node] = []
    steps: list[StepSpec] = []
    for i, task in enumerate(flow.tasks):
        p = f"tasks[{i}]"
        nodes.append(dag.Node(task.id, tuple(task.depends_on), task.type == "task"))
        timeout = task.timeout if task.timeout is not None else task_timeout
        common: dict[str, Any] = {
            "id": task.id,
            "depends_on": tuple(task.depends_on),
            "timeout_ms": to_ms(timeout) if timeout is not None else DEFAULT_TASK_TIMEOUT_MS,
            "retry": _retry_fields(task.retry),
        }
        steps.append(_step(task, p, base, common))
    dag.validate(nodes, collection="tasks")
    conc = flow.concurrency
    return FlowSpec(
        name=flow.id,
        steps=tuple(steps),
        concurrency=None if conc is None else ConcurrencySpec(conc.limit, conc.behavior),
        max_parallel=flow.max_parallel,
        timeout_ms=None if flow.timeout is None else to_ms(flow.timeout),
        retry=retry,
        source=str(file),
    )


_FIELDS_OF: Final = {
    "script": ("file", "args", "env"),
    "task": ("task",),
    "http": ("url", "method", "headers", "body", "expect"),
}
"""The keys of a task that belong to one ``type``."""


def _step(task: TaskModel, p: str, base: Path, common: dict[str, Any]) -> StepSpec:
    """The step of one task of the file (``p``: its path, ``tasks[i]``)."""
    for kind, names in _FIELDS_OF.items():
        for name in names:
            value = getattr(task, name)
            if kind != task.type and value is not None:
                raise _refuse(f"{p}.{name}", _wrong_type(task.type, name, kind), value)
    if task.type == "script":
        _check_templates(p, {"args": task.args, "env": task.env})
        return StepSpec(
            kind="script",
            file=_script_file(task.file, base, f"{p}.file"),
            kill_grace_ms=DEFAULT_KILL_GRACE_MS,
            args=tuple(task.args or ()),
            env=task.env or {},
            **common,
        )
    if task.type == "http":
        return _http_step(task, p, common)
    if not task.task or not task.task.strip():
        raise _refuse(f"{p}.task", "required for type: task (a registered task name)", task.task)
    return StepSpec(kind="task", task=task.task, **common)


def _wrong_type(kind: str, name: str, owner: str) -> str:
    if (kind, name) == ("script", "task"):
        return "a script task names a file, not a task"
    if (kind, name) == ("task", "file"):
        return "a task of type task names a task, not a file"
    return f"a task of type {kind} takes no {name} (only type: {owner} does)"


def _http_step(task: TaskModel, p: str, common: dict[str, Any]) -> StepSpec:
    from queue_core.rules.flows.spec import HTTP_METHODS

    if task.url is None or not task.url.strip():
        raise _refuse(f"{p}.url", "required for type: http (the URL to request)", task.url)
    method = "GET" if task.method is None else task.method.upper()
    if method not in HTTP_METHODS:
        raise _refuse(f"{p}.method", "expected one of " + ", ".join(HTTP_METHODS), task.method)
    expect = _statuses(task.expect, f"{p}.expect")
    _check_templates(p, {"url": task.url, "headers": task.headers, "body": task.body})
    return StepSpec(
        kind="http",
        url=task.url,
        method=None if method == "GET" else method,
        headers=task.headers or {},
        body=task.body,
        expect=tuple(expect),
        **common,
    )


def _statuses(value: object, path: str) -> list[int]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    if isinstance(value, bool) or not isinstance(value, (int, list)):
        raise _refuse(path, "expected a status code or a list of them (100-599)", value)
    for j, status in enumerate(items):
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            where = f"{path}[{j}]" if isinstance(value, list) else path
            raise _refuse(where, "expected a status code from 100 to 599", status)
    return list(items)


def _check_templates(p: str, fields: Mapping[str, Any]) -> None:
    """Refuse a template with a syntax error (rendering happens at each attempt)."""
    from queue_core.app.steps.templates import check_template

    def walk(value: Any, path: str) -> None:
        if isinstance(value, str):
            problem = check_template(value)
            if problem is not None:
                raise _refuse(path, problem, value)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, f"{path}.{key}")
        elif isinstance(value, list):
            for j, item in enumerate(value):
                walk(item, f"{path}[{j}]")

    for name, value in fields.items():
        walk(value, f"{p}.{name}")


def _refuse(path: str, message: str, value: object) -> ConfigError:
    return ConfigError(f"{path}: {message}", code="invalid_flow", field=path, value=value)


def _script_file(name: str | None, base: Path, path: str) -> str:
    if name is None or not name.strip():
        raise _refuse(path, "required for type: script (a file relative to the flow file)", name)
    target = (base / name).resolve()
    if not target.is_file():
        raise _refuse(path, f"no such file {name!r} (looked for {target})", name)
    if target.suffix != ".py" and not os.access(target, os.X_OK):
        raise _refuse(
            path,
            f"{name!r} is not executable — a script that is not a .py file runs as an "
            "executable (chmod +x, with a #! line)",
            name,
        )
    return str(target)
