"""Decoding of ``claim.lua``'s reply: a flat list, :data:`FIELDS` values per claimed job.

The reply is decoded once per claimed job, so the records are built without
``ClaimedJob.__init__`` (keyword binding and one ``object.__setattr__`` per field cost
more than the decoding): each slot of a new instance is set through its descriptor, in
the reply's order, which is the dataclass's field order (checked at import).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from queue_core.records.corrupt import corrupt_end, salvage
from queue_core.records.jobs import AttemptEnd, ClaimedJob

__all__ = ["FIELDS", "claim_pins", "decode_claimed"]

FIELDS: Final = 21
"""Values per job in the reply (the order is documented at the top of claim.lua)."""

_ORDER: Final = (
    "id", "task_name", "queue", "payload", "attempt", "lease_token", "lease_expires_at",
    "deadline", "max_attempts", "priority", "timeout_ms", "heartbeat_ms", "options",
    "enqueued_at", "replay_of", "started_at", "execution_id", "step_id", "flow_deadline_at",
    "run_at", "start_by",
)  # fmt: skip
if _ORDER != tuple(ClaimedJob.__slots__):  # pragma: no cover - a field was added
    raise ImportError(f"claim.lua's reply order {_ORDER} is not ClaimedJob's fields")

_SET: Final[tuple[Callable[[ClaimedJob, Any], None], ...]] = tuple(
    getattr(ClaimedJob, name).__set__ for name in _ORDER
)
_new = object.__new__


def _parts(r: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """The parts of one ``claim.lua`` reply: the jobs' values (flat), the corrupt jobs'
    ``(id, queue, priority)`` values (flat) and, on a cluster, the named queues that also
    have jobs in the shared home. The reply is the jobs' values, followed on a cluster by
    the queues' list when it is not empty (``lua/_claim_pins.lua``); with corrupt jobs
    it is ``[that, corrupt]`` (two elements, the first a list: no other reply is)."""
    corrupt: list[Any] = []
    if len(r) == 2 and isinstance(r[0], list):
        r, corrupt = r[0], r[1]
    if len(r) % FIELDS:
        return r[:-1], corrupt, r[-1]
    return r, corrupt, []


def claim_pins(r: list[Any]) -> list[Any]:
    """The queues a cluster's ``claim.lua`` reply says also have jobs in the shared home
    (``backends/redis/homes.py``), as bytes; empty on a standalone server."""
    return _parts(r)[2]


def decode_claimed(
    r: list[Any], suffix: str = ""
) -> tuple[list[ClaimedJob], list[AttemptEnd], list[Any]]:
    """The :class:`ClaimedJob` records of one ``claim.lua`` reply, in claim order; the
    ends that dead-letter the claimed jobs whose hash could not be decoded; and the
    ``(id, queue, priority)`` values, flat, of the corrupt jobs ``claim.lua`` left for
    ``corrupt.lua`` (the reply is then ``[jobs, those]``). ``suffix`` is appended to each
    lease token (on a cluster, the home that issued it: ``backends/redis/homes.py``); the
    cluster's trailing list of queues (:func:`claim_pins`) is skipped.

    Text fields arrive as bytes; the attempt, lease expiry, deadline and start stamp as
    integers (a rate-limited claim's ``start_by`` too); the other numbers as bytes; absent
    optional fields as ``None``. ``claim.lua`` leaves a job whose integer fields are not
    integers (or that lacks one it needs) to ``corrupt.lua``; one that still does not
    decode here (text that is not UTF-8, a number Python does not read) is salvaged field
    by field and ended ``corrupt_record`` (:func:`~queue_core.records.corrupt.corrupt_end`),
    so its neighbours in the batch still run.
    """
    (s_id, s_tn, s_q, s_pl, s_at, s_lt, s_le, s_dl, s_ma, s_pr,
     s_to, s_hb, s_op, s_eq, s_ro, s_sa, s_ex, s_st, s_fd, s_ra, s_sb) = _SET  # fmt: skip
    out: list[ClaimedJob] = []
    ends: list[AttemptEnd] = []
    r, corrupt, _ = _parts(r)
    for i in range(0, len(r), FIELDS):
        (jid, tn, q, pl, at, lt, le, dl, ma, pr,
         to, hb, op, eq, ro, sa, ex, st, fd, ra, sb) = r[i : i + FIELDS]  # fmt: skip
        job: ClaimedJob = _new(ClaimedJob)
        try:
            s_id(job, jid.decode())
            s_tn(job, tn.decode())
            s_q(job, q.decode())
            s_pl(job, pl)
            s_at(job, at)
            s_lt(job, lt.decode() + suffix if suffix else lt.decode())
            s_le(job, le)
            s_dl(job, dl)
            s_ma(job, int(ma))
            s_pr(job, int(pr))
            s_to(job, None if to is None else int(to))
            s_hb(job, None if hb is None else int(hb))
            s_op(job, None if op is None else op.decode())
            s_eq(job, int(eq))
            s_ro(job, None if ro is None else ro.decode())
            s_sa(job, sa)
            s_ex(job, None if ex is None else ex.decode())
            s_st(job, None if st is None else st.decode())
            s_fd(job, None if fd is None else int(fd))
            s_ra(job, None if ra is None else int(ra))
            s_sb(job, sb)
        except (ValueError, TypeError, AttributeError) as exc:
            salvaged, found = _salvage(r[i : i + FIELDS], exc, suffix)
            ends.append(corrupt_end(salvaged, found))
            continue
        out.append(job)
    return out, ends, corrupt


def _text(v: Any) -> str:
    return str(v.decode())


def _optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else convert(v)


_DECODE: Final[tuple[Callable[[Any], Any], ...]] = (
    _text, _text, _text, bytes, int, _text, int, int, int, int, _optional(int), _optional(int),
    _optional(_text), int, _optional(_text), int, _optional(_text), _optional(_text),
    _optional(int), _optional(int), _optional(int),
)  # fmt: skip
"""How :func:`_salvage` reads each value of a reply, in :data:`_ORDER`."""


_TOKEN: Final = _ORDER.index("lease_token")


def _salvage(values: list[Any], exc: Exception, suffix: str) -> tuple[ClaimedJob, list[str]]:
    """The claimed job of one reply's ``values`` read field by field (``suffix`` after the
    lease token, as :func:`decode_claimed` puts it), and what failed."""

    def reader(k: int) -> Callable[[], Any]:
        if k == _TOKEN:
            return lambda: _text(values[k]) + suffix
        return lambda: _DECODE[k](values[k])

    job, found = salvage(ClaimedJob, {name: reader(k) for k, name in enumerate(_ORDER)})
    return job, found or [f"unreadable ({type(exc).__name__}: {exc})"]
