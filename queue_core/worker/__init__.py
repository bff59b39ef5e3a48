"""The worker: the only part of queue-core that imports anyio."""

from queue_core.worker.runner import Worker, worker_id

__all__ = ["Worker", "worker_id"]
