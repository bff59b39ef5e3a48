"""The queue-core web dashboard (``pip install queue-core[dashboard]``).

::

    from contrib.dashboard import create_app

    app = create_app(queue, token="s3cret")      # an ASGI app: serve it or mount it

or from the command line: ``queue-core dashboard --app myapp.tasks:queue``. See
docs/guides/dashboard.md.

``create_app`` is imported on first use, so ``contrib.dashboard.cli`` (registered on the
``queue-core`` command) imports without the extra's packages installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contrib.dashboard.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from contrib.dashboard.app import create_app

        return create_app
    raise AttributeError(f"module 'contrib.dashboard' has no attribute {name!r}")
