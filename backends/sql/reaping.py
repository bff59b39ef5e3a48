"""The reaper of the SQL backend, in the order :meth:`Storage.reap` states.

1. Flows first (three indexed reads; the flows part is built only when one finds a row):
   executions past their deadline (:meth:`Flows.advance`), then lost or overdue step jobs
   and step jobs past schedule-to-start, each in a transaction that locks its execution
   first and applies the execution's decision with the job's reap.
2. Running attempts past a bound, read under lock (``FOR UPDATE SKIP LOCKED`` on
   PostgreSQL, the write lock on SQLite): :func:`~queue_core.rules.outcomes.reap_verdict`
   decides each from its stored bounds; the attempt is recorded, the job queued again,
   cancelled or dead-lettered.
3. Queued jobs past their schedule-to-start deadline
   (:func:`~queue_core.rules.leases.schedule_to_start_expired`): dead-lettered unrun.

A row the reaper reads whose columns are not of their type (a poison row: SQLite keeps
whatever is written, ``run_at='yesterday'``) is dead-lettered alone, reason
``corrupt_record`` (:mod:`queue_core.records.corrupt`): a running one when its lease
expiry has passed or is not a number, a queued one whose ready time is not a number (never
claimable) by a sweep run once a minute (:data:`SWEEP_EVERY_MS`, SQLite only).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from backends.sql.admin import Admin
from backends.sql.records import Grave, Row
from backends.sql.store import Store
from queue_core.records.corrupt import corrupt_error
from queue_core.records.jobs import JobState, Outcome, ReapedJob, Reason
from queue_core.rules.leases import queued_expiry, schedule_to_start_expired
from queue_core.rules.outcomes import reap_verdict

if TYPE_CHECKING:
    from backends.sql.flows import Flows

__all__ = ["SWEEP_EVERY_MS", "Reaping"]

SWEEP_EVERY_MS = 60_000
"""How often (by the reap's ``now``) the reaper looks for queued SQLite rows whose ready
time is not a number: the query scans the index of every queued row."""

_STALE_INTS = ("attempt", "max_attempts", "lost_delay_ms", "run_at")
_STALE_OPTIONAL = ("retry_lost_delay_ms", "lease_expires_at", "deadline",
                   "heartbeat_expires_at", "schedule_to_start_ms", "ahead_refunds")  # fmt: skip


def _not_int(v: Any) -> bool:
    return type(v) is not int


def _corrupt_columns(r: Row) -> list[str]:
    """The columns of a ``select_stale`` row that are not integers (as ``name=value``)."""
    bad = [c for c in _STALE_INTS if _not_int(r[c])]
    bad += [c for c in _STALE_OPTIONAL if r[c] is not None and _not_int(r[c])]
    return [f"{c}={r[c]!r:.40}" for c in bad]


class Reaping:
    """``reap`` on ``store``; dead letters through ``admin``, flow events through
    ``flows()`` (built on first use)."""

    def __init__(self, store: Store, admin: Admin, flows: Callable[[], Flows]) -> None:
        self.store = store
        self.admin = admin
        self.flows = flows
        self._swept_at: int | None = None

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """See :meth:`queue_core.storage.protocol.Storage.reap`."""
        if limit <= 0:
            return []
        store, q = self.store, self.store.q
        t = store.now(now)
        reaped = self._reap_flows(now, limit)
        with store.tx() as cur:
            cur.execute(q["select_stale"], {"now": t, "limit": limit})
            stale, _, wake = self._stale(cur, cur.fetchall())
            reaped += stale
            if len(reaped) < limit:
                cur.execute(q["select_sts_expired"], {"now": t, "limit": limit - len(reaped)})
                reaped += self._unstarted(cur, cur.fetchall())
            if len(reaped) < limit and self._sweep_due(t):
                cur.execute(q["select_corrupt_queued"], {"now": t, "limit": limit - len(reaped)})
                reaped += self._unstarted(cur, cur.fetchall(), corrupt=True)
            if wake:
                store.notify(cur)
        return reaped

    def _stale(self, cur: Any, rows: list[Row]) -> tuple[list[ReapedJob], list[str | None], bool]:
        """Apply :func:`reap_verdict` to running attempts read under lock; (the reaped
        jobs, each job's new reason, whether a worker may have work now)."""
        reasons: list[str | None] = []
        attempts: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        graves: list[Grave] = []
        reaped: list[ReapedJob] = []
        wake = False
        for r in rows:
            t = int(r["now_ms"])
            found = _corrupt_columns(r)
            if found:
                self._corrupt_running(r, t, found, attempts, updates, graves, reaped)
                reasons.append(Reason.CORRUPT_RECORD.value)
                continue
            retry_delay = r["retry_lost_delay_ms"]
            verdict = reap_verdict(
                t,
                lease_expires_at=r["lease_expires_at"],
                deadline=r["deadline"],
                heartbeat_expires_at=r["heartbeat_expires_at"],
                cancel_requested=bool(r["cancel_requested"]),
                attempt=r["attempt"],
                max_attempts=r["max_attempts"],
                lost_delay_ms=retry_delay if retry_delay is not None else r["lost_delay_ms"],
                run_at=r["run_at"],
                schedule_to_start_ms=r["schedule_to_start_ms"],
                place_at=r["place_at"] if type(r["place_at"]) is int else None,
                held=bool(r["ahead"]),
                held_refunds=r["ahead_refunds"] or 0,
            )
            if verdict is None:
                continue
            dead_id = uuid.uuid4().hex if verdict.state is JobState.DEAD else None
            attempts.append(
                {
                    "job_id": r["id"],
                    "number": r["attempt"],
                    "now": t,
                    "outcome": verdict.outcome.value,
                    "reason": verdict.reason.value,
                }
            )
            updates.append({"seq": r["seq"], "state": verdict.state.value, "now": t,
                            "reason": verdict.job_reason, "run_at": verdict.ready_at,
                            "place_at": verdict.place_at, "dead_id": dead_id,
                            "refund": int(verdict.refund)})  # fmt: skip
            if dead_id is not None:
                graves.append((r["id"], dead_id, verdict.job_reason or "", None))
            wake = wake or verdict.state is JobState.QUEUED or r["concurrency_key"] is not None
            reaped.append(ReapedJob(job_id=r["id"], attempt=r["attempt"],
                                    outcome=verdict.outcome, reason=verdict.reason.value,
                                    state=verdict.state))  # fmt: skip
            reasons.append(verdict.job_reason)
        if updates:
            cur.executemany(self.store.q["end_attempt"], attempts)
            cur.executemany(self.store.q["reap_job"], updates)
            self.admin.bury(cur, graves)
        return reaped, reasons, wake

    def _sweep_due(self, t: int | None) -> bool:
        """Whether the corrupt-queued sweep runs at ``t`` (SQLite, once a minute)."""
        if self.store.dialect.name != "sqlite" or t is None:
            return False
        if self._swept_at is not None and 0 <= t - self._swept_at < SWEEP_EVERY_MS:
            return False
        self._swept_at = t
        return True

    @staticmethod
    def _corrupt_running(
        r: Row,
        t: int,
        found: list[str],
        attempts: list[dict[str, Any]],
        updates: list[dict[str, Any]],
        graves: list[Grave],
        reaped: list[ReapedJob],
    ) -> None:
        """A running row that does not read: its attempt ``lost`` (``corrupt_record``),
        the job dead-lettered ``corrupt_record`` with an error naming the columns."""
        reason = Reason.CORRUPT_RECORD.value
        number = r["attempt"] if type(r["attempt"]) is int else 0
        dead_id = uuid.uuid4().hex
        attempts.append({"job_id": r["id"], "number": number, "now": t,
                         "outcome": Outcome.LOST.value, "reason": reason})  # fmt: skip
        updates.append({"seq": r["seq"], "state": JobState.DEAD.value, "now": t,
                        "reason": reason, "run_at": None, "place_at": None,
                        "dead_id": dead_id, "refund": 0})  # fmt: skip
        graves.append((r["id"], dead_id, reason, corrupt_error(found)))
        reaped.append(ReapedJob(job_id=r["id"], attempt=number, outcome=Outcome.LOST,
                                reason=reason, state=JobState.DEAD))  # fmt: skip

    def _unstarted(self, cur: Any, rows: list[Row], *, corrupt: bool = False) -> list[ReapedJob]:
        """Dead-letter queued jobs past their schedule-to-start deadline (``corrupt``:
        queued rows whose ready time is not a number, reason ``corrupt_record``)."""
        reason = (Reason.CORRUPT_RECORD if corrupt else Reason.SCHEDULE_TO_START).value
        expired = [
            r for r in rows
            if corrupt
            or schedule_to_start_expired(int(r["now_ms"]), r["run_at"], r["schedule_to_start_ms"])
        ]  # fmt: skip
        if not corrupt and len(expired) < len(rows):
            self._reindex_expiry(cur, [r for r in rows if r not in expired])
        updates = [
            {"seq": r["seq"], "state": JobState.DEAD.value, "reason": reason, "run_at": None,
             "place_at": None, "refund": 0,
             "now": int(r["now_ms"]), "dead_id": uuid.uuid4().hex}
            for r in expired
        ]  # fmt: skip
        if not updates:
            return []
        cur.executemany(self.store.q["reap_job"], updates)
        graves: list[Grave] = [
            (
                r["id"],
                u["dead_id"],
                reason,
                corrupt_error([f"run_at={r['run_at']!r:.40}"]) if corrupt else None,
            )
            for r, u in zip(expired, updates, strict=True)
        ]
        self.admin.bury(cur, graves)
        return [
            ReapedJob(job_id=r["id"], attempt=0, outcome=None, reason=reason, state=JobState.DEAD)
            for r in expired
        ]

    def _reindex_expiry(self, cur: Any, rows: list[Row]) -> None:
        """Queued rows the expiry index named that the rule does not judge expired (an
        ``expires_at`` written apart from the job's bound, found by ``nox -s fuzz``: the
        claims passed the job by and the reaper left it, so it stayed queued forever):
        ``expires_at`` gets back :func:`queued_expiry` of the row, so both agree."""
        cur.executemany(
            self.store.q["reindex_expiry"],
            [
                {
                    "seq": r["seq"],
                    "expires_at": queued_expiry(r["run_at"], r["schedule_to_start_ms"]),
                }
                for r in rows
            ],
        )

    def _reap_flows(self, now: int | None, limit: int) -> list[ReapedJob]:
        """Executions past their deadline, then lost or overdue step jobs and step jobs
        past schedule-to-start, each with its execution's decision."""
        store, q = self.store, self.store.q
        with store.stmt() as cur:
            t = store.resolve_now(cur, now)
            args = {"now": t, "limit": limit}
            due = [r["id"] for r in cur.execute(q["flow_deadlines_due"], args).fetchall()]
            stale = cur.execute(q["flow_stale_steps"], args).fetchall()
            sts = cur.execute(q["flow_sts_steps"], args).fetchall()
        if not (due or stale or sts):
            return []
        flows = self.flows()
        reaped: list[ReapedJob] = []
        for eid in due:
            reaped += flows.advance(eid, t)
        for rows, one in ((stale, "flow_stale_one"), (sts, "flow_sts_one")):
            for r in rows:
                reaped += self._reap_step(flows, r, one, t)
        return reaped

    def _reap_step(self, flows: Flows, step: Row, query: str, t: int) -> list[ReapedJob]:
        """One step job's reap and its execution's decision, in one transaction."""
        with self.store.tx() as cur:
            x = flows.open(cur, step["execution_id"], t, jobs=True)
            rows = cur.execute(self.store.q[query], {"id": step["id"], "now": t}).fetchall()
            if query == "flow_stale_one":
                reaped, reasons, _ = self._stale(cur, rows)
            else:  # the job's reason is the reap's: schedule_to_start
                reaped = self._unstarted(cur, rows)
                reasons = [r.reason for r in reaped]
            if reaped and x is not None:
                states = [r.state.value for r in reaped]
                pairs = zip(states, reasons, strict=True)
                reaped += flows.ended(x, [(step["step_id"], s, w) for s, w in pairs])
            if reaped:
                self.store.notify(cur)
            return reaped
