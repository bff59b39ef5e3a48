"""The flow tables of the SQL backend (schema version 3; design ``flows-storage.md`` §4.2).

* ``qc_flow_specs``: a flow definition's JSON, once per content hash.
* ``qc_executions``: one row per execution (the fields of
  :class:`~queue_core.flows.storage.ExecutionRecord`); ``seq`` orders listing and the
  concurrency queue (oldest first).
* ``qc_flow_steps``: one row per (execution, step index): the stored step state, its job
  once released, the step job as the core built it (``job``: JSON of the
  :class:`~queue_core.model.NewJob` fields but the payload, which is ``payload``), and a
  succeeded step's result (so ``get_step_inputs`` outlives the job's retention).

A released step's stored state stays ``queued`` while its job is queued or running: the
view reads ``running`` from the job row (claim writes nothing else), and the step takes
its job's final state in the transaction that ends the job.

Version 10 adds the counters of the fast step end (:mod:`backends.sql.flow_fast`):
``qc_executions.n_succeeded`` / ``n_bad`` and ``qc_flow_steps.unmet``, kept by every
transaction that writes a step state.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)

from backends.sql.schema import _partial, _SeqType, metadata

__all__ = ["TABLES", "executions", "specs", "steps"]

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
)
Index("ix_qc_executions_flow", executions.c.flow, executions.c.seq)
Index("ix_qc_executions_state", executions.c.state, executions.c.seq)
_partial(
    "ix_qc_executions_deadline",
    text("state = 'running' AND deadline_at IS NOT NULL"),
    executions.c.deadline_at,
)
_partial(
    "ix_qc_executions_conc",
    text("conc_key IS NOT NULL AND state IN ('queued', 'running', 'cancelling')"),
    executions.c.conc_key,
    executions.c.seq,
)
_partial(
    "ix_qc_executions_finished",
    text("state NOT IN ('queued', 'running', 'cancelling')"),
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

TABLES = (specs, executions, steps)
"""The tables version 3 creates."""
