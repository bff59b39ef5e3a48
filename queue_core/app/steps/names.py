"""Names shared by the flow modules and the worker, in a module that imports nothing, so
a worker can tell a ``type: script`` or ``type: http`` step's job without loading the
flow records."""

from __future__ import annotations

from typing import Final

__all__ = ["FILE_STEP_TASKS", "HTTP_TASK", "SCRIPT_TASK", "SECRET_ENV_PREFIX"]

SCRIPT_TASK: Final = "queue_core.flows.script"
"""The task name of ``type: script`` steps' jobs (no registration needed)."""
HTTP_TASK: Final = "queue_core.app.steps.http"
"""The task name of ``type: http`` steps' jobs (no registration needed)."""
FILE_STEP_TASKS: Final = frozenset({SCRIPT_TASK, HTTP_TASK})
"""The steps the worker runs from their stored definition (not a registered task)."""
SECRET_ENV_PREFIX: Final = "QUEUE_CORE_SECRET_"
"""``{{ secrets.NAME }}`` is the worker's environment variable ``QUEUE_CORE_SECRET_NAME``."""
