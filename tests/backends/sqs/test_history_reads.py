"""A kept history costs the SQS + DynamoDB backend's hot reads nothing (issue 30):
``count_pending`` (a burst worker's end check) reads only pending and running jobs, not
the finished ones every job leaves behind for its retention. Reads are counted as
DynamoDB bills them: the items each Query read before its filter (``ScannedCount``)."""

from __future__ import annotations

from typing import Any

from queue_core.testing import SEC, T0, complete_end, new_job
from tests.backends.sqs.conftest import Factory


class _Scanned:
    """Items read by the storage's DynamoDB Queries (``ScannedCount``)."""

    def __init__(self, storage: Any) -> None:
        self.n = 0
        storage.store.ddb.meta.events.register("after-call.dynamodb.Query", self._read)

    def _read(self, parsed: dict[str, Any], **_: Any) -> None:
        self.n += int(parsed.get("ScannedCount", 0))

    def take(self) -> int:
        n, self.n = self.n, 0
        return n


def test_count_pending_reads_no_finished_job(make_storage: Factory) -> None:
    storage = make_storage()
    kept = [new_job() for _ in range(40)]
    storage.enqueue(kept, now=T0)
    claimed = storage.claim("w1", ["default"], 40, 60 * SEC, now=T0)
    assert len(claimed) == 40
    assert all(storage.finish([complete_end(c.ref) for c in claimed], now=T0 + SEC))
    # pending: one running, one ready, one parked within the horizon, one beyond it
    storage.enqueue([new_job(), new_job()], now=T0 + 2 * SEC)
    assert len(storage.claim("w1", ["default"], 1, 60 * SEC, now=T0 + 2 * SEC)) == 1
    storage.enqueue([new_job(delay_ms=5 * SEC), new_job(delay_ms=600 * SEC)], now=T0 + 2 * SEC)
    scanned = _Scanned(storage)
    assert storage.count_pending(["default"], 10 * SEC, now=T0 + 3 * SEC) == 3
    assert storage.count_pending(["default", "other"], 0, now=T0 + 3 * SEC) == 2
    # two calls over 4 pending jobs (and the pause items the parked partition starts with)
    assert scanned.take() <= 2 * 4
