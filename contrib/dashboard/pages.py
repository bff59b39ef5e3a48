"""What the dashboard's page modules share: the paging of lists and the protocol of the
dashboard they render through (the flows and workers pages build on it, so that
:mod:`contrib.dashboard.app` imports them and never the other way round)."""

from __future__ import annotations

from typing import Any, Protocol

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from queue_core import ConfigError, Queue, Storage
from queue_core.rules.paging import MAX_PAGE_VALUE, check_page

__all__ = ["PAGE_SIZE", "DashboardHost", "page_offset", "positive_int"]

PAGE_SIZE = 50
"""Rows per page of the job, dead-letter and execution lists."""


class DashboardHost(Protocol):
    """What a page module uses of the dashboard (``contrib.dashboard.app`` has it)."""

    storage: Storage
    queue: Queue | None
    refresh: float | None
    """Seconds between reloads of a live page, or ``None``."""

    read_only: bool

    def render(
        self, request: Request, name: str, context: dict[str, Any], status_code: int = 200
    ) -> Response:
        """The page ``name`` rendered with ``context`` (and what every page shows)."""
        ...

    def redirect(self, request: Request, path: str, **query: Any) -> Response:
        """A ``303`` to ``path`` (under the mount point) with ``query``."""
        ...

    async def mutation_form(self, request: Request) -> Any:
        """The POSTed form, after the read-only and CSRF checks (``403`` otherwise)."""
        ...


def positive_int(text: str | None, name: str, default: int) -> int:
    """The integer of a query value, ``default`` when absent; ``400`` naming the value
    when it is not an integer >= 1."""
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:  # not a number, or more digits than Python turns into a number
        value = 0
    if value < 1:
        shown = repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"
        raise HTTPException(400, f"invalid {name} {shown}: expected an integer >= 1")
    return value


def page_offset(text: str | None, limit: int) -> tuple[int, int]:
    """``(page number, offset)`` of the ``?page=`` value; ``400`` naming the page and
    the pages that exist for a page past :func:`queue_core.rules.paging.check_page`'s range."""
    page_no = positive_int(text, "page", 1)
    try:
        _, offset = check_page(limit + 1, (page_no - 1) * limit)
    except ConfigError:
        last = MAX_PAGE_VALUE // limit + 1
        raise HTTPException(
            400, f"invalid page {page_no}: expected a page number from 1 to {last}"
        ) from None
    return page_no, offset
