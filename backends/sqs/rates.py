"""Rate limits of the SQS + DynamoDB backend: an optimistic window item per rate key.

A rate-limited job item carries its rate as ``rtk`` (key), ``rtl`` (limit) and ``rtw``
(window ms). ``R#<key>`` items hold the key's kept claim times (``tj``, a JSON list of
epoch ms) and the item version ``v``; an item expires (DynamoDB TTL) an hour after its
window. A claim that meets a rate-limited job reads the key's item, asks
:func:`queue_core.policy.limits.rate_grant` whether one more claim may start at the
claim's ``now`` and, when it may, adds to the claim's ``TransactWriteItems`` an update of
the item conditional on the version it read. Two claimers racing for one key: one
transaction wins, the other is cancelled and reads the item again. So a window never
holds more than the limit, across all workers; a job over the rate stays queued.
"""

from __future__ import annotations

import json
from typing import Any

from backends.sqs.codec import Item, Keys
from backends.sqs.dynamo import Table
from queue_core.policy.limits import rate_grant

__all__ = ["rate_item_key", "rate_update", "rate_usage"]


def rate_item_key(keys: Keys, rate_key: str) -> dict[str, Any]:
    return {"pk": {"S": f"{keys.p}R#{rate_key}"}, "sk": {"S": "R"}}


def rate_update(db: Table, keys: Keys, job: Item, now: int) -> dict[str, Any] | None:
    """The transaction update taking one claim of ``job``'s rate key at ``now``, or
    ``None`` when the rate does not allow one now."""
    key = rate_item_key(keys, job["rtk"])
    current = db.get(key)
    stamps: list[int] = json.loads(current["tj"]) if current is not None else []
    granted, kept = rate_grant(stamps, now, int(job["rtl"]), int(job["rtw"]), 1)
    if not granted:
        return None
    sets = {"tj": json.dumps(kept), "ttl": (now + int(job["rtw"])) // 1000 + 3600}
    if current is None:
        return db.update(key, sets, cond="attribute_not_exists(pk)")
    return db.update(key, sets, cond="#v = :ver", cond_values={"ver": current["v"]})


def rate_usage(db: Table, keys: Keys, rate_key: str, window_ms: int, now: int) -> int:
    """Claims of ``rate_key`` that started in ``(now - window_ms, now]``."""
    current = db.get(rate_item_key(keys, rate_key))
    stamps: list[int] = json.loads(current["tj"]) if current is not None else []
    return sum(1 for s in stamps if s > now - window_ms)
