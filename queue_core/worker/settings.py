"""The worker's settings: each ``Worker(...)`` argument checked (``ConfigError`` naming
the bad value and what would be accepted), environment defaults, and the worker's id."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from queue_core.records.durations import parse_duration, to_ms
from queue_core.records.errors import ConfigError

if TYPE_CHECKING:
    from queue_core.app.steps.gate import StepGate

__all__ = [
    "ENV_SLOTS",
    "ENV_TTL",
    "check_max_tasks_per_child",
    "check_prefetch",
    "check_slots",
    "presence_ttl_ms",
    "step_gate",
    "worker_id",
]

ENV_SLOTS: Final = "QUEUE_CORE_WORKER_SLOTS"
ENV_TTL: Final = "QUEUE_CORE_WORKER_TTL"
ENV_PREFETCH: Final = "QUEUE_CORE_WORKER_PREFETCH"


def check_slots(slots: object) -> int:
    """``slots``, or env ``QUEUE_CORE_WORKER_SLOTS``, else 8; checked (``ConfigError``)."""
    if slots is None:
        env = os.environ.get(ENV_SLOTS)
        try:
            slots = int(env) if env else 8
        except ValueError:
            raise ConfigError(
                f"invalid {ENV_SLOTS}: {env!r} — expected a positive integer",
                code="invalid_option",
                field="slots",
                value=env,
            ) from None
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= 10_000:
        raise ConfigError(
            f"invalid slots: {slots!r} — expected an integer from 1 to 10000",
            code="invalid_option",
            field="slots",
            value=slots,
        )
    return slots


def check_queues(queues: object) -> list[str] | None:
    """``queues`` as a list (a string is comma-separated), or ``None`` (the default);
    each name a non-empty string (``ConfigError`` naming the bad one)."""
    if queues is None:
        return None
    if isinstance(queues, str):
        return [q.strip() for q in queues.split(",") if q.strip()] or None
    names = list(queues) if isinstance(queues, (list, tuple, set, frozenset)) else None
    bad = [q for q in names or () if not isinstance(q, str) or not q.strip()]
    if names is None or bad:
        raise ConfigError(
            f"invalid queues: {queues!r} — expected queue names, a list of non-empty "
            "strings or one comma-separated string (such as 'emails,default')"
            + (f"; {bad[0]!r} is not a queue name" if bad else ""),
            code="invalid_option",
            field="queues",
            value=queues,
        )
    return names or None


def check_flag(value: object, field: str) -> bool:
    """A worker switch: ``True`` or ``False`` (``ConfigError`` for anything else, such
    as ``"no"``, which would read as true)."""
    if not isinstance(value, bool):
        raise ConfigError(
            f"invalid {field}: {value!r} — expected True or False",
            code="invalid_option",
            field=field,
            value=value,
        )
    return value


def check_prefetch(prefetch: object, slots: int) -> int:
    """``prefetch``, or env ``QUEUE_CORE_WORKER_PREFETCH``, else ``slots`` (SPEC §8);
    checked (``ConfigError``): an integer from 0 (never claim ahead) to 10000."""
    if prefetch is None:
        env = os.environ.get(ENV_PREFETCH)
        if not env:
            return slots
        try:
            prefetch = int(env)
        except ValueError:
            raise ConfigError(
                f"invalid {ENV_PREFETCH}: {env!r} — expected an integer from 0 to 10000",
                code="invalid_option",
                field="prefetch",
                value=env,
            ) from None
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 0 <= prefetch <= 10_000:
        raise ConfigError(
            f"invalid prefetch: {prefetch!r} — expected an integer from 0 (no claims ahead) "
            "to 10000",
            code="invalid_option",
            field="prefetch",
            value=prefetch,
        )
    return prefetch


def check_max_tasks_per_child(value: object) -> int | None:
    """``max_tasks_per_child``: ``None`` or a positive integer (``ConfigError``)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ConfigError(
        f"invalid max_tasks_per_child: {value!r} — expected a positive integer or None",
        code="invalid_option",
        field="max_tasks_per_child",
        value=value,
    )


def presence_ttl_ms(ttl: float | str | None) -> int:
    """``ttl``, or env ``QUEUE_CORE_WORKER_TTL``, else 15 s, in ms (``ConfigError``)."""
    if ttl is not None:
        return to_ms(parse_duration(ttl, field="presence_ttl"))
    env = os.environ.get(ENV_TTL)
    return to_ms(parse_duration(env, field=ENV_TTL)) if env else 15_000


def step_gate(
    flow_dirs: Sequence[str | os.PathLike[str]] | str | None,
    http_hosts: Sequence[str] | str | None,
) -> StepGate:
    """What the worker allows flow-file steps: the arguments, else the environment, else
    the defaults of :mod:`queue_core.app.steps.gate` (``ConfigError`` naming a bad entry)."""
    from queue_core.app.steps.gate import (
        ENV_FLOW_DIRS,
        ENV_HTTP_HOSTS,
        StepGate,
        check_flow_dirs,
        check_http_hosts,
    )

    dirs: tuple[Path, ...] | None = None
    if flow_dirs is not None:
        dirs = check_flow_dirs(flow_dirs)
    elif (env := os.environ.get(ENV_FLOW_DIRS)) is not None:
        dirs = check_flow_dirs(env, field=ENV_FLOW_DIRS)
    hosts: tuple[str, ...] | None = None
    if http_hosts is not None:
        hosts = check_http_hosts(http_hosts)
    elif (env := os.environ.get(ENV_HTTP_HOSTS)) is not None:
        hosts = check_http_hosts(env, field=ENV_HTTP_HOSTS)
    return StepGate(dirs, hosts)


def worker_id() -> str:
    """``hostname:pid:short-uuid``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
