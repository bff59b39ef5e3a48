-- The flow statements of both dialects (backends/sql/flows.py), written as shared.sql is.
-- Lock order in every flow transaction: the execution's concurrency key (PostgreSQL
-- advisory lock), its row, on a full read its active step jobs (in id order), then writes.

-- name: flow_insert_spec
INSERT INTO qc_flow_specs (hash, body) VALUES (:hash, :body) ON CONFLICT (hash) DO NOTHING

-- name: flow_insert_execution
-- Stored `queued` with zero counters; the plan of its admission writes the rest.
INSERT INTO qc_executions (id, flow, conc_key, conc_limit, conc_skip, spec_hash, input,
    state, max_parallel, timeout_ms, created_at, n_succeeded, n_bad, kind, parent_id,
    parent_idx)
VALUES (:id, :flow, :conc_key, :conc_limit, :conc_skip, :spec_hash, :input, 'queued',
    :max_parallel, :timeout_ms, :now, 0, 0, :kind, :parent_id, :parent_idx)

-- name: flow_insert_step
INSERT INTO qc_flow_steps (execution_id, idx, step_id, state, deps, job, payload, unmet)
VALUES (:e, :idx, :step_id, 'pending', :deps, :job, :payload, :unmet)

-- name: flow_conc_key_of
-- PostgreSQL's first read of a flow transaction (no lock yet), with the transaction's time.
SELECT conc_key, parent_id, {now} AS now_ms FROM qc_executions WHERE id = :e

-- name: flow_lock_execution
-- With the transaction's time: the first statement of a flow transaction on an execution
-- with no concurrency key and no parent (backends/sql/flows.py, Flows.open).
SELECT id, conc_key, conc_limit, conc_skip, state, reason, failed_step, max_parallel,
    timeout_ms, deadline_at, spec_hash, n_succeeded, n_bad, kind, parent_id, parent_idx,
    awaiting, {now} AS now_ms
FROM qc_executions WHERE id = :e {for_update}

-- name: flow_active_of_key
SELECT id, state, created_at FROM qc_executions
WHERE conc_key = :key AND state IN ('queued', 'running', 'cancelling', 'waiting') ORDER BY seq

-- name: flow_lock_jobs
SELECT id FROM qc_jobs WHERE execution_id = :e AND state IN ('queued', 'running')
ORDER BY id {for_update}

-- name: flow_steps
-- Every step with its job's state (a released step is stored `queued` while its job runs).
SELECT s.idx, s.state, s.reason, s.job_id, s.unmet, j.state AS job_state
FROM qc_flow_steps s LEFT JOIN qc_jobs j ON j.id = s.job_id
WHERE s.execution_id = :e ORDER BY s.idx

-- name: flow_step_rows
-- Some steps: an event's own step and its dependents (or a step's dependencies' results);
-- the stored job of a pending step that :k ends may release (unmet <= :k), read now so
-- that its release reads no more.
SELECT idx, state, reason, job_id, unmet, result,
    CASE WHEN state = 'pending' AND unmet <= :k THEN job END AS job,
    CASE WHEN state = 'pending' AND unmet <= :k THEN payload END AS payload
FROM qc_flow_steps WHERE execution_id = :e AND idx {in:idxs:int}

-- name: flow_step_inputs
-- A step's inputs in one read: the execution's input, spec hash and kind (to check the
-- step index the caller used) with the rows of the step's dependencies.
SELECT e.input, e.spec_hash, e.kind, s.idx, s.result FROM qc_executions e
LEFT JOIN qc_flow_steps s ON s.execution_id = e.id AND s.idx {in:idxs:int}
WHERE e.id = :e

-- name: flow_step_deps
SELECT step_id, deps FROM qc_flow_steps WHERE execution_id = :e ORDER BY idx

-- name: flow_update_step
-- SetStep: a success copies its job's result (the step's inputs outlive the job).
UPDATE qc_flow_steps SET state = CAST(:state AS text), reason = :reason,
    job_id = coalesce(:job_id, job_id), unmet = unmet - :lowered,
    result = CASE WHEN CAST(:state AS text) = 'succeeded' AND state <> 'succeeded'
        THEN (SELECT j.result FROM qc_jobs j WHERE j.id = qc_flow_steps.job_id) ELSE result END
WHERE execution_id = :e AND idx = :idx

-- name: flow_update_execution
UPDATE qc_executions SET state = :state, reason = :reason, failed_step = :failed_step,
    deadline_at = :deadline_at,
    started_at = coalesce(CAST(:started_at AS bigint), started_at),
    finished_at = coalesce(CAST(:finished_at AS bigint), finished_at),
    n_succeeded = n_succeeded + :ds, n_bad = n_bad + :db, awaiting = :awaiting
