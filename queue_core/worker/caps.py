"""Size caps on what an attempt records about an error, one rule for every isolation.

A body can raise an exception with a megabyte message or a traceback thousands of
frames deep; storage keeps the first :data:`MESSAGE_LIMIT` characters of the message
and the last :data:`TRACEBACK_LIMIT` of the traceback (its tail names the raise). The
worker applies them to thread and async bodies, the process child before sending an
error back, and the worker again to whatever a child sent. Import-light: the process
child imports this module.
"""

from __future__ import annotations

import traceback
from typing import Final

__all__ = [
    "MESSAGE_LIMIT",
    "TRACEBACK_LIMIT",
    "cap_message",
    "cap_traceback",
    "format_traceback",
]

TRACEBACK_LIMIT: Final = 8 * 1024
MESSAGE_LIMIT: Final = 4 * 1024


def cap_message(text: str) -> str:
    """The first :data:`MESSAGE_LIMIT` characters of ``text`` (``…`` marks a cut)."""
    if len(text) <= MESSAGE_LIMIT:
        return text
    return text[:MESSAGE_LIMIT] + "…"


def cap_traceback(text: str) -> str:
    """The last :data:`TRACEBACK_LIMIT` characters of ``text`` (a cut is marked)."""
    if len(text) <= TRACEBACK_LIMIT:
        return text
    return "…(truncated)\n" + text[-TRACEBACK_LIMIT:]


def format_traceback(exc: BaseException) -> str:
    """The capped, formatted traceback of ``exc``: each formatted chunk (a frame, the
    ``Type: message`` line) cut to :data:`MESSAGE_LIMIT`, then the tail kept, so a huge
    message cannot push the frames out of what is stored."""
    chunks = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return cap_traceback("".join(cap_message(c) for c in chunks))
