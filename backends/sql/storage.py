"""``sqlite:///`` and ``postgresql+psycopg://``: the SQL backend's public class.

:class:`SQLStorage` builds the dialect's own class on construction
(:class:`~backends.sql.sqlite.SQLiteStorage` or
:class:`~backends.sql.postgresql.PostgresStorage`, both on
:class:`~backends.sql.base.SQLBase`). The operations written here run the same steps
on both databases over the named queries of ``backends/sql/sql/<dialect>.sql``; the
dialect classes hold what differs (connections, transactions, the batch statements of
enqueue, claim, renew and finish).

Each protocol operation is one transaction, or one statement (atomic on its own):

* SQLite: WAL journal, ``synchronous=NORMAL``, a busy timeout, ``BEGIN IMMEDIATE`` for
  every write transaction; this process's writers take turns on one lock.
* PostgreSQL: autocommit connections; ``READ COMMITTED`` transactions with row locks
  (``FOR UPDATE SKIP LOCKED`` for claim and reap, ``FOR UPDATE`` in id order for renew
  and finish), advisory locks per concurrency key, ``LISTEN/NOTIFY`` wake-ups.

What a decision or a reap does to a job is decided by :mod:`queue_core.policy.outcomes`
(:func:`~queue_core.policy.outcomes.end_state`,
:func:`~queue_core.policy.outcomes.reap_verdict`,
:func:`~queue_core.policy.outcomes.replay_job`); this backend applies it atomically.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

from backends.sql import queries
from backends.sql.base import Grave, Order, split_url
from backends.sql.flows import SQLFlows
from backends.sql.limits import RateClaims, SQLLimits, _limited
from backends.sql.records import (
    Row,
    attempt_from_row,
    attempt_json,
    claimed_from_row,
    dead_entry,
    dead_from_row,
    end_values,
    job_from_row,
    spec_of_dead,
)
from backends.sql.schedules import SQLSchedules
from backends.sql.throughput import SQLThroughput
from backends.sql.workers import SQLWorkers
from queue_core.errors import LeaseLost, NotFound
from queue_core.model import (
    AttemptEnd,
    AttemptRecord,
    ClaimedJob,
    DeadJob,
    JobRecord,
    JobState,
    LeaseRef,
    NewJob,
    QueueStats,
    ReapedJob,
    Reason,
)
from queue_core.policy.outcomes import DEFAULT_RETENTION_MS, reap_verdict, replay_job

__all__ = ["DEFAULT_RETENTION_MS", "SQLStorage"]


class SQLStorage(SQLLimits, SQLSchedules, SQLWorkers, SQLThroughput, SQLFlows):
    """Storage on SQLite (embedded, the default) or PostgreSQL.

    ``SQLStorage(url)`` returns the dialect's subclass. Also implements
    :class:`~queue_core.storage.SupportsMigrate`, :class:`~queue_core.storage.SupportsJobScan`
    and :class:`~queue_core.storage.SupportsWakeup` (PostgreSQL ``LISTEN/NOTIFY``; on
    SQLite a 1-4 ms poll of ``PRAGMA data_version`` that sees commits from any process).
    The schema is created (or upgraded) on first use; :meth:`migrate` does it explicitly.

    Args:
        url: ``sqlite:///relative.db``, ``sqlite:////abs/path.db``, ``sqlite://`` (in
            memory, this process only), ``postgresql+psycopg://user:password@host:5432/db``
            (``postgresql://`` means psycopg too). A ``retention=<duration>`` query
            parameter sets ``retention_ms`` (:func:`~queue_core.policy.outcomes.parse_retention`:
            ``7d``, ``1d12h``, ``12h``, ``3600`` seconds, ``0`` = keep no finished job).
        retention_ms: how long finished jobs are kept before :meth:`prune` deletes them
            (an int >= 0); overrides the URL's ``retention``; default 7 days.
        pool_size: connections the schema engine keeps open (operations run on one
            connection per thread).
        max_overflow: extra schema-engine connections allowed beyond ``pool_size``.
        busy_timeout_ms: SQLite only: how long a writer waits for another process's
            write lock before the operation fails with
            :class:`~queue_core.errors.StorageUnavailable`.
        echo: log the schema engine's statements (SQLAlchemy's ``echo``).

    Raises:
        ConfigError: a malformed URL, an unsupported scheme or a bad retention.
    """

    def __new__(cls, url: str, **_options: Any) -> SQLStorage:
        if cls is not SQLStorage:
            return super().__new__(cls)
        sa_url, _ = split_url(url)
        if sa_url.backend_name == "postgresql":
            from backends.sql.pgimport import import_psycopg

            import_psycopg()  # first: without psycopg's metadata look-ups
            from backends.sql.postgresql import PostgresStorage

            return super().__new__(PostgresStorage)
        from backends.sql.sqlite import SQLiteStorage

        return super().__new__(SQLiteStorage)

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.Storage.enqueue`. A batch is all-or-nothing."""
        if not jobs:
            return []
        if _limited(jobs):  # unique or rate-limited jobs (backends/sql/limits.py)
            return [e.state for e in self.enqueue_unique(jobs, now=now)]
        if any(j.concurrency_skip and j.concurrency_key is not None for j in jobs):
            return self._enqueue_skipping(jobs, now)
        one = len(jobs) == 1 or self._single_statement_batches
        with self._stmt() if one else self._tx() as cur:
            self._insert(cur, jobs, None, None, self._clock(now))
        return [JobState.QUEUED] * len(jobs)

    def _enqueue_skipping(self, jobs: Sequence[NewJob], now: int | None) -> list[JobState]:
        """A batch holding concurrency ``skip`` jobs, stored by :meth:`_skip_states`."""
        with self._tx() as cur:
            t = self._resolve_now(cur, now)
            states, reasons = self._skip_states(cur, jobs)
            self._insert(cur, jobs, states, reasons, t)
        return states

    def _skip_states(
        self, cur: Any, jobs: Sequence[NewJob]
    ) -> tuple[list[JobState], list[str | None]]:
        """The state of each job of a batch: count the active jobs per ``skip`` key under
        the keys' locks; a job over its limit is stored ``skipped``."""
        keys = sorted(
            {j.concurrency_key for j in jobs if j.concurrency_skip
             and j.concurrency_key is not None and j.concurrency_limit is not None}
        )
        states: list[JobState] = [JobState.QUEUED] * len(jobs)
        reasons: list[str | None] = [None] * len(jobs)
        if not keys:
            return states, reasons
        for k in keys:  # sorted: no lock-order deadlocks
            self._try_lock_key(cur, k, wait=True)
        cur.execute(self._q["count_active"], {"keys": self._list(keys)})
        active = {r["key"]: int(r["n"]) for r in cur.fetchall()}
        for i, j in enumerate(jobs):
            key = j.concurrency_key
            if key is not None:
                if (
                    j.concurrency_skip
                    and j.concurrency_limit is not None
                    and active.get(key, 0) >= j.concurrency_limit
                ):
                    states[i], reasons[i] = JobState.SKIPPED, Reason.CONCURRENCY_LIMIT.value
                else:
                    active[key] = active.get(key, 0) + 1
        return states, reasons

    # ------------------------------------------------------------------ claim

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        """See :meth:`queue_core.storage.Storage.claim`.

        One statement starts the unkeyed jobs among the top ``limit`` ready ones. Jobs with
        a ``queue`` concurrency limit met among them (rare) are claimed afterwards by
        :meth:`_claim_keyed`, which counts running jobs per key under a lock.
        """
        if limit <= 0 or not queues:
            return []
        qs = list(dict.fromkeys(queues))
        t = self._clock(now)
        started, keyed = self._claim_unkeyed(worker_id, qs, limit, lease_ms, t)
        pairs = self._claim_pairs(started)
        if keyed and len(pairs) < limit:
            pairs.extend(self._claim_keyed(worker_id, qs, limit - len(pairs), lease_ms, t))
        if len(pairs) > 1:
            pairs.sort(key=lambda p: p[0])
        return [c for _, c in pairs]

    def _claim_keyed(
        self, worker_id: str, qs: list[str], limit: int, lease_ms: int, now: int | None
    ) -> list[tuple[Order, ClaimedJob]]:
        """Claim honouring ``queue`` concurrency limits; ``(order, job)`` pairs."""
        with self._tx() as cur:
            chosen = self._pick_keyed(cur, qs, limit, now)
            if not chosen:
                return []
            t = int(chosen[0]["now_ms"])
            starts: list[dict[str, Any]] = []
            claimed: list[tuple[Order, ClaimedJob]] = []
            for r in chosen:
                timeout, hb = r["timeout_ms"], r["heartbeat_ms"]
                start = {
                    "seq": r["seq"],
                    "attempt": r["attempt"] + 1,
                    "worker": worker_id,
                    "token": os.urandom(12).hex(),
                    "lease": t + lease_ms,
                    "deadline": t + timeout if timeout is not None else None,
                    "hb": t + hb if hb is not None else None,
                    "now": t,
                }
                starts.append(start)
                row = {**dict(r), "attempt": start["attempt"], "lease_token": start["token"],
                       "lease_expires_at": start["lease"], "deadline": start["deadline"],
                       "started_at": t}
                claimed.append(((-r["priority"], r["run_at"], r["seq"]), claimed_from_row(row)))
            cur.executemany(self._q["start_job"], starts)  # attempt records: at the end
            return claimed

    def _pick_keyed(self, cur: Any, qs: list[str], limit: int, now: int | None) -> list[Row]:
        """The ready jobs to start: keyed ones only while their key has a free slot
        (a key locked by another claim is skipped this round)."""
        sql = self._q["select_ready"].replace(
            "{queues}", queries.queues_filter(self.dialect, len(qs))
        )
        params: dict[str, Any] = {"queues": self._list(qs), "now": now, "limit": limit}
        params.update((f"q{i}", q) for i, q in enumerate(qs))
        chosen: list[Row] = []
        excluded: list[int] = []
        running: dict[str, int] = {}
        rates = RateClaims(self, cur)
        for _ in range(16):
            params["excluded"] = self._list(excluded)
            cur.execute(sql, params)
            rows = cur.fetchall()
            if not rows:
                break
            params["now"] = rows[0]["now_ms"]
            self._count_running(cur, rows, running)
            blocked = False
            for r in rows:
                key, cap = r["concurrency_key"], r["concurrency_limit"]
                excluded.append(r["seq"])  # our own row locks do not hide it next round
                capped = key is not None and cap is not None and not r["concurrency_skip"]
                now_ms = int(r["now_ms"])
                if (capped and running[key] >= cap) or not rates.take(r["rate_key"], now_ms):
                    blocked = True
                    continue
                if capped:
                    running[key] += 1
                chosen.append(r)
            if not blocked or len(chosen) >= limit:
                break
            params["limit"] = limit - len(chosen)
        rates.save()
        return chosen

    def _count_running(self, cur: Any, rows: list[Row], running: dict[str, int]) -> None:
        """Lock each new key of ``rows`` and count its running jobs; a key that another
        claim holds counts as full (``2**31``) this round."""
        keys = sorted(
            {
                r["concurrency_key"]
                for r in rows
                if r["concurrency_key"] is not None
                and r["concurrency_limit"] is not None
                and not r["concurrency_skip"]
                and r["concurrency_key"] not in running
            }
        )
        locked = [k for k in keys if self._try_lock_key(cur, k, wait=False)]
        for k in keys:
            running[k] = 0 if k in locked else 2**31
        if locked:
            cur.execute(self._q["count_running"], {"keys": self._list(locked)})
            for r in cur.fetchall():
                running[r["key"]] = int(r["n"])

    # ------------------------------------------------------------------ lease

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.Storage.heartbeat`."""
        params = {
            "id": ref.job_id,
            "attempt": ref.attempt,
            "token": ref.lease_token,
            "now": self._clock(now),
        }
        with self._stmt() as cur:
            row = cur.execute(self._q["heartbeat"], params).fetchone()
        if row is None:
            raise LeaseLost(f"attempt {ref.attempt} of job {ref.job_id} is not current")
        return bool(row["cancel_requested"])

    # ------------------------------------------------------------------ finish

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.Storage.finish`.

        The state and job reason of each end come from
        :func:`~queue_core.policy.outcomes.end_state`. The batch's fenced updates of jobs and
        attempt records run as one statement (PostgreSQL) or two (SQLite) per round, rows
        taken in job id order; a job named twice in one batch goes to a second round (its
        first end has cleared the lease, so the second is refused unless the first was).
        ``DEAD`` ends then get their dead-letter entries in the same transaction.
        A flow step's end goes through :mod:`.flows`: a dotted id (``<execution>.<idx>``) is
        looked up and its row's ``execution_id`` decides (a plain dotted id ends as any job).
        """
        if not ends:
            return []
        if any("." in e.ref.job_id for e in ends):
            return self._finish_steps(ends, now)
        return self._finish_plain(ends, now)

    def _finish_plain(self, ends: Sequence[AttemptEnd], now: int | None) -> list[bool]:
        t = self._clock(now)
        values = [end_values(e) for e in ends]
        rounds = _rounds(ends)
        dead = any(v.dead_id is not None for v in values)
        atomic = dead or len(rounds) > 1 or not self._single_statement_batches
        took = [False] * len(ends)
        wake = any(v.requeue for v in values)
        with self._tx() if atomic else self._hot() as cur:
            for idx in rounds:
                done = self._finish_batch(cur, [values[i] for i in idx], t)
                for i in idx:
                    took[i] = ends[i].ref.job_id in done
                wake = wake or any(k is not None for k in done.values())
            if dead:
                self._bury(
                    cur,
                    [
                        (e.ref.job_id, v.dead_id, v.reason or "", e.error)
                        for e, v, ok in zip(ends, values, took, strict=True)
                        if ok and v.dead_id is not None
                    ],
                )
            if wake:
                self._notify(cur)
        return took

    def _bury(self, cur: Any, graves: list[Grave]) -> None:
        """Write the dead-letter entries of jobs already ended ``dead`` (their attempt
        records final): each carries the job's spec as enqueued."""
        if not graves:
            return
        ids = self._list([g[0] for g in graves])
        rows = {r["id"]: r for r in cur.execute(self._q["select_for_dead"], {"ids": ids})}
        attempts: dict[str, list[dict[str, Any]]] = {}
        for a in cur.execute(self._q["select_attempts_of"], {"ids": ids}).fetchall():
            attempts.setdefault(a["job_id"], []).append(attempt_json(a))
        entries = [
            dead_entry(rows[job_id], dead_id=dead_id, reason=reason, error=error,
                       attempts=attempts.get(job_id, []))
            for job_id, dead_id, reason, error in graves
        ]
        cur.executemany(self._q["insert_dead"], entries)

    # ------------------------------------------------------------------ reaper

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """See :meth:`queue_core.storage.Storage.reap`.

        The stale rows are read under lock (``FOR UPDATE SKIP LOCKED`` on PostgreSQL,
        the write lock on SQLite); :func:`~queue_core.policy.outcomes.reap_verdict` decides
        each from its stored bounds. Then queued jobs past their schedule-to-start
        deadline are dead-lettered unrun.
        """
        if limit <= 0:
            return []
        t = self._clock(now)
        steps = self._reap_flows(now, limit)  # deadlines, then step jobs (not in select_stale)
        with self._tx() as cur:
            cur.execute(self._q["select_stale"], {"now": t, "limit": limit})
            reaped, wake = self._reap_stale(cur, cur.fetchall())
            reaped[:0] = steps
            if len(reaped) < limit:
                cur.execute(
                    self._q["select_sts_expired"], {"now": t, "limit": limit - len(reaped)}
                )
                reaped.extend(self._expire_unstarted(cur, cur.fetchall()))
            if wake:
                self._notify(cur)
        return reaped

    def _reap_stale(self, cur: Any, rows: list[Row]) -> tuple[list[ReapedJob], bool]:
        attempts: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        graves: list[Grave] = []
        reaped: list[ReapedJob] = []
        wake = False
        for r in rows:
            t = int(r["now_ms"])
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
            )
            if verdict is None:
                continue
            dead_id = uuid.uuid4().hex if verdict.state is JobState.DEAD else None
            attempts.append({"job_id": r["id"], "number": r["attempt"], "now": t,
                             "outcome": verdict.outcome.value, "reason": verdict.reason.value})
            updates.append({"seq": r["seq"], "state": verdict.state.value, "now": t,
                            "reason": verdict.job_reason, "run_at": verdict.ready_at,
                            "dead_id": dead_id})
            if dead_id is not None:
                graves.append((r["id"], dead_id, verdict.job_reason or "", None))
            wake = wake or verdict.state is JobState.QUEUED or r["concurrency_key"] is not None
            reaped.append(ReapedJob(job_id=r["id"], attempt=r["attempt"],
                                    outcome=verdict.outcome, reason=verdict.reason.value,
                                    state=verdict.state))
        if updates:
            cur.executemany(self._q["end_attempt"], attempts)
            cur.executemany(self._q["reap_job"], updates)
            self._bury(cur, graves)
        return reaped, wake

    def _expire_unstarted(self, cur: Any, rows: list[Row]) -> list[ReapedJob]:
        """Dead-letter queued jobs past their schedule-to-start deadline."""
        reason = Reason.SCHEDULE_TO_START.value
        updates = [
            {"seq": r["seq"], "state": JobState.DEAD.value, "reason": reason, "run_at": None,
             "now": int(r["now_ms"]), "dead_id": uuid.uuid4().hex}
            for r in rows
        ]
        if not updates:
            return []
        cur.executemany(self._q["reap_job"], updates)
        self._bury(cur, [(r["id"], u["dead_id"], reason, None)
                         for r, u in zip(rows, updates, strict=True)])
        return [
            ReapedJob(job_id=r["id"], attempt=0, outcome=None, reason=reason,
                      state=JobState.DEAD)
            for r in rows
        ]

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """See :meth:`queue_core.storage.Storage.prune`: jobs finished at or before
        ``now - retention_ms`` (retention 0: every finished job); attempt records go with
        their job."""
        if limit <= 0:
            return 0
        with self._tx() as cur:
            t = self._resolve_now(cur, now)
            cutoff = {"cutoff": t - self.retention_ms, "limit": limit}
            self._prune_executions(cur, t - self.retention_ms, limit)
            rows = cur.execute(self._q["select_prunable"], cutoff).fetchall()
            if not rows:
                return 0
            ids = {"ids": self._list([r["id"] for r in rows])}
            cur.execute(self._q["delete_attempts_of"], ids)
            cur.execute(self._q["unique_forget"], ids)  # keys naming a pruned job
            cur.execute(self._q["delete_jobs"], {"seqs": self._list([r["seq"] for r in rows])})
            return len(rows)

    # ------------------------------------------------------------------ control and reads

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """See :meth:`queue_core.storage.Storage.cancel`."""
        if "." in job_id and (step := self._cancel_step(job_id, now)) is not None:
            return step
        with self._tx() as cur:
            row = cur.execute(self._q["select_for_cancel"], {"id": job_id}).fetchone()
            if row is None:
                raise NotFound(f"no job with id {job_id!r}")
            state = JobState(row["state"])
            if state is JobState.QUEUED:
                t = self._resolve_now(cur, now)
                cur.execute(self._q["cancel_queued"], {"seq": row["seq"], "now": t})
                self._notify(cur)  # may free a skip-concurrency slot
                return JobState.CANCELLED
            if state is JobState.RUNNING:
                cur.execute(self._q["request_cancel"], {"seq": row["seq"]})
            return state

    def _fetch(self, name: str, params: dict[str, Any]) -> list[Row]:
        with self._stmt() as cur:
            rows: list[Row] = cur.execute(self._q[name], params).fetchall()
        return rows

    def get_job(self, job_id: str) -> JobRecord | None:
        """See :meth:`queue_core.storage.Storage.get_job`."""
        rows = self._fetch("get_job", {"id": job_id})
        return job_from_row(rows[0]) if rows else None

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """See :meth:`queue_core.storage.Storage.list_attempts`."""
        return [attempt_from_row(r) for r in self._fetch("list_attempts", {"id": job_id})]

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.Storage.count_pending`."""
        if not queues:
            return 0
        params = {"queues": self._list(list(queues)), "now": self._clock(now),
                  "horizon_ms": horizon_ms}
        return int(self._fetch("count_pending", params)[0]["n"])

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """See :meth:`queue_core.storage.Storage.stats`."""
        counts: dict[str, dict[str, int]] = {}
        for r in self._fetch("stats", {"now": self._clock(now)}):
            counts.setdefault(r["queue"], {})[r["kind"]] = int(r["n"])
        return [QueueStats(queue=q, **counts[q]) for q in sorted(counts)]

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """A page of jobs, newest (latest enqueued) first, optionally filtered."""
        params = {"state": JobState(state).value if state is not None else None,
                  "queue": queue, "limit": limit, "offset": offset}
        return [job_from_row(r) for r in self._fetch("list_jobs", params)]

    # ------------------------------------------------------------------ dead letters

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """See :meth:`queue_core.storage.Storage.list_dead`."""
        params = {"limit": limit, "offset": offset, "task": task_name}
        name = "list_dead" if task_name is None else "list_dead_of_task"
        return [dead_from_row(r) for r in self._fetch(name, params)]

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """See :meth:`queue_core.storage.Storage.get_dead`."""
        rows = self._fetch("get_dead", {"id": dead_id})
        return dead_from_row(rows[0]) if rows else None

    def retry_dead(
        self, dead_id: str, queue: str | None = None, *, now: int | None = None
    ) -> str:
        """See :meth:`queue_core.storage.Storage.retry_dead`: the entry's spec as enqueued,
        replayed by :func:`~queue_core.policy.outcomes.replay_job`."""
        with self._tx() as cur:
            row = cur.execute(self._q["take_dead"], {"id": dead_id}).fetchone()
            if row is None:
                raise NotFound(f"no dead-letter entry with id {dead_id!r}")
            t = self._resolve_now(cur, now)
            cur.execute(self._q["delete_dead"], {"seq": row["seq"]})
            job = replay_job(
                spec_of_dead(row), dead_id=dead_id, new_id=uuid.uuid4().hex, queue=queue, now=t
            )
            self._insert(cur, [job], None, None, t)
            if job.rate_key is not None:  # its rate stays in qc_rates
                cur.execute(self._q["rate_mark"], {"key": job.rate_key, "id": job.id})
            return job.id

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """See :meth:`queue_core.storage.Storage.purge_dead`."""
        with self._stmt() as cur:
            cur.execute(self._q["purge_dead"], {"task": task_name, "before": before})
            return int(cur.rowcount)


def _rounds(ends: Sequence[AttemptEnd]) -> list[list[int]]:
    """Indexes of ``ends`` in job id order (the lock order), split so that each round
    names a job once."""
    ids = [e.ref.job_id for e in ends]
    order = sorted(range(len(ids)), key=ids.__getitem__)
    if len(set(ids)) == len(ids):
        return [order]
    rounds: list[list[int]] = []
    seen: dict[str, int] = {}
    for i in order:
        job_id = ends[i].ref.job_id
        k = seen.get(job_id, 0)
        seen[job_id] = k + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(i)
    return rounds
