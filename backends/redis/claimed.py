"""Decoding of ``claim.lua``'s reply: a flat list, :data:`FIELDS` values per claimed job.

The reply is decoded once per claimed job, so the records are built without
``ClaimedJob.__init__`` (keyword binding and one ``object.__setattr__`` per field cost
more than the decoding): each slot of a new instance is set through its descriptor, in
the reply's order, which is the dataclass's field order (checked at import).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from queue_core.model import ClaimedJob

__all__ = ["FIELDS", "decode_claimed"]

FIELDS: Final = 20
"""Values per job in the reply (the order is documented at the top of claim.lua)."""

_ORDER: Final = (
    "id", "task_name", "queue", "payload", "attempt", "lease_token", "lease_expires_at",
    "deadline", "max_attempts", "priority", "timeout_ms", "heartbeat_ms", "options",
    "enqueued_at", "replay_of", "started_at", "execution_id", "step_id", "flow_deadline_at",
    "run_at",
)  # fmt: skip
if _ORDER != tuple(ClaimedJob.__slots__):  # pragma: no cover - a field was added or moved
    raise ImportError(f"claim.lua's reply order {_ORDER} is not ClaimedJob's fields")

_SET: Final[tuple[Callable[[ClaimedJob, Any], None], ...]] = tuple(
    getattr(ClaimedJob, name).__set__ for name in _ORDER
)
_new = object.__new__


def decode_claimed(r: list[Any]) -> list[ClaimedJob]:
    """The :class:`ClaimedJob` records of one ``claim.lua`` reply, in claim order.

    Text fields arrive as bytes; the attempt, lease expiry, deadline and start stamp as
    integers; the other numbers as bytes; absent optional fields as ``None``.
    """
    (s_id, s_tn, s_q, s_pl, s_at, s_lt, s_le, s_dl, s_ma, s_pr,
     s_to, s_hb, s_op, s_eq, s_ro, s_sa, s_ex, s_st, s_fd, s_ra) = _SET  # fmt: skip
    out: list[ClaimedJob] = []
    for i in range(0, len(r), FIELDS):
        (jid, tn, q, pl, at, lt, le, dl, ma, pr,
         to, hb, op, eq, ro, sa, ex, st, fd, ra) = r[i : i + FIELDS]  # fmt: skip
        job: ClaimedJob = _new(ClaimedJob)
        s_id(job, jid.decode())
        s_tn(job, tn.decode())
        s_q(job, q.decode())
        s_pl(job, pl)
        s_at(job, at)
        s_lt(job, lt.decode())
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
        out.append(job)
    return out
