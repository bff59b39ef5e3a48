"""The SQL backend's tables and indexes, as SQLAlchemy objects (the schema engine's).

Imported only to create or migrate a schema (:mod:`backends.sql.schema`): the operations
run on plain DBAPI connections, and SQLAlchemy costs more than the rest of a start-up.

Index design (what each query relies on):

* ``ix_qc_jobs_ready``: partial on ``state = 'queued' AND held IS NULL``; the claim scan,
  in claim order (priority, place in line ``coalesce(place_at, run_at)``, seq; version 15).
  Its size is the number of queued jobs only, so claim cost does not grow with finished
  jobs; since version 14 the queued jobs of a paused task or flow are not in it either
  (``held``, :mod:`backends.sql.pauses`), so they cost a claim nothing.
* ``ix_qc_jobs_held``: the jobs set aside by a pause (``held``), what ``resume`` puts back.
* ``ix_qc_jobs_sts``: queued jobs with a schedule-to-start deadline (``expires_at``).
* ``ix_qc_jobs_lease`` / ``_deadline`` / ``_heartbeat``: partial on ``state = 'running'``;
  the reaper's scans.
* ``ix_qc_jobs_ckey``: active jobs per concurrency key (slot counting).
* ``ix_qc_jobs_finished``: finished jobs by ``finished_at``; the retention prune and
  the throughput counts.
* ``ix_qc_jobs_enqueued``: jobs by ``enqueued_at``; the throughput counts.
* ``ix_qc_dead_at`` / ``ix_qc_dead_task``: dead-letter pages, newest first.

Flows (schema version 3, design ``flows-storage.md`` §4.2): ``qc_flow_specs`` (a flow
definition's JSON, once per content hash), ``qc_executions`` (one row per execution;
``seq`` orders listing and the concurrency queue), ``qc_flow_steps`` (one row per step:
its stored state, its job once released, the step job as the core built it -- ``job``,
JSON of the ``NewJob`` fields but the payload --, and a succeeded step's result, so
``get_step_inputs`` outlives the job's retention). Version 10 adds the counters of the
fast step end: ``qc_executions.n_succeeded`` / ``n_bad`` and ``qc_flow_steps.unmet``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)

__all__ = [
    "CONTROL_TABLES",
    "FLOW_TABLES",
    "WORKFLOW_TABLES",
    "attempts",
    "dead",
    "events",
    "executions",
    "ix_executions_conc",
    "ix_executions_deadline",
    "ix_executions_finished",
    "ix_jobs_enqueued",
    "ix_jobs_execution",
    "ix_jobs_held",
    "ix_jobs_ready",
    "ix_jobs_rr",
    "jobs",
    "memos",
    "meta",
    "metadata",
    "rated",
    "rates",
    "schedule_ticks",
    "specs",
    "steps",
    "unique_keys",
    "waits",
    "workers",
]

# SQLite only auto-assigns INTEGER PRIMARY KEY (the rowid alias), not BIGINT.
_SeqType = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData()

meta = Table(
    "qc_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

jobs = Table(
    "qc_jobs",
    metadata,
    Column("seq", _SeqType, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("task_name", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("reason", Text),
    Column("enqueued_at", BigInteger, nullable=False),
    Column("run_at", BigInteger, nullable=False),
    # schedule-to-start deadline while queued: run_at + schedule_to_start_ms
    Column("expires_at", BigInteger),
    Column("max_attempts", Integer, nullable=False),
    # as enqueued (the dead-letter spec); a RETRY decision's delay goes to the next column
    Column("lost_delay_ms", BigInteger, nullable=False),
    Column("timeout_ms", BigInteger),
    Column("heartbeat_ms", BigInteger),
    Column("schedule_to_start_ms", BigInteger),
    Column("concurrency_key", Text),
    Column("concurrency_limit", Integer),
    Column("concurrency_skip", Boolean(create_constraint=False), nullable=False),
    Column("options", Text),
    Column("replay_of", Text),
    Column("attempt", Integer, nullable=False),
    Column("worker_id", Text),
    Column("lease_token", String(32)),
    Column("lease_expires_at", BigInteger),
    Column("deadline", BigInteger),
    Column("heartbeat_expires_at", BigInteger),
    Column("started_at", BigInteger),
    Column("finished_at", BigInteger),
    Column("cancel_requested", Boolean(create_constraint=False), nullable=False),
    Column("result", LargeBinary),
    Column("error_class", Text),
    Column("error_type", Text),
    Column("error_message", Text),
    Column("error_traceback", Text),
    Column("dead_id", String(64)),
    # version 2: the reap delay set by the last RETRY decision; NULL = lost_delay_ms
    Column("retry_lost_delay_ms", BigInteger),
    # version 3 (flows): the execution and step of a step job; the execution's deadline
    Column("execution_id", String(64)),
    Column("step_id", Text),
    Column("flow_deadline_at", BigInteger),
    # version 5: the rate key of a rate-limited job (its rate is in qc_rates); NULL = none
    Column("rate_key", Text),
    # version 11 (flow control, SPEC §13): the latest progress report (SupportsProgress),
    # the concurrency behaviour beyond `queue` / `skip` and its round-robin group, and the
    # debounce key with its windows; NULL = none
    Column("progress", Float),
    Column("progress_message", Text),
    Column("progress_at", BigInteger),
    Column("concurrency_behavior", Text),
    Column("concurrency_group", Text),
    Column("debounce_key", Text),
    Column("debounce_ms", BigInteger),
    Column("debounce_max_ms", BigInteger),
    # version 14: the pause (``<kind>:<name>``) a queued job of a paused task or flow was
    # set aside for, out of the ready index until its resume (backends/sql/pauses.py)
    Column("held", Text),
    # version 15: a reaped job's place in line while its backoff delays run_at
    # (queue_core.rules.outcomes.reap_place_at); NULL = its place is run_at. Set by the
    # reap, kept by the claim (a job reaped again keeps it), cleared by every other requeue.
    Column("place_at", BigInteger),
    # version 16: the running attempt is held (claimed ahead of a free slot, its body not
    # started: SupportsPrefetch); a reap spends no attempt (rules.outcomes.reap_verdict).
    # Set by every claim, cleared by start_claimed; NULL on rows stored before: not held.
    Column("ahead", Boolean(create_constraint=False)),
    # version 16: how many of its held attempts a reap gave back unspent (the rule bounds
    # it: rules.outcomes.MAX_HELD_REFUNDS); NULL = none
    Column("ahead_refunds", Integer),
)

PLACE = "coalesce(place_at, run_at)"
"""A queued job's place in line: claims order ready jobs by priority, this, then seq (the
statements spell it the same, so that ``ix_qc_jobs_ready`` serves their ORDER BY)."""

_READY = text("state = 'queued' AND held IS NULL")
_RUNNING = text("state = 'running'")
_FINISHED = text("state NOT IN ('queued', 'running')")


def _partial(name: str, where: Any, *cols: Any) -> Index:
    return Index(name, *cols, sqlite_where=where, postgresql_where=where)


ix_jobs_ready = _partial(
    "ix_qc_jobs_ready",
    _READY,
    jobs.c.queue,
    jobs.c.priority.desc(),
    text(PLACE),
    jobs.c.seq,
)
"""Version 14: the queued jobs but those set aside by a pause (``held``); version 15
orders it by :data:`PLACE` (before: ``run_at``)."""
ix_jobs_held = _partial("ix_qc_jobs_held", text("held IS NOT NULL"), jobs.c.held)
"""Version 14: the jobs set aside by a pause, by pause."""
_partial("ix_qc_jobs_sts", text("state = 'queued' AND expires_at IS NOT NULL"), jobs.c.expires_at)
_partial("ix_qc_jobs_lease", _RUNNING, jobs.c.lease_expires_at)
_partial("ix_qc_jobs_deadline", text("state = 'running' AND deadline IS NOT NULL"), jobs.c.deadline)
_partial(
    "ix_qc_jobs_heartbeat",
    text("state = 'running' AND heartbeat_expires_at IS NOT NULL"),
    jobs.c.heartbeat_expires_at,
)
_partial(
    "ix_qc_jobs_ckey",
    text("concurrency_key IS NOT NULL AND state IN ('queued', 'running')"),
    jobs.c.concurrency_key,
    jobs.c.state,
)
_partial("ix_qc_jobs_finished", _FINISHED, jobs.c.finished_at)
rated = _partial(
    "ix_qc_jobs_rated", text("rate_key IS NOT NULL AND state = 'queued'"), jobs.c.run_at
)
# Created by version 1, dropped by version 7 (written on every claim and finish, read by
# no query).
Index("ix_qc_jobs_state_seq", jobs.c.state, jobs.c.seq)
ix_jobs_execution = _partial(
    "ix_qc_jobs_execution",
    text("execution_id IS NOT NULL AND state IN ('queued', 'running')"),
    jobs.c.execution_id,
    jobs.c.id,
)
Index("ix_qc_jobs_queue_seq", jobs.c.queue, jobs.c.seq)
ix_jobs_enqueued = Index("ix_qc_jobs_enqueued", jobs.c.enqueued_at)
"""Version 9: throughput counts (``enqueued_at`` never changes, so updates stay HOT)."""
ix_jobs_rr = _partial(
    "ix_qc_jobs_rr",
    text("state = 'queued' AND concurrency_behavior = 'round_robin'"),
    jobs.c.queue,
    jobs.c.concurrency_group,
    jobs.c.concurrency_key,
    jobs.c.priority.desc(),
    jobs.c.run_at,
    jobs.c.seq,
)
"""Version 13: a round-robin group's queued jobs per key, in claim order."""

