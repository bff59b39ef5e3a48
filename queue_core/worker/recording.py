"""The recorder: how an attempt ended, how it is classified, what the core decides.

The runner and the services tell the :class:`Recorder` how an attempt ended (returned,
raised, timed out, stopped, released); it classifies the error
(:func:`~queue_core.rules.classify`), asks the core for the decision
(:func:`~queue_core.rules.decide`) and records the end. Every end goes through
:meth:`Recorder.end` (handed to ``put``: the run's buffer for the finisher, logged once
by :func:`~queue_core.worker.log.log_attempt_end`). Every dead-letter decision made in the
worker goes through :meth:`Recorder.dead`: its own (``unknown_task``, ``bad_payload``,
``fatal`` for a result the serializer cannot carry) and the policy's (``fatal``,
``retries_exhausted``, passed on by :meth:`Recorder.decided`). Eager mode
(:mod:`queue_core.worker.eager`) records with a recorder of its own.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from queue_core.app.events import AttemptEnded
from queue_core.app.steps.names import FILE_STEP_TASKS
from queue_core.app.task import check_isolation
from queue_core.records.errors import SerializationError, StorageError, StorageUnavailable
from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    Decision,
    ErrorInfo,
    LeaseRef,
    Outcome,
    Reason,
)
from queue_core.rules import (
    RetryPolicy,
    classify,
    decide,
    error_names,
)
from queue_core.storage.abilities import SupportsResultLimit
from queue_core.storage.protocol import Storage
from queue_core.worker.caps import cap_message, format_traceback
from queue_core.worker.durable import record_suspension, suspended, suspended_end
from queue_core.worker.flowsteps import flow_binds, step_failure_reason
from queue_core.worker.listeners import Listeners
from queue_core.worker.log import log_attempt_end, wants_traceback
from queue_core.worker.slots import Attempt
from queue_core.worker.timing import DueTimes, Timing

if TYPE_CHECKING:
    from queue_core.app.serializer import Serializer
    from queue_core.records.workflows import Suspension

__all__ = ["CallOptions", "Recorder", "error_info"]

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


def _log_name(att: Attempt) -> str:
    """The task name an attempt-end line gives: a script step's ``<flow>.<step id>``
    (its job names the internal script task), else the job's task name."""
    job = att.job
    if att.label is not None:
        return att.label
    if job.task_name in FILE_STEP_TASKS and job.step_id is not None:
        return f"step {job.step_id} of execution {job.execution_id}"
    return job.task_name


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


