"""The dashboard's pause and resume buttons (SPEC §13): ``POST /pause`` and
``POST /resume`` with the form fields ``kind`` (``queue``, ``task`` or ``flow``) and
``name``, CSRF-checked and refused (``403``) by a read-only dashboard, like every other
action; and what the queues page shows of the stored pauses.

Built on :class:`queue_core.storage.abilities.SupportsPause`: on a storage without it the
buttons are not shown and a POST is answered ``400`` naming the ability.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from contrib.dashboard.pages import DashboardHost
from queue_core import Pause, PauseKind
from queue_core.storage.abilities import SupportsPause

__all__ = ["pause_routes", "paused_of"]


def paused_of(dash: DashboardHost) -> tuple[bool, list[Pause]]:
    """Whether the storage can pause, and every stored pause."""
    storage = dash.storage
    if not isinstance(storage, SupportsPause):
        return False, []
    return True, storage.list_paused()


def _target(form: Any) -> tuple[PauseKind, str]:
    get = form.get
    kind, name = get("kind"), get("name")
    try:
        parsed = PauseKind(kind)
    except ValueError:
        raise HTTPException(
            400, f"invalid kind {kind!r}: expected 'queue', 'task' or 'flow'"
        ) from None
    if not isinstance(name, str) or not name.strip():
        raise HTTPException(400, f"invalid {parsed.value} name {name!r}: expected a name")
    return parsed, name.strip()


def pause_routes(dash: DashboardHost) -> list[Route]:
    """``POST /pause`` and ``POST /resume`` of ``dash`` (each redirects to the queues page
    with a flash saying whether it changed anything)."""

    async def change(request: Request, resume: bool) -> Response:
        form = await dash.mutation_form(request)
        kind, name = _target(form)
        storage = dash.storage
        if not isinstance(storage, SupportsPause):
            raise HTTPException(
                400, f"{type(storage).__name__} cannot pause: it lacks the SupportsPause ability"
            )
        call = storage.resume if resume else storage.pause
        changed = await run_in_threadpool(call, kind, name)
        done = ("resumed" if resume else "paused") if changed else "unchanged"
        return dash.redirect(request, "/", **{done: "1"})

    async def pause(request: Request) -> Response:
        return await change(request, resume=False)

    async def resume(request: Request) -> Response:
        return await change(request, resume=True)

    return [
        Route("/pause", pause, methods=["POST"], name="pause"),
        Route("/resume", resume, methods=["POST"], name="resume"),
    ]
