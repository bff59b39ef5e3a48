"""What a kept history costs SQS + DynamoDB: reads and writes per job, fresh and after K kept.

One in-process moto server (``tests/servers/moto.py``) and one ``SQSStorage``; for each
K given (ascending), the store is first filled to K finished jobs (enqueue, claim and
finish in batches of 50, through the storage API), then 200 more jobs go through the same
path while every DynamoDB request is metered (``bench/sqs_requests.py``'s ``Meter``:
write and read units, and the items each Query read before its filter, ``ScannedCount``,
which is what DynamoDB bills a filtered Query for), then one ``count_pending`` (a burst
worker's end check) and one ``stats`` call are metered the same way. A figure that grows
with K is a cost that grows with the history.

Run from the repo root (moto is slow: about 3 minutes per 1,000 kept jobs here)::

    python bench/sqs_history.py [K ...]        # default: 0 1000
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

BATCH = 50
MEASURED = 200


def _through(storage: Any, n: int) -> None:
    """``n`` jobs enqueued, claimed and finished (kept: default retention)."""
    from queue_core.testing import complete_end, new_job

    storage.enqueue([new_job() for _ in range(n)])
    got: list[Any] = []
    while len(got) < n:
        got += storage.claim("w", ["default"], n - len(got), 60_000)
    assert all(storage.finish([complete_end(c.ref) for c in got]))


def main() -> None:
    kept_points = [int(k) for k in sys.argv[1:]] or [0, 1000]
    logging.getLogger("werkzeug").setLevel(logging.WARNING)

    from sqs_requests import Meter

    from backends.sqs import SQSStorage
    from backends.sqs.tables import INDEXES
    from tests.servers.moto import moto_server  # sets test credentials and the region

    with moto_server() as (endpoint, _server):
        storage = SQSStorage(
            region="us-east-1",
            table="qc-history",
            prefix=f"h{uuid.uuid4().hex[:10]}",
            endpoint_url=endpoint,
        )
        meter = Meter(storage, INDEXES)
        stored = 0
        for want in sorted(kept_points):
            t0 = time.perf_counter()
            while stored < want:
                _through(storage, BATCH)
                stored += BATCH
            fill = time.perf_counter() - t0
            meter.take()
            for _ in range(MEASURED // BATCH):
                _through(storage, BATCH)
            stored += MEASURED
            calls, wru, rru, _, scanned = meter.take()
            ddb = sum(v for c, v in calls.items() if c.startswith("dynamodb."))
            storage.count_pending(["default"], 0)
            pc, _, prru, _, pscanned = meter.take()
            storage.stats()
            _, _, srru, _, sscanned = meter.take()
            n = MEASURED
            print(
                f"kept {want:>7,}: per job (enqueue+claim+finish) WRU {wru / n:.2f} "
                f"RRU {rru / n:.2f} items read {scanned / n:.2f} DynamoDB requests "
                f"{ddb / n:.2f}; count_pending: {sum(pc.values())} requests, {pscanned:,} "
                f"items read, {prru:.1f} RRU; stats: {sscanned:,} items read, {srru:.1f} RRU "
                f"(fill {fill:.0f} s)",
                flush=True,
            )
        storage.close()


if __name__ == "__main__":
    main()
