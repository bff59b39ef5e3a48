"""Named statements of the SQL backend, built once per dialect.

Statements are SQLAlchemy Core constructs rather than SQL text so that one definition
serves SQLite and PostgreSQL; where the dialects differ it is spelled out here:

* ``now``: a bound parameter. On PostgreSQL a ``NULL`` parameter falls back to the
  server clock (``statement_timestamp()`` in epoch ms), so workers that pass no time
  are judged by one clock; SQLite always receives the local clock from Python.
* ``FOR UPDATE [SKIP LOCKED]`` is rendered on PostgreSQL only; on SQLite every write
  transaction is ``BEGIN IMMEDIATE``, which already serialises writers.
* Statements run with ``executemany`` on the hot path (:data:`MANY`) hold only
  ``b_*`` parameters (constants are literals), so they can be compiled once and sent
  straight to the driver, skipping SQLAlchemy's per-row parameter processing.
* State filters are literals (``state = 'queued'``), never parameters, so that SQLite
  and PostgreSQL can prove that the partial indexes apply.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    text,
    update,
)

from backends.sql.schema import attempts, dead, jobs

__all__ = ["MANY", "PG_NOW_SQL", "Statements", "state_is"]

MANY = ("start_jobs", "start_attempts", "renew_leases", "end_jobs", "end_attempts")
"""Statements executed with many parameter rows; see :meth:`Statements.many`."""

PG_NOW_SQL = "(extract(epoch from statement_timestamp()) * 1000)::bigint"
"""Epoch milliseconds by the PostgreSQL server's clock, stable within one statement."""

FINISHED_SQL = "state NOT IN ('queued', 'running')"


def state_is(state: str) -> ColumnElement[bool]:
    """``state = '<state>'`` as a literal, so partial indexes match."""
    return jobs.c.state == literal_column(f"'{state}'")


def _b(name: str) -> Any:
    return bindparam(name)


