"""One attempt of a flow-file step (``type: script`` or ``type: http``) on a worker:
allowed? then render, run, mask (SPEC §7 "Flow files, the rest of the Sluice format").

1. The worker's :class:`~queue_core.app.steps.gate.StepGate` must allow the step (a script
   inside its ``flow_dirs``, an http step with ``http_hosts``); else
   :class:`~queue_core.app.steps.failures.StepNotAllowed`, before anything is rendered.
2. The secrets of this attempt are read from the worker's environment
   (``QUEUE_CORE_SECRET_NAME``), and the step's templates are rendered with the input,
   the dependencies' results, the attempt number and the execution id
   (:mod:`queue_core.app.steps.templates`; a field that cannot be rendered fails the
   attempt with reason ``template_error``).
3. The step runs: :func:`~queue_core.app.steps.script.run_script` with the rendered ``args``
   and ``env``, or :func:`~queue_core.app.steps.http.run_http` with the rendered ``url``,
   ``headers`` and ``body`` (the host checked against the gate as httpx parsed it).
4. Whatever leaves the attempt is masked: every secret's value in the result and in the
   error (its message, a script's stderr; chained exceptions are dropped) is ``***``.
   So neither the attempt record, the dead letter, the result nor the worker's log line
   of the attempt ever holds one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_core.app.steps.failures import StepFailed
from queue_core.app.steps.gate import StepGate
from queue_core.app.steps.templates import (
    Masker,
    TemplateContext,
    render,
    secrets_from_env,
)
from queue_core.rules.flows.spec import StepSpec

__all__ = ["StepAttempt", "run_step_attempt"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepAttempt:
    """What the worker knows of one attempt of a script or http step."""

    step: StepSpec
    execution_id: str
    attempt: int
    input: Any = None
    results: Mapping[str, Any] = field(default_factory=dict)
    gate: StepGate = field(default_factory=StepGate)
    kill_grace: float = 10.0
    flow: str | None = None
    """The flow's name: the worker names the step ``<flow>.<step id>`` in its log."""


async def run_step_attempt(call: StepAttempt) -> Any:
    """Run one attempt (see the module docstring); return its masked result.

    Raises:
        StepFailed: ``not_allowed``, ``template_error``, ``exit_code``, ``http_status``,
            or a request that failed; its message masked.
        Exception: any other error, masked (as a :class:`StepFailed` naming its class
            when its text held a secret).
    """
    secrets = secrets_from_env()
    masker = Masker(secrets.values())
    try:
        if call.step.kind == "http":
            result = await _http(call, secrets)
        else:
            result = await _script(call, secrets)
    except Exception as exc:  # noqa: BLE001 - masked, then raised again
        clean = scrubbed(exc, masker)
        if clean is exc:
            raise
        raise clean from None
    return masker.data(result)


def _context(call: StepAttempt, secrets: Mapping[str, str]) -> TemplateContext:
    return TemplateContext(
        input=call.input,
        results=call.results,
        attempt=call.attempt,
        execution_id=call.execution_id,
        secrets=secrets,
    )


async def _script(call: StepAttempt, secrets: Mapping[str, str]) -> Any:
    from queue_core.app.steps.script import ScriptCall, run_script

    step = call.step
    assert step.file is not None
    call.gate.check_script(step.file)
    ctx = _context(call, secrets)
    where = f"tasks.{step.id}"
    args = render(list(step.args), ctx, f"{where}.args")
    env = render(dict(step.env), ctx, f"{where}.env")
    return await run_script(
        ScriptCall(
            file=step.file,
            execution_id=call.execution_id,
            step_id=step.id,
            attempt=call.attempt,
            input=call.input,
            results=call.results,
            kill_grace=call.kill_grace,
            args=tuple(args),
            env=env,
        )
    )


async def _http(call: StepAttempt, secrets: Mapping[str, str]) -> Any:
    from queue_core.app.steps.http import HttpCall, run_http

    step = call.step
    assert step.url is not None
    call.gate.check_http_enabled()
    ctx = _context(call, secrets)
    where = f"tasks.{step.id}"
    request = HttpCall(
        url=render(step.url, ctx, f"{where}.url"),
        method=step.method or "GET",
        headers=render(dict(step.headers), ctx, f"{where}.headers"),
        body=render(step.body, ctx, f"{where}.body"),
        expect=step.expect,
    )
    return await run_http(request, allow=call.gate.check_http)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def scrubbed(exc: Exception, masker: Masker) -> Exception:
    """``exc`` with no secret left in what the worker records of it.

    A :class:`StepFailed` is masked in place (its message, a script's ``stderr``) and
    loses its chained exceptions. Any other exception is returned as it is when no
    secret is in its text or its chain, else replaced by a :class:`StepFailed` that
    names its class, its message masked.
    """
    if not masker:
        return exc
    if isinstance(exc, StepFailed):
        exc.args = tuple(masker.text(a) if isinstance(a, str) else a for a in exc.args)
        stderr = getattr(exc, "stderr", None)
        if isinstance(stderr, str):
            exc.stderr = masker.text(stderr)  # type: ignore[attr-defined]
        exc.__cause__ = exc.__context__ = None
        exc.__suppress_context__ = True
        return exc
    if not any(masker.found_in(str(e)) for e in _chain(exc)):
        return exc
    return StepFailed(f"{type(exc).__name__}: {masker.text(str(exc))}")
