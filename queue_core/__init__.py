"""queue-core: a job queue whose failure handling is enforced by a pure scheduling core.

::

    from queue_core import Queue

    queue = Queue("sqlite:///jobs.db")

    @queue.task(max_retries=3, retry_backoff="2s")
    def add(a: int, b: int) -> int:
        return a + b

    job = add.delay(1, 2)
    queue.run_worker(burst=True)
    assert job.result(timeout=5) == 3
"""

from typing import TYPE_CHECKING, Any

from queue_core.app.clock import Clock, SystemClock
from queue_core.app.context import JobContext
from queue_core.app.control import RateLimit
from queue_core.app.serializer import Serializer
from queue_core.app.task import (
    Concurrency,
    JobHandle,
    Replay,
    Task,
)
from queue_core.queue import Queue
from queue_core.records.control import Pause, PauseKind, Progress
from queue_core.records.durations import parse_duration
from queue_core.records.errors import (
    ChildFailed,
    ConfigError,
    EventTimeout,
    ExecutionFailed,
    JobCancelled,
    JobError,
    JobFailed,
    JobSkipped,
    LeaseLost,
    NonRetryableError,
    NotFound,
    QueueCoreError,
    SchemaMismatch,
    SerializationError,
    StorageError,
    StorageUnavailable,
    TaskError,
)
from queue_core.records.jobs import (
    AttemptRecord,
    DeadJob,
    JobInfo,
    JobState,
    Outcome,
    QueueStats,
    Reason,
)
from queue_core.rules import RetryPolicy
from queue_core.rules.throughput import ThroughputCount
from queue_core.storage.abilities import (
    SupportsFlows,
    SupportsJobScan,
    SupportsMigrate,
    SupportsSchedules,
    SupportsSchemaVersion,
    SupportsThroughput,
    SupportsWakeup,
)
from queue_core.storage.protocol import Storage, StorageFactory

if TYPE_CHECKING:
    from queue_core.app.durable import DurableContext

__all__ = [
    "AttemptRecord",
    "ChildFailed",
    "Clock",
    "Concurrency",
    "ConfigError",
    "DeadJob",
    "DurableContext",
    "EventTimeout",
    "ExecutionFailed",
    "JobCancelled",
    "JobContext",
    "JobError",
    "JobFailed",
    "JobHandle",
    "JobInfo",
    "JobSkipped",
    "JobState",
    "LeaseLost",
    "NonRetryableError",
    "NotFound",
    "Outcome",
    "Pause",
    "PauseKind",
    "Progress",
    "Queue",
    "QueueCoreError",
    "QueueStats",
    "RateLimit",
    "Reason",
    "Replay",
    "RetryPolicy",
    "SchemaMismatch",
    "SerializationError",
    "Serializer",
    "Storage",
    "StorageError",
    "StorageFactory",
    "StorageUnavailable",
    "SupportsFlows",
    "SupportsJobScan",
    "SupportsMigrate",
    "SupportsSchemaVersion",
    "SupportsSchedules",
    "SupportsThroughput",
    "SupportsWakeup",
    "SystemClock",
    "Task",
    "TaskError",
    "ThroughputCount",
    "parse_duration",
]


if not TYPE_CHECKING:  # mypy sees the import above

    def __getattr__(name: str) -> Any:
        # loaded on first use: a worker that runs no workflow never imports the flow rules
        if name == "DurableContext":
            from queue_core.app.durable import DurableContext

            globals()[name] = DurableContext
            return DurableContext
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
