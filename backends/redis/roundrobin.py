"""``round_robin`` groups of the Redis backend (``SupportsRoundRobin``): claims rotate over
a group's keys.

The claim does the work (``lua/claim.lua`` with ``lua/_rr.lua``): when its walk of the
ready sets meets a job of a ``round_robin`` group, it claims in that place the best ready
job of the group's key that comes first in
:func:`queue_core.rules.control.round_robin_order` (mirrored in Lua: least recently
served, never served first, ties by the best job), among keys below their limit, and
marks that key served with the group's next claim counter value, in the same script.
The keys are a zset scored by their served mark, so a pick reads the keys it tries (the
never-served ones, then from the low end), not every key.
Each key keeps an index of its ready jobs (``P:rrj:<queue>:<group>:<key>``), written by
``enqueue.lua``, a flow step's release (``_flow.lua``: the group of a ``round_robin``
flow's step jobs comes with the execution, ``flow_start.lua``) and a retry
(``to_queued``), and repaired by the claim. :class:`RedisRoundRobin` reads the next turns.
"""

from __future__ import annotations

from backends.redis.errors import translate_errors
from backends.redis.store import RedisStore

__all__ = ["RedisRoundRobin"]


class RedisRoundRobin:
    """:class:`~queue_core.storage.control.SupportsRoundRobin` of one store."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self._keys = store.script("rr_keys")

    def round_robin_keys(self, group: str, now: int | None) -> list[str]:
        """``SupportsRoundRobin.round_robin_keys``: one ``rr_keys.lua`` call."""
        args = self.store.args(now)
        args.append(group)
        with translate_errors("round_robin_keys"):
            return [k.decode() for k in self.store.call(self._keys, args)]