WHERE id = :e

-- name: flow_step_jobs
-- job_id: set once released before (a resumed step's job runs again).
SELECT idx, job, payload, job_id FROM qc_flow_steps WHERE execution_id = :e AND idx {in:idxs:int}

-- name: flow_insert_job
-- Release: records.JOB_COLUMNS, then execution_id, step_id, flow_deadline_at.
INSERT INTO qc_jobs (id, task_name, queue, payload, priority, state, reason, enqueued_at,
    run_at, expires_at, max_attempts, lost_delay_ms, timeout_ms, heartbeat_ms,
    schedule_to_start_ms, concurrency_key, concurrency_limit, concurrency_skip, options,
    replay_of, attempt, finished_at, cancel_requested, execution_id, step_id,
    flow_deadline_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO NOTHING

-- name: flow_end_job
-- EndJob: the step's job, if still :was, ends :state/:reason (lease cleared: fenced).
UPDATE qc_jobs SET state = :state, reason = :reason, finished_at = :now,
    lease_token = NULL, lease_expires_at = NULL, deadline = NULL,
    heartbeat_expires_at = NULL, expires_at = NULL
WHERE id = :id AND state = :was
RETURNING attempt

-- name: flow_cancel_job
UPDATE qc_jobs SET cancel_requested = true WHERE id = :id AND state = 'running'

-- name: flow_jobs_of
SELECT id, execution_id, step_id FROM qc_jobs WHERE id {in:ids:text}

-- name: flow_deadlines_due
SELECT id FROM qc_executions
WHERE state IN ('running', 'waiting') AND deadline_at IS NOT NULL
    AND deadline_at <= :now - {reap_margin}
ORDER BY deadline_at LIMIT :limit

-- name: flow_stale_steps
-- Running step jobs past a bound (which bound wins is rules.outcomes.reap_verdict's).
SELECT id, execution_id, step_id FROM qc_jobs
WHERE state = 'running' AND execution_id IS NOT NULL
    AND (lease_expires_at <= :now OR deadline <= :now - {reap_margin}
        OR heartbeat_expires_at <= :now - {reap_margin})
ORDER BY lease_expires_at, seq LIMIT :limit

-- name: flow_stale_one
-- select_stale for one step job (under its execution's lock).
SELECT seq, id, attempt, max_attempts, lost_delay_ms, retry_lost_delay_ms,
    lease_expires_at, deadline, heartbeat_expires_at, cancel_requested, concurrency_key,
    run_at, place_at, schedule_to_start_ms, ahead, ahead_refunds, CAST(:now AS bigint) AS now_ms
FROM qc_jobs
WHERE id = :id AND state = 'running'
    AND (lease_expires_at <= :now OR deadline <= :now - {reap_margin}
        OR heartbeat_expires_at <= :now - {reap_margin})
{for_update}

-- name: flow_sts_steps
SELECT id, execution_id, step_id FROM qc_jobs
WHERE state = 'queued' AND expires_at <= :now AND execution_id IS NOT NULL
ORDER BY expires_at, seq LIMIT :limit

-- name: flow_sts_one
SELECT seq, id, run_at, schedule_to_start_ms, CAST(:now AS bigint) AS now_ms FROM qc_jobs
WHERE id = :id AND state = 'queued' AND expires_at <= :now
{for_update}

-- name: flow_get_execution
SELECT * FROM qc_executions WHERE id = :e

-- name: flow_list_executions
SELECT * FROM qc_executions WHERE (CAST(:flow AS text) IS NULL OR flow = :flow)
    AND (CAST(:state AS text) IS NULL OR state = :state)
ORDER BY seq DESC LIMIT :limit OFFSET :offset

-- name: flow_spec_bodies
SELECT hash, body FROM qc_flow_specs WHERE hash {in:hashes:text}

-- name: flow_prunable
SELECT id, spec_hash, kind FROM qc_executions
WHERE state NOT IN ('queued', 'running', 'cancelling', 'waiting') AND finished_at <= :cutoff
ORDER BY finished_at LIMIT :limit

-- name: flow_delete_steps
DELETE FROM qc_flow_steps WHERE execution_id {in:ids:text}

-- name: flow_delete_executions
DELETE FROM qc_executions WHERE id {in:ids:text}

-- name: flow_delete_specs
-- Specs no execution uses any more (of the pruned executions' hashes).
DELETE FROM qc_flow_specs WHERE hash {in:hashes:text}
    AND NOT EXISTS (SELECT 1 FROM qc_executions e WHERE e.spec_hash = qc_flow_specs.hash)

-- ---------------------------------------------------------------- workflows (SPEC §12)
-- backends/sql/flows.py applies these for the plan operations of workflows and resumes.

-- name: wf_put_memo
-- PutMemo: a new key takes the execution's next number; a replaced value keeps its own.
INSERT INTO qc_memos (execution_id, key, value, seq, at)
VALUES (CAST(:e AS text), :key, :value,
    (SELECT coalesce(max(m.seq), 0) + 1 FROM qc_memos m WHERE m.execution_id = CAST(:e AS text)),
    :now)
ON CONFLICT (execution_id, key) DO UPDATE SET value = excluded.value, at = excluded.at

-- name: wf_drop_memos
DELETE FROM qc_memos WHERE execution_id = :e AND key {in:keys:text}

-- name: wf_memos
SELECT key, value, seq, at FROM qc_memos WHERE execution_id = :e ORDER BY seq

-- name: wf_insert_step
-- AddStep: a child's step (its job inserted beside it) or a sub-execution's (no job).
INSERT INTO qc_flow_steps (execution_id, idx, step_id, state, job_id, deps, job, payload,
    unmet)
VALUES (:e, :idx, :step_id, :state, :job_id, '[]', :job, :payload, 0)

-- name: wf_queued_sts
SELECT schedule_to_start_ms FROM qc_jobs WHERE id = :id AND state = 'queued'

-- name: wf_set_ready
-- SetReady / Wake: a queued job's ready time (expires_at: rules.leases.queued_expiry).
UPDATE qc_jobs SET run_at = :at, expires_at = :expires, place_at = NULL
WHERE id = :id AND state = 'queued'

-- name: wf_put_wait
INSERT INTO qc_waits (execution_id, memo_key, name, key, since, until)
VALUES (:e, :memo_key, :name, :key, :since, :until)
ON CONFLICT (execution_id, memo_key) DO UPDATE SET name = excluded.name, key = excluded.key,
    since = excluded.since, until = excluded.until

-- name: wf_drop_wait
DELETE FROM qc_waits WHERE execution_id = :e AND memo_key = :memo_key

-- name: wf_drop_waits
DELETE FROM qc_waits WHERE execution_id = :e

-- name: wf_waits_of
SELECT execution_id, memo_key, name, key, since, until FROM qc_waits WHERE name = :name
ORDER BY execution_id, memo_key

-- name: wf_wait_one
SELECT execution_id, memo_key, name, key, since, until FROM qc_waits
WHERE execution_id = :e AND memo_key = :memo_key

-- name: wf_insert_event
INSERT INTO qc_events (name, key, data, at) VALUES (:name, :key, :data, :now)

-- name: wf_events_of
-- The stored events of a name sent at or before now, earliest first.
SELECT name, key, data, at FROM qc_events WHERE name = :name AND at <= :now ORDER BY at, seq

-- name: wf_reopen
UPDATE qc_executions SET finished_at = NULL WHERE id = :e

-- name: wf_set_unmet
UPDATE qc_flow_steps SET unmet = :unmet WHERE execution_id = :e AND idx = :idx

-- name: wf_undead
-- Release of finished step jobs: their dead-letter entries go.
DELETE FROM qc_dead WHERE id IN (SELECT dead_id FROM qc_jobs
    WHERE id {in:ids:text} AND dead_id IS NOT NULL AND state NOT IN ('queued', 'running'))

-- name: wf_rerun_job
-- Release of a finished step job: it runs again (rules in plan.Release's docstring).
UPDATE qc_jobs SET state = 'queued', reason = NULL, result = NULL, error_class = NULL,
    error_type = NULL, error_message = NULL, error_traceback = NULL, dead_id = NULL,
    finished_at = NULL, cancel_requested = false, run_at = :now, expires_at = :expires,
    place_at = NULL,
    max_attempts = attempt + :budget, flow_deadline_at = :deadline,
    retry_lost_delay_ms = NULL
WHERE id = :id AND state NOT IN ('queued', 'running')

-- name: wf_fence
-- The execution of a current attempt (put_memo, start_child_execution).
SELECT execution_id FROM qc_jobs
WHERE id = :id AND attempt = :attempt AND lease_token = :token AND state = 'running'

-- name: wf_jobs_of
SELECT * FROM qc_jobs WHERE execution_id = :e

-- name: wf_prune_jobs
SELECT seq, id FROM qc_jobs WHERE execution_id {in:ids:text}

-- name: wf_prune_memos
DELETE FROM qc_memos WHERE execution_id {in:ids:text}

-- name: wf_prune_waits
DELETE FROM qc_waits WHERE execution_id {in:ids:text}

-- name: wf_prune_events
DELETE FROM qc_events WHERE at <= :cutoff
