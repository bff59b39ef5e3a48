"""Where a running job waits for the reaper: one ``due`` index entry (``P R``) sorted by
``rules.leases.reap_due`` -- its lease's expiry, or its attempt deadline plus the
reaper's margin when that comes first -- instead of a ``due`` entry by lease and a
``timeout`` entry by deadline (one index entry less to write per job with a timeout).
The contract suite pins the reaping; these cases pin the layout, and that a job claimed
by an earlier version (``tp``/``tx`` in the ``timeout`` index) is still reaped on time.
"""

from __future__ import annotations

from typing import Any

from queue_core.records.jobs import JobState, Reason
from queue_core.rules.leases import REAP_MARGIN_MS as M
from queue_core.testing.fixtures import LEASE, SEC, T0, claim_one, enqueue_one
from tests.backends.sqs.conftest import Factory


def _item(s: Any, job_id: str) -> dict[str, Any]:
    item = s.store.db.get(s.store.keys.job(job_id))
    assert item is not None
    return dict(item)


def test_a_timed_job_runs_in_one_index_entry_due_at_its_deadline_plus_the_margin(
    make_storage: Factory,
) -> None:
    s = make_storage()
    job_id = enqueue_one(s, timeout_ms=5 * SEC)
    claim_one(s, now=T0, lease_ms=LEASE)
    item = _item(s, job_id)
    assert "tp" not in item and "tx" not in item
    assert (item["dp"], item["dx"], item["le"]) == (
        s.store.keys.running,
        T0 + 5 * SEC + M,
        T0 + LEASE,
    )


def test_a_renewal_moves_the_entry_with_the_lease_until_the_deadline_comes_first(
    make_storage: Factory,
) -> None:
    s = make_storage()
    job_id = enqueue_one(s, timeout_ms=50 * SEC)
    got = claim_one(s, now=T0, lease_ms=LEASE)
    assert _item(s, job_id)["dx"] == T0 + LEASE
    assert s.renew([got.ref], LEASE, now=T0 + 10 * SEC).lost == []
    assert _item(s, job_id)["dx"] == T0 + 10 * SEC + LEASE  # the lease still ends first
    assert s.renew([got.ref], LEASE, now=T0 + 40 * SEC).lost == []
    item = _item(s, job_id)
    assert (item["le"], item["dx"]) == (T0 + 40 * SEC + LEASE, T0 + 50 * SEC + M)


def test_a_job_claimed_by_the_earlier_layout_is_reaped_at_its_deadline(
    make_storage: Factory,
) -> None:
    s = make_storage()
    job_id = enqueue_one(s, max_attempts=1, timeout_ms=5 * SEC)
    claim_one(s, now=T0, lease_ms=LEASE)
    dl = T0 + 5 * SEC  # as versions before 2026-12-05 wrote it: due by lease, timeout by dl
    old = {"dx": T0 + LEASE, "tp": f"{s.store.keys.p}T", "tx": dl}
    s.store.db.client.update_item(**s.store.db.update(s.store.keys.job(job_id), old))
    assert s.reap(now=dl + M - 1) == []
    (reaped,) = s.reap(now=dl + M)
    assert (reaped.reason, reaped.state) == (Reason.TIMEOUT.value, JobState.DEAD)
    assert "tp" not in _item(s, job_id)
