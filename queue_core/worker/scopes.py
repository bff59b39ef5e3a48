"""Attempt scopes: a context a listener wants the task body to run *in*, such as a
tracing span made current (``contrib.otel``), so that what the body does itself (its own
spans, log records) is attributed to the attempt.

A listener opts in with :meth:`~queue_core.app.events.WorkerListener.attempt_scope` (a
context manager entered in the body's own thread or task, for async and thread bodies)
and :meth:`~queue_core.app.events.WorkerListener.attempt_carrier` (a factory path plus
string data that travel to a process-isolated body's child, which calls
``factory(data)`` and enters the result). Without such a listener the body is called as
is: no wrapper, no cost.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from queue_core.app.events import WorkerListener
from queue_core.records.jobs import ClaimedJob
from queue_core.worker.log import log

__all__ = ["Carried", "carried_scopes", "enter_carried", "scoped", "scoped_async"]

Carried = tuple[str, dict[str, str]]
"""``("module:factory", data)``: the child calls ``factory(data)`` for a context manager."""


def _scoping(listeners: Sequence[WorkerListener]) -> list[WorkerListener]:
    base = WorkerListener.attempt_scope
    return [li for li in listeners if getattr(type(li), "attempt_scope", base) is not base]


@contextmanager
def _scopes(listeners: Sequence[WorkerListener], job: ClaimedJob) -> Iterator[None]:
    with ExitStack() as stack:
        for listener in listeners:
            try:
                scope = listener.attempt_scope(job)
                if scope is not None:
                    stack.enter_context(scope)
            except Exception:  # noqa: BLE001 - a listener never breaks the body
                log.exception("worker listener %r failed in attempt_scope", listener)
        yield


def scoped(
    listeners: Sequence[WorkerListener], job: ClaimedJob, func: Callable[..., Any]
) -> Callable[..., Any]:
    """``func`` run inside every listener's scope for ``job`` (entered in the calling
    thread); ``func`` itself when no listener has one."""
    active = _scoping(listeners)
    if not active:
        return func

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        with _scopes(active, job):
            return func(*args, **kwargs)

    return run


def scoped_async(
    listeners: Sequence[WorkerListener], job: ClaimedJob, func: Callable[..., Any]
) -> Callable[..., Any]:
    """:func:`scoped` for an async body (the scopes hold across its awaits)."""
    active = _scoping(listeners)
    if not active:
        return func

    @functools.wraps(func)
    async def run(*args: Any, **kwargs: Any) -> Any:
        with _scopes(active, job):
            return await func(*args, **kwargs)

    return run


def carried_scopes(listeners: Sequence[WorkerListener], job: ClaimedJob) -> list[Carried]:
    """What each listener wants carried to a child process for ``job``'s body."""
    out: list[Carried] = []
    for listener in listeners:
        try:
            carried = listener.attempt_carrier(job)
        except Exception:  # noqa: BLE001 - a listener never breaks the body
            log.exception("worker listener %r failed in attempt_carrier", listener)
            continue
        if carried is not None:
            factory, data = carried
            out.append((factory, dict(data)))
    return out


def enter_carried(stack: ExitStack, carried: Sequence[Carried] | None) -> None:
    """In the child: enter ``factory(data)`` of each carried scope (a failing one is
    reported on stderr and skipped: the body still runs)."""
    for factory, data in carried or ():
        try:
            module, _, name = factory.partition(":")
            make: Callable[[Mapping[str, str]], Any] = getattr(
                importlib.import_module(module), name
            )
            scope = make(data)
            if scope is not None:
                stack.enter_context(scope)
        except Exception:  # noqa: BLE001 - a listener never breaks the body
            log.exception("carried attempt scope %s failed", factory)
