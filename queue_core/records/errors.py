"""The one exception tree of queue-core.

::

    QueueCoreError
    ├── ConfigError            bad option, duration, URL or scheme (a ValueError)
    ├── SerializationError     what the serializer cannot carry (a ValueError)
    ├── StorageError           a backend failed; driver errors are translated to it
    │   ├── StorageUnavailable     the server cannot be reached (workers retry with backoff)
    │   ├── LeaseLost              fencing: the attempt named is no longer the current one
    │   ├── NotFound               no job / dead-letter entry with that id
    │   └── SchemaMismatch         the stored schema is newer than this code
    ├── TaskError              raised by task bodies to say how to classify a failure
    │   └── NonRetryableError      never retried: dead-lettered at once
    ├── JobError               raised by ``JobHandle.result()`` for a job with no value
    │   ├── JobFailed              the job is dead; ``.dead`` carries the dead-letter entry
    │   │   └── ChildFailed            a workflow's child job is dead (raised in the function)
    │   ├── JobCancelled           the job was cancelled
    │   └── JobSkipped             the job was skipped at enqueue (concurrency limit)
    ├── ExecutionFailed        raised by ``ExecutionHandle.result()`` for a flow execution
    │                          that did not succeed
    └── EventTimeout           a workflow's ``ctx.wait_for_event`` timed out (in the function)

``JobHandle.result(timeout)`` raises the built-in :class:`TimeoutError` when the job has
not finished in time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queue_core.records.flows import ExecutionReason, ExecutionState
    from queue_core.records.jobs import DeadJob

__all__ = [
    "ChildFailed",
    "ConfigError",
    "EventTimeout",
    "ExecutionFailed",
    "JobCancelled",
    "JobError",
    "JobFailed",
    "JobSkipped",
    "LeaseLost",
    "NonRetryableError",
    "NotFound",
    "QueueCoreError",
    "SchemaMismatch",
    "SerializationError",
    "StorageError",
    "StorageUnavailable",
    "TaskError",
]


class QueueCoreError(Exception):
    """Base class of every exception queue-core raises on its own account."""


class ConfigError(QueueCoreError, ValueError):
    """A value given to queue-core is not acceptable.

    Raised as early as possible: task options at decoration, per-call overrides at
    ``.apply``, URLs when a ``Queue`` is built.

    Attributes:
        code: a stable machine-readable code: ``invalid_duration``, ``invalid_option``,
            ``conflicting_options``, ``unknown_scheme``, ``invalid_url``,
            ``missing_driver``, ``unknown_task`` (also: enqueue by name of a task not
            registered in this process), ``unknown_option`` and ``invalid_config`` (the
            configuration file).
        field: the option or field the value was given for, when there is one.
        value: the offending value, when there is one.
    """

    def __init__(
        self, message: str, *, code: str, field: str | None = None, value: Any = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.value = value


class SerializationError(QueueCoreError, ValueError):
    """The serializer cannot encode (at enqueue) or decode a payload or result.

    Raised at enqueue before anything is written.
    """


class StorageError(QueueCoreError):
    """A storage operation failed. Backends translate every driver error to this tree."""


class StorageUnavailable(StorageError):
    """The storage server cannot be reached (connection refused, reset, timed out).

    Workers treat it as transient: they log it and retry the connection with backoff.
    ``during_attempt`` is set when queue-core's own storage call made inside a body on
    the attempt's behalf raised it (a workflow's run read, memo write or child start): the
    worker then gives the attempt back without spending it, as a storage fault is never
    the job's (:func:`queue_core.app.durable_run.own_storage_call`).
    """

    during_attempt: bool = False


class LeaseLost(StorageError):
    """The attempt named by ``(job_id, attempt, lease_token)`` is no longer current.

    Raised (or reported) by renewals, heartbeats and attempt ends when the attempt has
    been reaped, cancelled or superseded; the running body learns it through
    ``ctx.cancelled``.
    """


class NotFound(StorageError, KeyError):
    """No job or dead-letter entry exists with the given id."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "not found"


class SchemaMismatch(StorageError):
    """The schema found in storage is newer than this version of queue-core understands."""


