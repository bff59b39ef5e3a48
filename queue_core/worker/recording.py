"""Attempt recording: how an attempt ended, how it is classified, what the core decides.

Every end goes through :meth:`AttemptRecording._end` (buffered for the finisher, logged
once by :func:`~queue_core.worker.log.log_attempt_end`). Every dead-letter decision made
in the worker goes through :meth:`AttemptRecording._dead`: its own (``unknown_task``,
``bad_payload``, ``fatal`` for a result the serializer cannot carry) and the policy's
(``fatal``, ``retries_exhausted`` from :func:`~queue_core.policy.decide`, passed on by
:meth:`AttemptRecording._decided`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, Final

from queue_core.errors import SerializationError
from queue_core.events import AttemptEnded, AttemptStarted
from queue_core.model import (
    Action,
    AttemptEnd,
    Decision,
    ErrorInfo,
    Outcome,
    Reason,
)
from queue_core.policy import RetryPolicy, classify, decide, error_names
from queue_core.task import check_isolation
from queue_core.worker.base import WorkerState
from queue_core.worker.caps import cap_message, format_traceback
from queue_core.worker.flowsteps import flow_binds, is_script_failure
from queue_core.worker.log import log, log_attempt_end
from queue_core.worker.slots import Attempt

__all__ = ["AttemptRecording", "CallOptions", "error_info"]

_COMPLETE: Final = Decision(action=Action.COMPLETE)
_CANCEL: Final = Decision(action=Action.CANCEL)


def error_info(exc: BaseException) -> ErrorInfo:
    """The recorded form of an exception: names, message, size-capped traceback."""
    error_class, error_type = error_names(exc)
    return ErrorInfo(
        error_class=error_class,
        error_type=error_type,
        message=cap_message(str(exc)),
        traceback=format_traceback(exc),
    )


class _Never(Exception):
    """Never raised: stands for a ``retry_on`` whitelist none of whose names matched."""


def _matching(exc: BaseException, names: Sequence[str]) -> tuple[type[BaseException], ...]:
    wanted = set(names)
    return tuple(
        c
        for c in type(exc).__mro__
        if isinstance(c, type)
        and issubclass(c, BaseException)
        and (f"{c.__module__}.{c.__qualname__}" in wanted)
    )


class CallOptions:
    """Per-call overrides of one job, parsed from ``ClaimedJob.options``."""

    __slots__ = ("policy", "retry_on", "dont_retry_on", "isolation", "kill_grace")

    def __init__(self, text: str) -> None:
        try:
            self._parse(text)
        except Exception as exc:  # noqa: BLE001 - whatever is wrong, the options are corrupt
            raise SerializationError(
                f"corrupt per-call options {text[:80]!r}: {type(exc).__name__}: {exc}"
            ) from None

    def _parse(self, text: str) -> None:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError(f"expected a JSON object, got {type(data).__name__}")
        raw = data.get("policy")
        self.policy: RetryPolicy | None = RetryPolicy(**raw) if raw else None
        self.retry_on: list[str] | None = data.get("retry_on")
        self.dont_retry_on: list[str] | None = data.get("dont_retry_on")
        iso = data.get("isolation")
        self.isolation: str | None = check_isolation(iso) if iso is not None else None
        kg = data.get("kill_grace")
        self.kill_grace: float | None = float(kg) if kg is not None else None


class AttemptRecording(WorkerState):
    """Classification, decisions and the one recording path of attempt ends."""

    def _policy(self, att: Attempt) -> RetryPolicy:
        task = att.task
        assert task is not None
        policy = task.policy
        if att.call is not None and att.call.policy is not None:
            policy = policy.merged(att.call.policy)
        if policy.max_attempts != att.job.max_attempts:
            policy = policy.merged(RetryPolicy(max_attempts=att.job.max_attempts))
        return policy

    def _call_options(self, text: str) -> CallOptions:
        found = self._call_cache.get(text)
        if found is None:
            found = CallOptions(text)
            if len(self._call_cache) > 256:
                self._call_cache.clear()
            self._call_cache[text] = found
        return found

    def _retryable(self, att: Attempt, exc: BaseException, policy: RetryPolicy) -> bool:
        """Classify ``exc`` with the task's lists, or the per-call ones when given."""
        task = att.task
        assert task is not None
        retry_on, dont_retry_on = task.retry_on, task.dont_retry_on
        call = att.call
        if call is not None:
            if call.retry_on is not None:
                retry_on = _matching(exc, call.retry_on) or (_Never,)
                dont_retry_on = ()
            if call.dont_retry_on is not None:
                dont_retry_on = _matching(exc, call.dont_retry_on)
                retry_on = ()
        return classify(
            exc,
            retry_on=retry_on,
            dont_retry_on=dont_retry_on,
            non_retryable=policy.non_retryable,
        )

    def _fail(self, att: Attempt, exc: BaseException, info: ErrorInfo | None = None) -> None:
        """Record a body's exception, classified with the live exception.

        ``info`` is the recorded form when it is not ``exc``'s own (a process child's).
        """
        policy = self._policy(att)
        retryable = self._retryable(att, exc, policy)
        decision = decide(
            policy, att.job.attempt, Outcome.FAILED, retryable=retryable, rng=self._rng
        )
        reason = Reason.EXIT_CODE if is_script_failure(exc) else Reason.ERROR
        self._decided(att, Outcome.FAILED, reason, decision, info or error_info(exc))

    def _dead(
        self,
        att: Attempt,
        reason: Reason,
        error: ErrorInfo | None,
        *,
        outcome: Outcome = Outcome.FAILED,
        attempt_reason: Reason | None = None,
    ) -> None:
        """Dead-letter ``att``'s job with ``reason``: the one path of every dead-letter
        decision the worker makes (its own, and the policy's via :meth:`_decided`).

        The attempt is recorded with ``outcome`` and ``attempt_reason`` (default:
        ``reason`` for ``unknown_task`` / ``bad_payload``, ``error`` otherwise).
        """
        if attempt_reason is None:
            own = reason in (Reason.UNKNOWN_TASK, Reason.BAD_PAYLOAD)
            attempt_reason = reason if own else Reason.ERROR
        decision = Decision(action=Action.DEAD, reason=reason.value)
        self._end(att, outcome, attempt_reason, decision, error=error)

    def _decided(
        self,
        att: Attempt,
        outcome: Outcome,
        reason: Reason,
        decision: Decision,
        error: ErrorInfo | None,
    ) -> None:
        """Record an attempt end with the policy's ``decision`` (dead ones via :meth:`_dead`)."""
        if decision.action is Action.DEAD:
            dead_reason = Reason(decision.reason or Reason.FATAL.value)
            self._dead(att, dead_reason, error, outcome=outcome, attempt_reason=reason)
        else:
            self._end(att, outcome, reason, decision, error=error)

    def _stopped_end(self, att: Attempt) -> None:
        """The body ended after a stop request: record a cancel, or nothing."""
        if att.cancel_requested and not att.lease_lost and not att.released:
            self._end(att, Outcome.CANCELLED, Reason.CANCELLED, _CANCEL)
        else:
            att.ended = True

    def _timed_out(self, att: Attempt, reason: Reason | None = None) -> None:
        """Record ``att`` as timed out: by its heartbeat bound, its own ``timeout``, or
        (``reason`` ``None`` and the flow's deadline comes first) ``flow_timeout``,
        which the decision never retries."""
        if reason is None:
            reason = Reason.FLOW_TIMEOUT if flow_binds(att.job) else Reason.TIMEOUT
        decision = decide(
            self._policy(att), att.job.attempt, Outcome.TIMED_OUT, reason=reason, rng=self._rng
        )
        if reason is Reason.FLOW_TIMEOUT:
            message = f"attempt {att.job.attempt} was stopped by its flow's deadline"
        elif reason is Reason.HEARTBEAT_TIMEOUT:
            message = (
                f"attempt {att.job.attempt} sent no heartbeat for "
                f"{(att.job.heartbeat_ms or 0) / 1000:g} s"
            )
        else:
            message = (
                f"attempt {att.job.attempt} ran past its timeout of "
                f"{(att.job.timeout_ms or 0) / 1000:g} s"
            )
        err = ErrorInfo(
            error_class="TimeoutError", error_type="builtins.TimeoutError", message=message
        )
        self._decided(att, Outcome.TIMED_OUT, reason, decision, err)

    def _released(self, att: Attempt) -> None:
        """Shutdown: give the attempt back for retry (outcome ``lost``)."""
        decision = (
            decide(self._policy(att), att.job.attempt, Outcome.LOST, rng=self._rng)
            if att.task is not None
            else Decision(action=Action.RETRY)
        )
        self._decided(att, Outcome.LOST, Reason.WORKER_SHUTDOWN, decision, None)
        att.released = True

    def _succeed(self, att: Attempt, data: bytes) -> None:
        self._end(att, Outcome.SUCCEEDED, None, _COMPLETE, result=data)

    def _succeed_value(self, att: Attempt, value: object) -> None:
        """Record success with the serialized return value; a value the serializer
        cannot carry fails the attempt fatally (retrying would return it again)."""
        try:
            data = self._serializer.dumps_result(value)
        except SerializationError as exc:
            self._dead(att, Reason.FATAL, error_info(exc))
            return
        self._succeed(att, data)

    def _end(
        self,
        att: Attempt,
        outcome: Outcome,
        reason: Reason | None,
        decision: Decision,
        *,
        result: bytes | None = None,
        error: ErrorInfo | None = None,
    ) -> None:
        """The one path of every attempt end: buffer it for the finisher, log it."""
        if att.ended:
            return
        att.ended = True
        end = AttemptEnd(
            ref=att.ref,
            outcome=outcome,
            decision=decision,
            reason=None if reason is None else reason.value,
            result=result,
            error=error,
            mode=att.mode,
        )
        self._ends.append(end)
        if decision.action is Action.RETRY and decision.delay_ms > 0:
            self._retries_due.add(time.monotonic() + decision.delay_ms / 1000)
        if not (self._flushing or self._delivering):
            self._flush_wake.set()
        duration = self._timing.monotonic() - att.claimed_at
        log_attempt_end(end, att.job.task_name, duration, queue=att.job.queue, worker_id=self.id)
        if self._listeners:
            error_class = None if error is None else error.error_class
            self._notify(
                "attempt_ended",
                AttemptEnded(
                    att.job, self.id, outcome, end.reason, decision.action, duration, error_class
                ),
            )

    def _started(self, att: Attempt) -> None:
        self._notify("attempt_started", AttemptStarted(att.job, self.id))

    def _notify(self, method: str, event: Any) -> None:
        """Call ``method(event)`` on every listener; a listener's exception is logged."""
        for listener in self._listeners:
            try:
                getattr(listener, method)(event)
            except Exception:  # noqa: BLE001 - a listener never breaks the worker
                log.exception("worker listener %r failed in %s", listener, method)
