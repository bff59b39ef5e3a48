"""queue-core: a job queue whose failure handling is enforced by a pure scheduling core.

(Placeholder: the facade owner fills in the public re-exports.)
"""

from queue_core.errors import (
    ConfigError,
    JobCancelled,
    JobFailed,
    JobSkipped,
    LeaseLost,
    NonRetryableError,
    NotFound,
    QueueCoreError,
    SerializationError,
    StorageError,
    StorageUnavailable,
    TaskError,
)
from queue_core.model import AttemptRecord, DeadJob, JobInfo, JobState, Outcome, Reason
from queue_core.storage import Storage

__all__ = [
    "AttemptRecord",
    "ConfigError",
    "DeadJob",
    "JobCancelled",
    "JobFailed",
    "JobInfo",
    "JobSkipped",
    "JobState",
    "LeaseLost",
    "NonRetryableError",
    "NotFound",
    "Outcome",
    "QueueCoreError",
    "Reason",
    "SerializationError",
    "Storage",
    "StorageError",
    "StorageUnavailable",
    "TaskError",
]