attempts = Table(
    "qc_attempts",
    metadata,
    Column("job_id", String(64), nullable=False),
    Column("number", Integer, nullable=False),
    Column("worker_id", Text),
    Column("started_at", BigInteger),
    Column("finished_at", BigInteger),
    Column("outcome", String(16)),
    Column("reason", Text),
    Column("error_class", Text),
    Column("error_type", Text),
    Column("message", Text),
    Column("traceback", Text),
    Column("mode", String(16)),
    PrimaryKeyConstraint("job_id", "number", name="pk_qc_attempts"),
)

dead = Table(
    "qc_dead",
    metadata,
    Column("seq", _SeqType, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("job_id", String(64), nullable=False),
    Column("task_name", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("error", Text),
    Column("error_class", Text),
    Column("reason", Text, nullable=False),
    Column("attempts", Text, nullable=False),  # JSON list of attempt records (epoch ms)
    Column("dead_at", BigInteger, nullable=False),
    Column("replay_of", Text),
    Column("spec", Text, nullable=False),  # JSON of the job's enqueue options (retry_dead)
)
Index("ix_qc_dead_at", dead.c.dead_at, dead.c.seq)
Index("ix_qc_dead_task", dead.c.task_name, dead.c.dead_at, dead.c.seq)

workers = Table(
    "qc_workers",  # schema v6: the worker registry (backends/sql/workers.py)
    metadata,
    Column("id", String(255), primary_key=True),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("queues", Text, nullable=False),  # JSON list of queue names
    Column("slots", Integer, nullable=False),
    Column("busy", Integer, nullable=False),
    Column("stuck", Integer, nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("last_seen", BigInteger, nullable=False),
    Column("ttl_ms", BigInteger, nullable=False),
)


schedule_ticks = Table(  # version 4: the last tick enqueued per periodic schedule
    "qc_schedule_ticks",
    metadata,
    Column("name", Text, primary_key=True),
    Column("last_tick", BigInteger, nullable=False),
)


unique_keys = Table(
    "qc_unique",
    metadata,
    Column("key", Text, primary_key=True),
    Column("job_id", String(64), nullable=False),
    Column("enqueued_at", BigInteger, nullable=False),
    Column("unique_for_ms", BigInteger),
)
"""Version 5: the last job stored with each unique key (SPEC §11)."""
Index("ix_qc_unique_job", unique_keys.c.job_id)

rates = Table(
    "qc_rates",
    metadata,
    Column("key", Text, primary_key=True),
    Column("rate_limit", Integer, nullable=False),
    Column("window_ms", BigInteger, nullable=False),
    Column("stamps", Text, nullable=False),
)
"""Version 5: per rate key, its rate and its kept claim times (a JSON list of epoch ms)."""


specs = Table(
    "qc_flow_specs",
    metadata,
    Column("hash", String(64), primary_key=True),
    Column("body", Text, nullable=False),
)

executions = Table(
    "qc_executions",
    metadata,
    Column("seq", _SeqType, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("flow", Text, nullable=False),
    Column("conc_key", Text),
    Column("conc_limit", Integer),
    Column("conc_skip", Boolean(create_constraint=False)),
    Column("spec_hash", String(64), nullable=False),
    Column("input", LargeBinary, nullable=False),
    Column("state", String(16), nullable=False),
    Column("reason", Text),
    Column("failed_step", Text),
    Column("max_parallel", Integer, nullable=False),
    Column("timeout_ms", BigInteger),
    Column("deadline_at", BigInteger),
    Column("created_at", BigInteger, nullable=False),
    Column("started_at", BigInteger),
    Column("finished_at", BigInteger),
    # Version 10: steps succeeded / in a state that ends the fast path (timed_out, dead,
    # cancelled, skipped, not_run); NULL on executions started before (never counted).
    Column("n_succeeded", Integer),
    Column("n_bad", Integer),
    # Version 11 (workflows): ``workflow`` (NULL: a flow), a sub-execution's parent link,
    # the awaited children's step indexes (JSON list; NULL: none).
    Column("kind", String(16)),
    Column("parent_id", String(64)),
    Column("parent_idx", Integer),
    Column("awaiting", Text),
)
Index("ix_qc_executions_flow", executions.c.flow, executions.c.seq)
Index("ix_qc_executions_state", executions.c.state, executions.c.seq)
# Version 11: ``waiting`` (a suspended workflow) is active like ``running``.
ix_executions_deadline = _partial(
    "ix_qc_executions_deadline",
    text("state IN ('running', 'waiting') AND deadline_at IS NOT NULL"),
    executions.c.deadline_at,
)
ix_executions_conc = _partial(
    "ix_qc_executions_conc",
    text("conc_key IS NOT NULL AND state IN ('queued', 'running', 'cancelling', 'waiting')"),
    executions.c.conc_key,
    executions.c.seq,
)
ix_executions_finished = _partial(
    "ix_qc_executions_finished",
    text("state NOT IN ('queued', 'running', 'cancelling', 'waiting')"),
    executions.c.finished_at,
)

steps = Table(
    "qc_flow_steps",
    metadata,
    Column("execution_id", String(64), nullable=False),
    Column("idx", Integer, nullable=False),
    Column("step_id", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("reason", Text),
    Column("job_id", String(64)),
    Column("deps", Text, nullable=False),  # JSON list of step ids
    Column("job", Text, nullable=False),  # JSON of the step job's NewJob fields
    Column("payload", LargeBinary, nullable=False),
    Column("result", LargeBinary),
    Column("unmet", Integer),  # version 10: dependencies not succeeded (NULL: not counted)
    PrimaryKeyConstraint("execution_id", "idx", name="pk_qc_flow_steps"),
)

FLOW_TABLES = (specs, executions, steps)
"""The tables version 3 creates."""

memos = Table(
    "qc_memos",
    metadata,
    Column("execution_id", String(64), nullable=False),
    Column("key", Text, nullable=False),
    Column("value", LargeBinary, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("at", BigInteger, nullable=False),
    PrimaryKeyConstraint("execution_id", "key", name="pk_qc_memos"),
)
"""Version 11: a workflow's memos (its number among the execution's, its last write)."""

waits = Table(
    "qc_waits",
    metadata,
    Column("execution_id", String(64), nullable=False),
    Column("memo_key", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("key", Text),
    Column("since", BigInteger, nullable=False),
    Column("until", BigInteger),
    PrimaryKeyConstraint("execution_id", "memo_key", name="pk_qc_waits"),
)
"""Version 11: the registered event waits of suspended workflows."""
Index("ix_qc_waits_name", waits.c.name)

events = Table(
    "qc_events",
    metadata,
    Column("seq", _SeqType, primary_key=True, autoincrement=True),
    Column("name", Text, nullable=False),
    Column("key", Text),
    Column("data", LargeBinary, nullable=False),
    Column("at", BigInteger, nullable=False),
)
"""Version 11: the events ``send_event`` stored (until the retention prunes them)."""
Index("ix_qc_events_name", events.c.name, events.c.at)
Index("ix_qc_events_at", events.c.at)

WORKFLOW_TABLES = (memos, waits, events)

pauses = Table(
    "qc_pauses",
    metadata,
    Column("kind", String(16), nullable=False),
    Column("name", Text, nullable=False),
    Column("since", BigInteger, nullable=False),
    PrimaryKeyConstraint("kind", "name", name="pk_qc_pauses"),
)
"""Version 13: the stored pauses (SupportsPause); ``qc_meta`` key ``pauses_version``
counts their changes (what a storage's cached pause list is checked against)."""

debounce_keys = Table(
    "qc_debounce",
    metadata,
    Column("key", Text, primary_key=True),
    Column("job_id", String(64), nullable=False),
)
"""Version 13: the last job stored with each debounce key (SupportsDebounce)."""
Index("ix_qc_debounce_job", debounce_keys.c.job_id)

round_robin = Table(
    "qc_rr",
    metadata,
    Column("grp", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("served", BigInteger, nullable=False),
    PrimaryKeyConstraint("grp", "queue", "key", name="pk_qc_rr"),
)
"""Version 13: each round-robin key's served mark (the group's claim counter at its last
claim), and per group and queue its counter (``key = ''``) (SupportsRoundRobin)."""

CONTROL_TABLES = (pauses, debounce_keys, round_robin)
"""The tables version 11 creates."""
