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

from queue_core.clock import Clock, SystemClock
from queue_core.context import JobContext
from queue_core.durations import parse_duration
from queue_core.errors import (
    ConfigError,
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
from queue_core.model import (
    AttemptRecord,
    DeadJob,
    JobInfo,
    JobState,
    Outcome,
    QueueStats,
    Reason,
)
from queue_core.policy import RetryPolicy
from queue_core.queue import Queue
from queue_core.serializer import Serializer
from queue_core.storage import (
    Storage,
    StorageFactory,
    SupportsJobScan,
    SupportsMigrate,
    SupportsSchemaVersion,
    SupportsWakeup,
)
from queue_core.task import Concurrency, JobHandle, Replay, Task
from queue_core.throughput import SupportsThroughput, ThroughputCount

if TYPE_CHECKING:
    from queue_core.flows.storage import SupportsFlows
    from queue_core.schedules import SupportsSchedules

__all__ = [
    "AttemptRecord",
    "Clock",
    "Concurrency",
    "ConfigError",
    "DeadJob",
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
    "Queue",
    "QueueCoreError",
    "QueueStats",
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


if not TYPE_CHECKING:  # PEP 562: flows and schedules load on first use (worker start-up)

    def __getattr__(name: str) -> Any:
        if name == "SupportsFlows":
            from queue_core.flows.storage import SupportsFlows

            globals()[name] = SupportsFlows
            return SupportsFlows
        if name == "SupportsSchedules":
            from queue_core.schedules import SupportsSchedules

            globals()[name] = SupportsSchedules
            return SupportsSchedules
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
