"""The dashboard's workers page: the live workers of the storage's registry
(:class:`queue_core.storage.abilities.SupportsWorkerRegistry`), the same fields as
``queue-core workers``: id, host, pid, queues, slots, busy, stuck, started, last seen."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from contrib.dashboard.pages import DashboardHost
from queue_core.storage.abilities import SupportsWorkerRegistry

__all__ = ["workers_route"]


def workers_route(dash: DashboardHost) -> Route:
    """``GET /workers`` of ``dash`` (reloaded live like the queues page)."""

    def workers(request: Request) -> Response:
        storage = dash.storage
        able = isinstance(storage, SupportsWorkerRegistry)
        found = storage.list_workers() if isinstance(storage, SupportsWorkerRegistry) else []
        return dash.render(
            request,
            "workers.html",
            {
                "page": "workers",
                "able": able,
                "workers": found,
                "refresh": dash.refresh if able else None,
                "now": int(time.time() * 1000),
            },
        )

    return Route("/workers", workers, name="workers")
