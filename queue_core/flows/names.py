"""Names shared by the flow modules and the worker, in a module that imports nothing, so
a worker can tell a ``type: script`` step's job without loading the flow records."""

from __future__ import annotations

from typing import Final

__all__ = ["SCRIPT_TASK"]

SCRIPT_TASK: Final = "queue_core.flows.script"
"""The task name of ``type: script`` steps' jobs (no registration needed)."""