class TaskError(QueueCoreError):
    """Raise from a task body to say how the failure must be classified.

    ``TaskError.fatal(msg)`` is never retried (dead-lettered at once with reason
    ``fatal``); ``TaskError.retryable(msg)`` is retried while attempts remain even if
    ``retry_on`` / ``dont_retry_on`` / ``non_retryable`` would say otherwise. A plain
    ``TaskError(msg)`` is classified like any other exception.

    Attributes:
        non_retryable: ``True`` for fatal, ``False`` for forced-retryable, ``None``
            to let the lists decide.
    """

    non_retryable: bool | None

    def __init__(self, message: str = "", *, non_retryable: bool | None = None) -> None:
        super().__init__(message)
        self.non_retryable = non_retryable

    @classmethod
    def fatal(cls, message: str = "") -> TaskError:
        """An error that must not be retried."""
        return cls(message, non_retryable=True)

    @classmethod
    def retryable(cls, message: str = "") -> TaskError:
        """An error that must be retried while the retry budget allows."""
        return cls(message, non_retryable=False)


class NonRetryableError(TaskError):
    """A task error that is never retried: the job is dead-lettered at once (``fatal``)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message, non_retryable=True)


class JobError(QueueCoreError):
    """Base of the errors ``JobHandle.result()`` raises for jobs that ended without a value."""

    def __init__(self, message: str, *, job_id: str) -> None:
        super().__init__(message)
        self.job_id = job_id


class JobFailed(JobError):
    """The job is dead (dead-lettered). ``dead`` is its dead-letter entry, if still stored."""

    def __init__(self, message: str, *, job_id: str, dead: DeadJob | None = None) -> None:
        super().__init__(message, job_id=job_id)
        self.dead = dead

    @property
    def dead_letter(self) -> DeadJob | None:
        """The dead-letter entry (same as ``dead``)."""
        return self.dead

    @property
    def reason(self) -> str | None:
        """The dead-letter reason (``retries_exhausted``, ``fatal``, ...), if known."""
        return self.dead.reason if self.dead is not None else None

    @property
    def error_class(self) -> str | None:
        """The class name of the final error, if known."""
        return self.dead.error_class if self.dead is not None else None


class JobCancelled(JobError):
    """The job was cancelled before it could finish."""


class JobSkipped(JobError):
    """The job was skipped at enqueue because its concurrency limit was reached."""


class ExecutionFailed(QueueCoreError):
    """A flow execution ended without succeeding (``ExecutionHandle.result()``, SPEC §7).

    Attributes:
        state: the execution's final state (``failed``, ``timed_out``, ``cancelled``,
            ``skipped``).
        reason: ``step_failed``, ``flow_timeout``, ``cancelled`` or ``concurrency_limit``.
        step_id: the step to blame for ``step_failed``; ``None`` when no single step is.
        execution_id: the execution's id.
    """

    def __init__(
        self,
        state: ExecutionState,
        reason: ExecutionReason | None,
        step_id: str | None = None,
        *,
        execution_id: str | None = None,
    ) -> None:
        where = f" (step {step_id!r})" if step_id is not None else ""
        what = f"execution {execution_id} " if execution_id is not None else "execution "
        super().__init__(f"{what}ended {state}: {reason}{where}")
        self.state = state
        self.reason = reason
        self.step_id = step_id
        self.execution_id = execution_id


class ChildFailed(JobFailed):
    """A child job of a workflow (``ctx.run``) is dead: raised inside the workflow function
    where it waits for the child (SPEC §12).

    Attributes:
        job_id: the child job's id.
        dead: the child's dead-letter entry (:class:`~queue_core.records.jobs.DeadJob`),
            ``None`` only if it was purged meanwhile.
    """

    @property
    def dead_job(self) -> DeadJob | None:
        """The child's dead-letter entry (same as ``dead``)."""
        return self.dead


class EventTimeout(QueueCoreError):
    """``ctx.wait_for_event(name, key, timeout)`` timed out: raised inside the workflow
    function at the wait (SPEC §12). Deterministic: a replay of the function raises it
    again at the same wait.

    Attributes:
        name: the event name waited for.
        key: the key waited for, or ``None``.
    """

    def __init__(self, message: str, *, name: str, key: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.key = key
