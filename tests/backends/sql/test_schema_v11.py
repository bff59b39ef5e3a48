"""Schema step 11 (durable workflows): a version-10 database keeps its data.

On SQLite the version-10 database is made from ``data/sqlite_schema_v10.sql``, the
schema script version 10 generated (verbatim). On PostgreSQL it is a fresh database
with what step 11 adds taken away again (its tables and columns dropped, the three
partial indexes of active executions made with their version-10 predicates). The rows
are written with plain SQL, as the version-10 code stored them: a plain job and a
running one-step flow whose step job is queued.
"""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import create_engine, text

from backends.sql import SQLStorage
from backends.sql.schema import SCHEMA_VERSION
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import JobState
from queue_core.rules.flows.spec import FlowSpec, StepSpec
from queue_core.storage.flows import NewExecution, step_job_id
from queue_core.testing import LEASE, T0, complete_end, new_job
from queue_core.testing.suite._durable_base import make_workflow
from tests.backends.sql.old_schemas import sqlite_at_version

_V10_INDEXES = (
    "CREATE INDEX ix_qc_executions_deadline ON qc_executions (deadline_at)"
    " WHERE state = 'running' AND deadline_at IS NOT NULL",
    "CREATE INDEX ix_qc_executions_conc ON qc_executions (conc_key, seq)"
    " WHERE conc_key IS NOT NULL AND state IN ('queued', 'running', 'cancelling')",
    "CREATE INDEX ix_qc_executions_finished ON qc_executions (finished_at)"
    " WHERE state NOT IN ('queued', 'running', 'cancelling')",
)


def _postgres_v10(url: str) -> None:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE qc_memos, qc_waits, qc_events"))
        for column in ("kind", "parent_id", "parent_idx", "awaiting"):
            conn.execute(text(f"ALTER TABLE qc_executions DROP COLUMN {column}"))
        for ddl in _V10_INDEXES:
            conn.execute(text(f"DROP INDEX {ddl.split()[2]}"))
            conn.execute(text(ddl))
        conn.execute(text("UPDATE qc_meta SET value = '10' WHERE key = 'schema_version'"))
    engine.dispose()


def _v10_rows(url: str) -> tuple[str, str, NewExecution]:
    """A plain job and a running flow as version 10 stored them: their ids."""
    spec = FlowSpec(name="old-flow", steps=(StepSpec(id="a", kind="code", task="tests.a"),))
    eid = "old-execution"
    step = new_job(id=step_job_id(eid, 0), task_name="tests.a", execution_id=eid, step_id="a")
    new = NewExecution.build(id=eid, spec=spec, input=b"1", jobs=[step])
    plain = new_job()
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    job = text(
        "INSERT INTO qc_jobs (id, task_name, queue, payload, priority, state, enqueued_at,"
        " run_at, max_attempts, lost_delay_ms, concurrency_skip, attempt, cancel_requested,"
        " execution_id, step_id) VALUES (:id, :task, 'default', :payload, 0, 'queued', :t,"
        " :t, 1, 0, false, 0, false, :e, :step)"
    )
    with engine.begin() as conn:
        conn.execute(job, {"id": plain.id, "task": plain.task_name, "payload": plain.payload,
                           "t": T0, "e": None, "step": None})  # fmt: skip
        conn.execute(job, {"id": step.id, "task": "tests.a", "payload": step.payload, "t": T0,
                           "e": eid, "step": "a"})  # fmt: skip
        conn.execute(text("INSERT INTO qc_flow_specs (hash, body) VALUES (:h, :b)"),
                     {"h": new.spec_hash, "b": new.spec_json})  # fmt: skip
        conn.execute(
            text(
                "INSERT INTO qc_executions (id, flow, spec_hash, input, state, max_parallel,"
                " created_at, started_at, n_succeeded, n_bad) VALUES (:e, 'old-flow', :h,"
                " :input, 'running', 0, :t, :t, 0, 0)"
            ),
            {"e": eid, "h": new.spec_hash, "input": b"1", "t": T0},
        )
        conn.execute(
            text(
                "INSERT INTO qc_flow_steps (execution_id, idx, step_id, state, job_id, deps,"
                " job, payload, unmet) VALUES (:e, 0, 'a', 'queued', :job_id, '[]', :job,"
                " :payload, 0)"
            ),
            {"e": eid, "job_id": step.id, "job": json.dumps({"id": step.id}),
             "payload": step.payload},
        )  # fmt: skip
    engine.dispose()
    return plain.id, step.id, new


def test_a_version_10_database_keeps_its_jobs_and_flows(url: str) -> None:
    if url.startswith("sqlite"):
        sqlite_at_version(Path(url.removeprefix("sqlite:///")), 10)
    else:
        _postgres_v10(url)
    plain_id, step_id, old = _v10_rows(url)
    storage = SQLStorage(url)
    try:
        assert storage.schema_version() == 10
        storage.migrate()
        assert storage.schema_version() == SCHEMA_VERSION
        record = storage.get_execution(old.id)
        assert record is not None
        assert (record.state, record.kind, record.parent_id, record.awaiting) == (
            ExecutionState.RUNNING, "flow", None, ()
        )  # fmt: skip
        assert [s.state for s in storage.list_steps(old.id)] == [StepState.QUEUED]
        claimed = {c.id: c for c in storage.claim("w", ["default"], 10, LEASE, now=T0 + 1)}
        assert sorted(claimed) == sorted([plain_id, step_id])
        assert storage.finish([complete_end(claimed[step_id].ref, b'"A"')], now=T0 + 2) == [True]
        record = storage.get_execution(old.id)
        assert record is not None and record.state is ExecutionState.SUCCEEDED
        job = storage.get_job(plain_id)
        assert job is not None and job.state is JobState.RUNNING
        wf = make_workflow()  # the new tables work on the migrated database
        assert storage.start_execution(wf, now=T0 + 3) is ExecutionState.RUNNING
        state = storage.workflow_state(wf.id)
        assert state is not None and state.execution.kind == "workflow"
    finally:
        storage.close()
