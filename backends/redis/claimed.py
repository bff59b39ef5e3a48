"""Decoding of ``claim.lua``'s reply: a flat list, :data:`FIELDS` values per claimed job."""

from __future__ import annotations

from typing import Any, Final

from backends.redis.records import int_or_none as _int_or_none
from backends.redis.records import str_or_none as _str_or_none
from queue_core.model import ClaimedJob

__all__ = ["FIELDS", "decode_claimed"]

FIELDS: Final = 20
"""Values per job in the reply (the order is documented at the top of claim.lua)."""


def decode_claimed(r: list[Any]) -> list[ClaimedJob]:
    """The :class:`ClaimedJob` records of one ``claim.lua`` reply, in claim order."""
    return [
        ClaimedJob(
            id=r[i].decode(),
            task_name=r[i + 1].decode(),
            queue=r[i + 2].decode(),
            payload=r[i + 3],
            attempt=r[i + 4],
            lease_token=r[i + 5].decode(),
            lease_expires_at=r[i + 6],
            deadline=r[i + 7],
            max_attempts=int(r[i + 8]),
            priority=int(r[i + 9]),
            timeout_ms=_int_or_none(r[i + 10]),
            heartbeat_ms=_int_or_none(r[i + 11]),
            options=_str_or_none(r[i + 12]),
            enqueued_at=int(r[i + 13]),
            replay_of=_str_or_none(r[i + 14]),
            started_at=r[i + 15],
            execution_id=_str_or_none(r[i + 16]),
            step_id=_str_or_none(r[i + 17]),
            flow_deadline_at=_int_or_none(r[i + 18]),
            run_at=_int_or_none(r[i + 19]),
        )
        for i in range(0, len(r), FIELDS)
    ]
