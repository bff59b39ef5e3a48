"""The bounds of a page read (``limit``, ``offset``), judged before any storage call.

Every listing -- :meth:`Storage.list_dead <queue_core.storage.protocol.Storage.list_dead>`,
``list_jobs``, ``list_executions``, the :class:`~queue_core.Queue` methods over them, the
CLI and the dashboard -- takes a page as ``limit`` and ``offset``. Each backend would
fail its own way on a huge one (SQLite: ``OverflowError`` past 64 bits; PostgreSQL:
``bigint out of range``; Redis: a Lua error), so :func:`check_page` refuses it first,
with one message, on every backend.
"""

from __future__ import annotations

from queue_core.records.errors import ConfigError

__all__ = ["MAX_PAGE_VALUE", "check_page"]

MAX_PAGE_VALUE = 2**31 - 1
"""The largest ``limit`` and ``offset`` accepted: within every backend's integers
(SQLite and PostgreSQL 64-bit, Lua's doubles, DynamoDB's ``Limit``) with room to add
the two, and far past any listing a person pages through."""


def check_page(limit: object, offset: object) -> tuple[int, int]:
    """Return ``(limit, offset)`` when both are integers from 0 to :data:`MAX_PAGE_VALUE`.

    Raises:
        ConfigError: ``invalid_option`` naming the field (``limit`` or ``offset``), the bad
            value and the accepted range; raised before any storage is read.
    """
    for field, value in (("limit", limit), ("offset", offset)):
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not (0 <= value <= MAX_PAGE_VALUE)
        ):
            shown, exact = _describe(value)
            raise ConfigError(
                f"invalid {field}: {shown} -- expected an integer from 0 to {MAX_PAGE_VALUE}",
                code="invalid_option",
                field=field,
                value=value if exact else shown,
            )
    assert isinstance(limit, int) and isinstance(offset, int)
    return limit, offset


def _describe(value: object) -> tuple[str, bool]:
    """``(repr(value), True)``, or a short description of a huge integer or a long
    repr and ``False`` (``10**5000`` has more digits than Python turns into text)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"{'-' if value < 0 else ''}an integer of {abs(value).bit_length()} bits", False
    text = repr(value)
    if len(text) <= 60:
        return text, True
    return f"{text[:40]}...({len(text)} characters)", False
