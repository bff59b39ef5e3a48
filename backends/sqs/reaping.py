"""Reap: running attempts that went silent or overdue, queued jobs that waited too long.

The sequence is the one :meth:`queue_core.storage.protocol.Storage.reap` states; which
bound wins and what happens to the job is :func:`~queue_core.rules.outcomes.reap_verdict`'s,
whether a queued job waited too long is
:func:`~queue_core.rules.leases.schedule_to_start_expired`'s. Each job is ended by one
transaction conditional on the version read, so concurrent reapers record it once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from backends.sqs.claiming import Claiming
from backends.sqs.codec import Item, vals
from backends.sqs.dynamo import TxCancelled
from backends.sqs.errors import translate
from backends.sqs.finishing import after
from backends.sqs.store import Store
from backends.sqs.writes import Writes
from queue_core.records.corrupt import corrupt_error
from queue_core.records.jobs import JobState, Outcome, ReapedJob, Reason
from queue_core.rules.leases import reap_cutoff, schedule_to_start_expired
from queue_core.rules.outcomes import ReapVerdict, reap_verdict

if TYPE_CHECKING:
    from backends.sqs.flows import SQSFlows

_INT_ATTRS = ("att", "ma")
_OPTIONAL_INT_ATTRS = ("le", "dl", "hx", "ld", "ra", "s2s", "po")


def _corrupt_attrs(it: Item) -> list[str]:
    """The attributes a reap reads of a running item that are not integers
    (``name=value``): such an item is dead-lettered ``corrupt_record``."""
    bad = [a for a in _INT_ATTRS if type(it.get(a)) is not int]
    bad += [a for a in _OPTIONAL_INT_ATTRS if it.get(a) is not None and type(it[a]) is not int]
    return [f"{a}={it.get(a)!r:.40}" for a in bad]


def _verdict(it: Item, t: int) -> ReapVerdict | None:
    """:func:`reap_verdict` on running item ``it`` at ``t`` (``None``: not stale)."""
    return reap_verdict(
        t,
        lease_expires_at=it.get("le", 0),
        deadline=it.get("dl"),
        heartbeat_expires_at=it.get("hx") if it.get("hp") else None,
        cancel_requested=bool(it.get("cxl")),
        attempt=it["att"],
        max_attempts=it["ma"],
        lost_delay_ms=it.get("ld", 0),
        run_at=it.get("ra"),
        schedule_to_start_ms=it.get("s2s"),
        place_at=it.get("po"),
    )


def _corrupt_verdict() -> ReapVerdict:
    """What a reap does to a running item that does not read: its attempt ``lost``, the
    job dead-lettered ``corrupt_record`` (:mod:`queue_core.records.corrupt`)."""
    return ReapVerdict(reason=Reason.LEASE_EXPIRED, outcome=Outcome.LOST, state=JobState.DEAD,
                       job_reason=Reason.CORRUPT_RECORD.value, ready_at=None)  # fmt: skip


__all__ = ["Reaping"]


class Reaping:
    """``reap`` of the SQS storage.

    Args:
        store: the storage's store.
        claiming: the claim part (parked jobs that are due are promoted first).
        writes: builds the writes that end an attempt or a queued job.
        flows: the flows part (built on first use, once the deployment has flows): a
            step's end records its event; executions past their deadline, with events
            or job writes left, and concurrency keys to promote are advanced.
    """

    def __init__(
        self, store: Store, claiming: Claiming, writes: Writes, flows: Callable[[], SQSFlows]
    ) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys
        self.claiming = claiming
        self.writes = writes
        self.flows = flows

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """See :meth:`queue_core.storage.protocol.Storage.reap`.

        Queries the running jobs by earliest lease expiry, attempt deadline and
        heartbeat deadline, and the due jobs by schedule-to-start deadline. Executions
        past their deadline are advanced first, those with events or job writes left
        (and concurrency keys to promote) last; the flow Queries run only once the
        deployment has flows (:meth:`~backends.sqs.store.Store.flows_exist`).
        """
        t = self.store.now(now)
        with translate("reap"):
            self.claiming.promote(t)
            flows = self.flows() if self.store.flows_exist() else None
            out = flows.reap(t, limit, first=True) if flows else []
            ended: list[str] = []  # executions whose step jobs this reap ends
            mine, requeued = self._reap_running(t, limit, ended)
            if len(mine) < limit:
                mine += self._reap_unstarted(t, limit - len(mine), ended)
            self.store.hint(requeued, t)
            out += mine
            if flows:
                out += flows.reap(t, limit, first=False, ended=ended)
        return out

    def _stale_running(self, t: int, limit: int) -> list[Item]:
        """Running jobs with a lease at or before ``t``, or a deadline or heartbeat bound at
        or before ``reap_cutoff(t)`` (the margin the worker gets to record it first): the
        ``due`` index holds the first two (by ``reap_due``); ``timeout``'s ``P T`` holds
        the deadlines of running jobs an earlier version claimed."""
        stale: dict[str, Item] = {}
        cutoff = reap_cutoff(t)
        for index, pkey, skey, part, by in (
            ("due", "dp", "dx", self.keys.running, t),
            ("timeout", "tp", "tx", f"{self.keys.p}T", cutoff),
            ("heartbeat", "hp", "hx", f"{self.keys.p}H", cutoff),
        ):
            for it in self.db.query(
                IndexName=index,
                KeyConditionExpression=f"{pkey} = :p AND {skey} <= :now",
                ExpressionAttributeValues=vals(p=part, now=by),
                Limit=limit,
            ):
                if it.get("st") == "running":
                    stale.setdefault(it["id"], it)
        return sorted(stale.values(), key=lambda x: (x.get("le", 0), x.get("seq", 0)))

    def _reap_running(
        self, t: int, limit: int, ended: list[str]
    ) -> tuple[list[ReapedJob], list[Item]]:
        """Reap the stale running attempts: (what was reaped, jobs queued again); the
        executions of the step jobs it ends go into ``ended``."""
        out: list[ReapedJob] = []
        requeued: list[Item] = []
        for it in self._stale_running(t, limit):
            if len(out) >= limit:
                break
            found = _corrupt_attrs(it)
            verdict = _corrupt_verdict() if found else _verdict(it, t)
            if verdict is None:
                continue
            actions, sets = self.writes.end_attempt(
                it,
                verdict.outcome,
                Reason.CORRUPT_RECORD.value if found else verdict.reason.value,
                corrupt_error(found) if found else None,
                None,
                t,
                state=verdict.state,
                job_reason=verdict.job_reason,
                ready_at=verdict.ready_at,
                place_at=verdict.place_at,
                cond="st = :run AND v = :ver",
                cond_values={"run": "running", "ver": it["v"]},
            )
            if it.get("xid") is not None:
                actions += self.flows().step_event(it, verdict.state, verdict.job_reason, t)
            try:
                self.db.transact(actions)
            except TxCancelled:
                continue  # another reaper (or the worker) changed it first
            if it.get("xid") is not None:
                ended.append(it["xid"])
            if verdict.state is JobState.QUEUED:
                requeued.append(after(it, sets))
            out.append(
                ReapedJob(
                    job_id=it["id"],
                    attempt=it["att"] if type(it["att"]) is int else 0,
                    outcome=verdict.outcome,
                    reason=Reason.CORRUPT_RECORD.value if found else verdict.reason.value,
                    state=verdict.state,
                )
            )
        return out, requeued

    def _reap_unstarted(self, t: int, limit: int, ended: list[str]) -> list[ReapedJob]:
        """Dead-letter queued jobs whose schedule-to-start bound passed unclaimed (the
        ``P S`` partition of the ``due`` index, by their queued expiry); their executions
        go into ``ended``."""
        out: list[ReapedJob] = []
        reason = Reason.SCHEDULE_TO_START.value
        for it in self.db.query(
            IndexName="due",
            KeyConditionExpression="dp = :p AND dx <= :now",
            ExpressionAttributeValues=vals(p=self.keys.s2s, now=t),
            Limit=limit,
        ):
            if it.get("st") != "queued" or not schedule_to_start_expired(
                t, it["ra"], it.get("s2s")
            ):
                continue
            actions = self.writes.end_queued(it, JobState.DEAD, reason, t)
            if it.get("xid") is not None:
                actions += self.flows().step_event(it, JobState.DEAD, reason, t, queued=True)
            try:
                self.db.transact(actions)
            except TxCancelled:
                continue
            if it.get("xid") is not None:
                ended.append(it["xid"])
            out.append(
                ReapedJob(
                    job_id=it["id"], attempt=0, outcome=None, reason=reason, state=JobState.DEAD
                )
            )
        return out