class Recorder:
    """Classification, decisions and the one recording path of attempt ends.

    Args:
        worker_id: named in log lines and attempt-end events.
        storage: read once a dead-lettered end is written (its dead-letter id).
        serializer: serializes a returned value.
        timing: the worker's clock (an attempt's duration).
        listeners: told of every end.
        put: takes each end recorded (the run's buffer for the finisher).
        progress_done: told of each end that carries the latest ``ctx.progress`` report
            (the progress writer forgets that attempt), or ``None``.
        retries_due: told when a retry this worker scheduled falls due (the claim
            thread's idle wait ends then), or ``None``.
        log_tracebacks: see :data:`~queue_core.worker.log.LOG_TRACEBACKS`.
        rng: the retry jitter's randomness.
    """

    def __init__(
        self,
        *,
        worker_id: str,
        storage: Storage,
        serializer: Serializer,
        timing: Timing,
        listeners: Listeners,
        put: Callable[[AttemptEnd], None],
        retries_due: DueTimes | None = None,
        progress_done: Callable[[LeaseRef], None] | None = None,
        log_tracebacks: str = "dead",
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.id = worker_id
        self.storage = storage
        self.serializer = serializer
        self.timing = timing
        self.listeners = listeners
        self.put = put
        self.retries_due = retries_due
        self.progress_done = progress_done
        self.log_tracebacks = log_tracebacks
        self.rng = rng
        self.released_count = 0
        """Attempts released for retry (:meth:`released`: at shutdown, or a held one a
        pause matched that storage could not take back unstarted)."""
        self.result_limit = (
            storage.max_result_bytes() if isinstance(storage, SupportsResultLimit) else None
        )
        self._call_cache: dict[str, CallOptions] = {}
        self._dead_lines: dict[Any, tuple[str, float, str]] = {}
        """Dead-lettered ends waiting to be written before their line is logged (by
        ref): task name, duration, queue."""

    def _policy(self, att: Attempt) -> RetryPolicy:
        """The task's policy with the call's overrides. The budget is the job's own
        (``ClaimedJob.max_attempts``), passed to :meth:`decide` beside it: attempts that
        spent none (shutdown releases) raise it, past any policy's range."""
        task = att.task
        assert task is not None
        policy = task.policy
        if att.call is not None and att.call.policy is not None:
            policy = policy.merged(att.call.policy)
        return policy

    def decide(
        self,
        att: Attempt,
        outcome: Outcome,
        *,
        retryable: bool = True,
        reason: Reason | None = None,
        policy: RetryPolicy | None = None,
    ) -> Decision:
        """:func:`~queue_core.rules.decide` for ``att`` on the job's stored budget."""
        return decide(
            policy or self._policy(att),
            att.job.attempt,
            outcome,
            retryable=retryable,
            rng=self.rng,
            reason=reason,
            max_attempts=att.job.max_attempts,
        )

    def call_options(self, text: str) -> CallOptions:
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

    def fail(self, att: Attempt, exc: BaseException, info: ErrorInfo | None = None) -> None:
        """Record a body's exception, classified with the live exception.

        ``info`` is the recorded form when it is not ``exc``'s own (a process child's).
        A workflow that stopped to wait is recorded ``suspended`` instead.
        """
        stop = suspended(exc)  # a workflow's wait: queue_core.worker.durable
        if stop is not None:
            record_suspension(self, att, stop)
            return
        if isinstance(exc, StorageUnavailable) and exc.during_attempt:
            self.unavailable(att, info or error_info(exc))  # not the body's failure
            return
        policy = self._policy(att)
        retryable = self._retryable(att, exc, policy)
        decision = self.decide(att, Outcome.FAILED, retryable=retryable, policy=policy)
        reason = step_failure_reason(exc) or Reason.ERROR
        self.decided(att, Outcome.FAILED, reason, decision, info or error_info(exc))

    def dead(
        self,
        att: Attempt,
        reason: Reason,
        error: ErrorInfo | None,
        *,
        outcome: Outcome = Outcome.FAILED,
        attempt_reason: Reason | None = None,
    ) -> None:
        """Dead-letter ``att``'s job with ``reason``: the one path of every dead-letter
        decision the worker makes (its own, and the policy's via :meth:`decided`).

        The attempt is recorded with ``outcome`` and ``attempt_reason`` (default:
        ``reason`` for ``unknown_task`` / ``bad_payload``, ``error`` otherwise).
        """
        if attempt_reason is None:
            own = reason in (Reason.UNKNOWN_TASK, Reason.BAD_PAYLOAD)
            attempt_reason = reason if own else Reason.ERROR
        decision = Decision(action=Action.DEAD, reason=reason.value)
        self.end(att, outcome, attempt_reason, decision, error=error)

    def decided(
        self,
        att: Attempt,
        outcome: Outcome,
        reason: Reason,
        decision: Decision,
        error: ErrorInfo | None,
    ) -> None:
        """Record an attempt end with the policy's ``decision`` (dead ones via :meth:`dead`)."""
        if decision.action is Action.DEAD:
            dead_reason = Reason(decision.reason or Reason.FATAL.value)
            self.dead(att, dead_reason, error, outcome=outcome, attempt_reason=reason)
        else:
            self.end(att, outcome, reason, decision, error=error)

    def stopped_end(self, att: Attempt) -> None:
        """The body ended after a stop request: record a cancel, or nothing."""
        if att.cancel_requested and not att.lease_lost and not att.released:
            self.end(att, Outcome.CANCELLED, Reason.CANCELLED, _CANCEL)
        else:
            att.ended = True

    def timed_out(self, att: Attempt, reason: Reason | None = None) -> None:
        """Record ``att`` as timed out: by its heartbeat bound, its own ``timeout``, or
        (``reason`` ``None`` and the flow's deadline comes first) ``flow_timeout``,
        which the decision never retries."""
        if reason is None:
            reason = Reason.FLOW_TIMEOUT if flow_binds(att.job) else Reason.TIMEOUT
        decision = self.decide(att, Outcome.TIMED_OUT, reason=reason)
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
        self.decided(att, Outcome.TIMED_OUT, reason, decision, err)

    def released(self, att: Attempt) -> None:
        """Shutdown: give the attempt back for retry (outcome ``lost``, reason
        ``worker_shutdown``), spending none of the job's retry budget (SPEC §4)."""
        decision = decide(
            RetryPolicy(), att.job.attempt, Outcome.LOST, rng=self.rng,
            reason=Reason.WORKER_SHUTDOWN,
        )  # fmt: skip
        self.decided(att, Outcome.LOST, Reason.WORKER_SHUTDOWN, decision, None)
        att.released = True
        self.released_count += 1

    def unavailable(self, att: Attempt, error: ErrorInfo) -> None:
        """The attempt could not start because storage was unavailable (a flow step's
        inputs could not be read): ended ``failed`` with that error and queued again at
        once, spending no attempt -- a storage fault is not the job's (issue 26)."""
        decision = Decision(action=Action.RETRY, spends_attempt=False)
        self.end(att, Outcome.FAILED, Reason.ERROR, decision, error=error)

    def start_late(self, att: Attempt) -> None:
        """A rate-limited job whose body could not start by its ``start_by``: given back
        for retry at once (``lost``, reason ``start_late``), spending no attempt."""
        decision = Decision(action=Action.RETRY, spends_attempt=False)
        self.end(att, Outcome.LOST, Reason.START_LATE, decision)

    def succeed(self, att: Attempt, data: bytes) -> None:
        """Record success with ``data``; a result larger than storage keeps
        (``SupportsResultLimit``) fails the attempt fatally, as one the serializer cannot
        carry: retrying would return it again, and storage could never write the end."""
        limit = self.result_limit
        if limit is not None and len(data) > limit:
            too_large = SerializationError(
                f"result of {len(data)} bytes is larger than this storage keeps ({limit} bytes);"
                " return a smaller value (e.g. a reference to where the data is kept)"
            )
            self.dead(att, Reason.FATAL, error_info(too_large))
            return
        self.end(att, Outcome.SUCCEEDED, None, _COMPLETE, result=data)

    def succeed_value(self, att: Attempt, value: object) -> None:
        """Record success with the serialized return value; a value the serializer
        cannot carry fails the attempt fatally (retrying would return it again)."""
        try:
            data = self.serializer.dumps_result(value)
        except SerializationError as exc:
            self.dead(att, Reason.FATAL, error_info(exc))
            return
        self.succeed(att, data)

    def end(
        self,
        att: Attempt,
        outcome: Outcome,
        reason: Reason | None,
        decision: Decision,
        *,
        result: bytes | None = None,
        error: ErrorInfo | None = None,
        suspension: Suspension | None = None,
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
            progress=None if att.ctx is None else att.ctx.progress_reported,
        )
        if suspension is not None:
            end = suspended_end(end, suspension)
        if end.progress is not None and self.progress_done is not None:
            self.progress_done(att.ref)  # the end carries the latest report
        self.put(end)
        due = self.retries_due
        if decision.action is Action.RETRY and decision.delay_ms > 0 and due is not None:
            due.add_in(decision.delay_ms / 1000)
        duration = self.timing.monotonic() - att.claimed_at
        name = _log_name(att)
        if decision.action is Action.DEAD:  # logged once written: with its dead-letter id
            self._dead_lines[end.ref] = (name, duration, att.job.queue)
        else:
            log_attempt_end(
                end, name, duration, queue=att.job.queue, worker_id=self.id,
                traceback=wants_traceback(end, self.log_tracebacks),
            )  # fmt: skip
        if self.listeners.all:
            error_class = None if error is None else error.error_class
            self.listeners.notify(
                "attempt_ended",
                AttemptEnded(
                    att.job, self.id, outcome, end.reason, decision.action, duration, error_class
                ),
            )

    def log_written(self, batch: Sequence[AttemptEnd], took: Sequence[bool]) -> None:
        """After ``batch`` was written (``took`` per end): the line of each dead-lettered
        end, naming the dead-letter entry storage wrote (read back: storage makes the
        id), so ``queue-core dlq show ID`` is one copy away."""
        if not self._dead_lines:
            return
        for end, ok in zip(batch, took, strict=False):
            line = self._dead_lines.pop(end.ref, None)
            if line is None:
                continue
            dead_id = None
            if ok:
                try:
                    record = self.storage.get_job(end.ref.job_id)
                except StorageError:  # the line goes out without the id
                    record = None
                dead_id = None if record is None else record.dead_id
            task_name, duration, queue = line
            log_attempt_end(
                end, task_name, duration, queue=queue, worker_id=self.id, dead_id=dead_id,
                traceback=wants_traceback(end, self.log_tracebacks),
            )  # fmt: skip