class Statements:
    """Every statement the backend runs, compiled lazily and cached by SQLAlchemy."""

    def __init__(self, postgres: bool) -> None:
        self.postgres = postgres
        j = jobs.c
        now_param = bindparam("now", type_=BigInteger)
        now: ColumnElement[Any] = (
            func.coalesce(now_param, literal_column(PG_NOW_SQL, BigInteger))
            if postgres
            else now_param
        )
        self.now = now
        queued, running = state_is("queued"), state_is("running")
        queues: Any = bindparam("queues", expanding=True)

        self.server_now = select(literal_column(PG_NOW_SQL, BigInteger).label("now_ms"))
        self.server_now_notify = select(
            literal_column(PG_NOW_SQL, BigInteger).label("now_ms"),
            func.pg_notify("qc_jobs", "").label("n"),
        )
        self.notify = select(func.pg_notify("qc_jobs", ""))

        # ---------------------------------------------------------------- enqueue
        self.insert_jobs = insert(jobs)
        self.count_active = (
            select(j.concurrency_key, func.count())
            .where(
                j.concurrency_key.in_(bindparam("keys", expanding=True)),
                text("concurrency_key IS NOT NULL AND state IN ('queued', 'running')"),
            )
            .group_by(j.concurrency_key)
        )
        self.count_running = (
            select(j.concurrency_key, func.count())
            .where(j.concurrency_key.in_(bindparam("keys", expanding=True)), running)
            .group_by(j.concurrency_key)
        )
        self.lock_key = text("SELECT pg_advisory_xact_lock(815002, hashtext(:k))")
        self.try_lock_key = text("SELECT pg_try_advisory_xact_lock(815002, hashtext(:k))")

        # ---------------------------------------------------------------- claim
        claim_cols = [
            j.seq,
            j.id,
            j.task_name,
            j.queue,
            j.payload,
            j.priority,
            j.attempt,
            j.max_attempts,
            j.timeout_ms,
            j.heartbeat_ms,
            j.options,
            j.enqueued_at,
            j.replay_of,
            j.concurrency_key,
            j.concurrency_limit,
            j.concurrency_skip,
            j.run_at,
            now.label("now_ms"),
        ]
        ready = and_(
            queued,
            j.queue.in_(queues),
            j.run_at <= now,
            or_(j.expires_at.is_(None), j.expires_at > now),
        )
        base = (
            select(*claim_cols)
            .order_by(j.priority.desc(), j.run_at, j.seq)
            .limit(bindparam("limit"))
            .with_for_update(skip_locked=True)
        )
        self.select_ready = base.where(ready)
        self.select_ready_excluding = base.where(
            ready, j.seq.not_in(bindparam("excluded", expanding=True))
        )
        self.start_jobs = (
            update(jobs)
            .where(j.seq == _b("b_seq"))
            .values(
                state=literal_column("'running'"),
                reason=null(),
                attempt=_b("b_attempt"),
                worker_id=_b("b_worker"),
                lease_token=_b("b_token"),
                lease_expires_at=_b("b_lease"),
                deadline=_b("b_deadline"),
                heartbeat_expires_at=_b("b_hb"),
                started_at=_b("b_started"),
                expires_at=null(),
            )
        )
        self.insert_attempts = insert(attempts)
        self.start_attempts = insert(attempts).values(
            job_id=_b("b_job_id"),
            number=_b("b_number"),
            worker_id=_b("b_worker"),
            started_at=_b("b_started"),
        )

        # ---------------------------------------------------------------- renew / heartbeat
        self.select_current = (
            select(
                j.seq,
                j.id,
                j.attempt,
                j.lease_token,
                j.cancel_requested,
                now.label("now_ms"),
            )
            .where(j.id.in_(bindparam("ids", expanding=True)), running)
            .order_by(j.id)
            .with_for_update()
        )
        self.renew_leases = (
            update(jobs).where(j.seq == _b("b_seq")).values(lease_expires_at=_b("b_lease"))
        )
        self.heartbeat = (
            update(jobs)
            .where(
                j.id == _b("b_id"),
                j.attempt == _b("b_attempt"),
                j.lease_token == _b("b_token"),
                running,
            )
            .values(heartbeat_expires_at=now + j.heartbeat_ms)
            .returning(j.cancel_requested)
        )

        # ---------------------------------------------------------------- finish / reap
        end_cols = [
            j.seq,
            j.id,
            j.task_name,
            j.queue,
            j.payload,
            j.priority,
            j.attempt,
            j.lease_token,
            j.max_attempts,
            j.lost_delay_ms,
            j.retry_lost_delay_ms,
            j.timeout_ms,
            j.heartbeat_ms,
            j.schedule_to_start_ms,
            j.concurrency_key,
            j.concurrency_limit,
            j.concurrency_skip,
            j.options,
            j.replay_of,
            j.run_at,
            j.lease_expires_at,
            j.deadline,
            j.heartbeat_expires_at,
            j.cancel_requested,
            j.error_class,
            j.error_type,
            j.error_message,
            j.error_traceback,
            now.label("now_ms"),
        ]
        self.select_running_for_end = (
            select(*end_cols)
            .where(j.id.in_(bindparam("ids", expanding=True)), running)
            .order_by(j.id)
            .with_for_update()
        )
        self.select_stale = (
            select(*end_cols)
            .where(
                running,
                or_(j.lease_expires_at <= now, j.deadline <= now, j.heartbeat_expires_at <= now),
            )
            .order_by(j.lease_expires_at, j.seq)
            .limit(bindparam("limit"))
            .with_for_update(skip_locked=True)
        )
        self.select_sts_expired = (
            select(*end_cols)
            .where(queued, j.expires_at <= now)
            .order_by(j.expires_at, j.seq)
            .limit(bindparam("limit"))
            .with_for_update(skip_locked=True)
        )
        self.end_jobs = (
            update(jobs)
            .where(j.seq == _b("b_seq"))
            .values(
                state=_b("b_state"),
                reason=_b("b_reason"),
                run_at=_b("b_run_at"),
                expires_at=_b("b_expires_at"),
                retry_lost_delay_ms=_b("b_retry_lost_delay_ms"),
                result=_b("b_result"),
                finished_at=_b("b_finished_at"),
                error_class=_b("b_error_class"),
                error_type=_b("b_error_type"),
                error_message=_b("b_error_message"),
                error_traceback=_b("b_error_traceback"),
                dead_id=_b("b_dead_id"),
                lease_token=null(),
                lease_expires_at=null(),
                deadline=null(),
                heartbeat_expires_at=null(),
            )
        )
        a = attempts.c
        self.end_attempts = (
            update(attempts)
            .where(a.job_id == _b("b_job_id"), a.number == _b("b_number"))
            .values(
                finished_at=_b("b_finished_at"),
                outcome=_b("b_outcome"),
                reason=_b("b_reason"),
                error_class=_b("b_error_class"),
                error_type=_b("b_error_type"),
                message=_b("b_message"),
                traceback=_b("b_traceback"),
                mode=_b("b_mode"),
            )
        )
        self.select_attempts_of = (
            select(attempts)
            .where(a.job_id.in_(bindparam("ids", expanding=True)))
            .order_by(a.job_id, a.number)
        )
        self.insert_dead = insert(dead)

        # ---------------------------------------------------------------- prune
        self.select_prunable = (
            select(j.seq, j.id)
            .where(text(FINISHED_SQL), j.finished_at <= _b("cutoff"))
            .order_by(j.finished_at)
            .limit(bindparam("limit"))
        )
        self.delete_attempts_of = delete(attempts).where(
            a.job_id.in_(bindparam("ids", expanding=True))
        )
        self.delete_jobs = delete(jobs).where(j.seq.in_(bindparam("seqs", expanding=True)))

        # ---------------------------------------------------------------- control and reads
        self.select_job_for_cancel = (
            select(j.seq, j.state).where(j.id == _b("b_id")).with_for_update()
        )
        self.cancel_queued = (
            update(jobs)
            .where(j.seq == _b("b_seq"), queued)
            .values(state="cancelled", reason="cancelled", finished_at=_b("b_now"), expires_at=None)
        )
        self.request_cancel = (
            update(jobs).where(j.seq == _b("b_seq"), running).values(cancel_requested=True)
        )
        self.get_job = select(jobs).where(j.id == _b("b_id"))
        self.list_attempts = (
            select(attempts).where(a.job_id == _b("b_id")).order_by(a.number)
        )
        by = bindparam("by", type_=BigInteger)
        self.count_pending = select(
            select(func.count())
            .select_from(jobs)
            .where(running, j.queue.in_(queues))
            .scalar_subquery()
            + select(func.count())
            .select_from(jobs)
            .where(queued, j.queue.in_(queues), j.run_at <= by)
            .scalar_subquery()
        )
        kind = case(
            (and_(queued, j.run_at > now), literal_column("'scheduled'")),
            (queued, literal_column("'ready'")),
            else_=j.state,
        ).label("kind")
        self.stats = select(j.queue, kind, func.count()).group_by(j.queue, kind)

        # ---------------------------------------------------------------- dead letters
        d = dead.c
        self.list_dead = (
            select(dead)
            .order_by(d.dead_at.desc(), d.seq.desc())
            .limit(bindparam("limit"))
            .offset(bindparam("offset"))
        )
        self.list_dead_of_task = self.list_dead.where(d.task_name == _b("b_task"))
        self.get_dead = select(dead).where(d.id == _b("b_id"))
        self.take_dead = select(dead).where(d.id == _b("b_id")).with_for_update()
        self.delete_dead = delete(dead).where(d.seq == _b("b_seq"))
