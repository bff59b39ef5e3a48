"""Short ids for people: abbreviations that tell ids apart, and lookups by unique prefix.

Job ids are time-ordered (version-7 UUIDs: the first 12 hex digits are the enqueue
millisecond), so jobs enqueued together share a long head: ``id[:8]`` names a second
of jobs, not one. :func:`short_ids` abbreviates a set of ids the way git abbreviates
commit hashes -- the shortest common length (at least 8) at which they all differ --
and :func:`resolve_prefix` finds the one id a typed prefix names, saying when it is
ambiguous. The CLI (``jobs show``, ``jobs cancel``, ``dlq show``, ``dlq retry``,
``flow show``) and the dashboard's search accept any unique prefix through it.

Pure: the lookups are done by the callables the caller passes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from queue_core.records.errors import ConfigError, NotFound

__all__ = ["MIN_SHORT", "SCAN_LIMIT", "resolve_prefix", "short_id_length", "short_ids"]

MIN_SHORT: Final = 8
"""The shortest abbreviation :func:`short_ids` gives."""

SCAN_LIMIT: Final = 10_000
"""How many of the newest records :func:`resolve_prefix` reads at most to find a prefix."""

_CHUNK: Final = 500
_SHOWN: Final = 5
"""Matches an ambiguity error lists."""


def short_id_length(ids: Iterable[str], *, min_length: int = MIN_SHORT) -> int:
    """The shortest length, at least ``min_length``, at which the distinct ``ids`` all
    differ (an id shorter than that is shown whole)."""
    distinct = set(ids)
    length = min_length
    longest = max((len(i) for i in distinct), default=0)
    while length < longest and len({i[:length] for i in distinct}) < len(distinct):
        length += 1
    return length


def short_ids(ids: Iterable[str], *, min_length: int = MIN_SHORT) -> dict[str, str]:
    """``{id: abbreviation}``: every id cut to one common length, the shortest (at least
    ``min_length``) at which they all differ -- as git abbreviates commit hashes.

    Example:
        >>> short_ids(["01a233d81fe17000aa", "01a233d81fe17001bb"])
        {'01a233d81fe17000aa': '01a233d81fe17000', '01a233d81fe17001bb': '01a233d81fe17001'}
    """
    listed = list(ids)
    length = short_id_length(listed, min_length=min_length)
    return {i: i[:length] for i in listed}


def resolve_prefix(
    text: str,
    *,
    kind: str,
    exists: Callable[[str], bool],
    page: Callable[[int, int], Sequence[str]],
    max_scan: int = SCAN_LIMIT,
) -> str:
    """The one id that ``text`` names: ``text`` itself when it is an id, else the only id
    starting with it among the newest ``max_scan``.

    Args:
        text: a whole id or a prefix of one (surrounding blanks ignored).
        kind: what the ids are, for messages (``"job"``, ``"dead-letter entry"``).
        exists: whether an id exists (an exact lookup, tried first).
        page: ``page(limit, offset)``, the ids of a page of records, newest first.
        max_scan: read at most this many ids looking for the prefix.

    Raises:
        NotFound: nothing has that id or an id starting with it.
        ConfigError: code ``ambiguous_id``, the prefix starts several ids (some listed).
    """
    wanted = text.strip()
    if not wanted:
        raise NotFound(f"no {kind} id given")
    if exists(wanted):
        return wanted
    found: list[str] = []
    read = 0
    while read < max_scan and len(found) < _SHOWN:
        ids = page(min(_CHUNK, max_scan - read), read)
        read += len(ids)
        found.extend(i for i in ids if i.startswith(wanted) and i not in found)
        if len(ids) < _CHUNK:
            break
    if len(found) == 1:
        return found[0]
    if not found:
        among = f" among the newest {read}" if read >= max_scan else ""
        raise NotFound(f"no {kind} with id {wanted!r} or an id starting with it{among}")
    count = f"at least {len(found)}" if len(found) >= _SHOWN else str(len(found))
    raise ConfigError(
        f"id prefix {wanted!r} is ambiguous: it starts {count} {kind} ids "
        f"({', '.join(found)}); give more characters",
        code="ambiguous_id",
        field="id",
        value=wanted,
    )
