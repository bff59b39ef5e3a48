"""Progress of the SQS + DynamoDB backend (``SupportsProgress``): each job's latest report,
an attribute of its job item.

``pg`` on the job item is a map (:func:`~backends.sqs.finishing.progress_sets`): ``f`` the
fraction (as text: the codec stores whole numbers only), ``m`` the message (absent for
none) and ``at`` when it was stored (epoch ms). :meth:`JobProgress.set_progress` is one
UpdateItem fenced like a heartbeat; an end that carries progress sets ``pg`` in the
fenced update that ends the attempt (:mod:`backends.sqs.finishing`), so it is stored only
when the end takes. Kept with the job, pruned with it (and by its TTL).
"""

from __future__ import annotations

from backends.sqs.errors import translate
from backends.sqs.finishing import FENCE, fence_values, progress_sets
from backends.sqs.store import Store
from queue_core.records.control import Progress, ProgressUpdate
from queue_core.records.jobs import LeaseRef, dt_from_ms

__all__ = ["JobProgress"]


class JobProgress:
    """:class:`~queue_core.storage.control.SupportsProgress` of the SQS storage (``finish``
    stores an end's progress with :func:`~backends.sqs.finishing.progress_sets` too)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys

    def set_progress(
        self, ref: LeaseRef, update: ProgressUpdate, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.storage.control.SupportsProgress.set_progress` (one
        UpdateItem fenced by the attempt's number and token)."""
        t = self.store.now(now)
        op = self.db.update(
            self.keys.job(ref.job_id),
            progress_sets(update, t),
            cond=FENCE,
            cond_values=fence_values(ref),
        )
        with translate("set_progress"):
            return self.db.update_if(op) is not None

    def get_progress(self, job_id: str) -> Progress | None:
        """See :meth:`queue_core.storage.control.SupportsProgress.get_progress` (one
        consistent GetItem of the ``pg`` attribute)."""
        with translate("get_progress"):
            resp = self.db.client.get_item(
                TableName=self.db.name,
                Key=self.keys.job(job_id),
                ConsistentRead=True,
                ProjectionExpression="pg",
            )
        raw = resp.get("Item", {}).get("pg")
        if raw is None:
            return None
        pg = raw["M"]
        at = dt_from_ms(int(pg["at"]["N"]))
        assert at is not None
        message = pg["m"]["S"] if "S" in pg.get("m", {}) else None
        return Progress(fraction=float(pg["f"]["S"]), message=message, at=at)
