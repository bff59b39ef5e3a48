-- Every statement of the SQLite dialect (see backends/sql/queries.py for the format).
-- Parameters are sqlite3's :name. :now is always given (the local clock when the caller
-- passes none). State filters are literals so the partial indexes apply.

-- ---------------------------------------------------------------- enqueue

-- name: insert_job
-- One new job (executemany for a batch): positional values, the tuple that
-- records.job_row builds in records.JOB_COLUMNS order (the columns below; binding by
-- position costs about 2/3 of binding 23 names).
INSERT INTO qc_jobs (id, task_name, queue, payload, priority, state, reason, enqueued_at,
    run_at, expires_at, max_attempts, lost_delay_ms, timeout_ms, heartbeat_ms,
    schedule_to_start_ms, concurrency_key, concurrency_limit, concurrency_skip, options,
    replay_of, attempt, finished_at, cancel_requested)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: count_active
-- Active (queued + running) jobs per concurrency key: the `skip` behaviour's count.
SELECT concurrency_key AS key, count(*) AS n FROM qc_jobs
WHERE concurrency_key IN (SELECT value FROM json_each(:keys))
    AND concurrency_key IS NOT NULL AND state IN ('queued', 'running')
GROUP BY concurrency_key

-- ---------------------------------------------------------------- claim

-- name: claim
-- Starts the unkeyed jobs among the top :limit ready ones in one UPDATE; {queues} is
-- queries.queues_filter. Keyed jobs (a `queue` concurrency limit) are left to claim_keyed.
-- The running attempt lives on the job row (attempt, worker_id, started_at): its
-- qc_attempts record is written once, when it ends.
UPDATE qc_jobs SET state = 'running', reason = NULL, attempt = attempt + 1,
    worker_id = :worker, lease_token = lower(hex(randomblob(12))),
    lease_expires_at = :now + :lease_ms,
    deadline = CASE WHEN timeout_ms IS NULL THEN NULL ELSE :now + timeout_ms END,
    heartbeat_expires_at = CASE WHEN heartbeat_ms IS NULL THEN NULL ELSE :now + heartbeat_ms END,
    started_at = :now, expires_at = NULL
WHERE seq IN (
        SELECT seq FROM qc_jobs WHERE state = 'queued' AND {queues}
            AND run_at <= :now AND (expires_at IS NULL OR expires_at > :now)
        ORDER BY priority DESC, run_at, seq LIMIT :limit)
    AND NOT (concurrency_key IS NOT NULL AND concurrency_limit IS NOT NULL
             AND NOT concurrency_skip)
    AND rate_key IS NULL
RETURNING seq, id, task_name, queue, payload, priority, attempt, max_attempts, timeout_ms,
    heartbeat_ms, options, enqueued_at, replay_of, lease_token, lease_expires_at, deadline,
    started_at, run_at, execution_id, step_id, flow_deadline_at

-- name: keyed_ready
-- Whether a keyed or rate-limited job is ready (then the claim goes on with claim_keyed).
SELECT 1 AS one FROM qc_jobs WHERE concurrency_key IS NOT NULL
    AND state IN ('queued', 'running') AND state = 'queued'
    AND concurrency_limit IS NOT NULL AND NOT concurrency_skip AND run_at <= :now
UNION ALL
SELECT 1 AS one FROM qc_jobs WHERE rate_key IS NOT NULL AND state = 'queued'
    AND run_at <= :now
LIMIT 1

-- name: select_ready
-- The keyed claim ({queues} as in claim): the top ready jobs not yet looked at
-- (:excluded, a JSON list of seq).
SELECT seq, id, task_name, queue, payload, priority, attempt, max_attempts, timeout_ms,
    heartbeat_ms, options, enqueued_at, replay_of, concurrency_key, concurrency_limit,
    concurrency_skip, run_at, execution_id, step_id, flow_deadline_at, rate_key, :now AS now_ms
FROM qc_jobs
WHERE state = 'queued' AND {queues}
    AND run_at <= :now AND (expires_at IS NULL OR expires_at > :now)
    AND seq NOT IN (SELECT value FROM json_each(:excluded))
ORDER BY priority DESC, run_at, seq LIMIT :limit

-- name: count_running
SELECT concurrency_key AS key, count(*) AS n FROM qc_jobs
WHERE concurrency_key IN (SELECT value FROM json_each(:keys)) AND state = 'running'
GROUP BY concurrency_key

-- name: start_job
UPDATE qc_jobs SET state = 'running', reason = NULL, attempt = :attempt, worker_id = :worker,
    lease_token = :token, lease_expires_at = :lease, deadline = :deadline,
    heartbeat_expires_at = :hb, started_at = :now, expires_at = NULL
WHERE seq = :seq

-- ---------------------------------------------------------------- lease

-- name: renew
-- One ref, fenced; no row = the lease is lost.
UPDATE qc_jobs SET lease_expires_at = :now + :lease_ms
WHERE id = :id AND attempt = :attempt AND lease_token = :token AND state = 'running'
RETURNING cancel_requested

-- name: heartbeat
UPDATE qc_jobs SET heartbeat_expires_at = :now + heartbeat_ms
WHERE id = :id AND attempt = :attempt AND lease_token = :token AND state = 'running'
RETURNING cancel_requested

-- ---------------------------------------------------------------- finish

-- name: finish_attempts
-- The batch's attempt records, written once from the job rows (the running attempt was
-- on them), fenced (run before finish_jobs, which clears the lease). {rows}: one
-- (?, ...) per end, in sqlite.FINISH_ROW order.
WITH e(e_now, e_id, e_attempt, e_token, e_state, e_reason, e_requeue, e_delay_ms,
       e_lost_delay_ms, e_result, e_has_error, e_error_class, e_error_type, e_message,
       e_traceback, e_outcome, e_a_reason, e_mode, e_dead_id) AS (VALUES {rows})
INSERT INTO qc_attempts (job_id, number, worker_id, started_at, finished_at, outcome, reason,
    error_class, error_type, message, traceback, mode)
SELECT e.e_id, e.e_attempt, j.worker_id, j.started_at, e.e_now, e.e_outcome, e.e_a_reason,
    e.e_error_class, e.e_error_type, e.e_message, e.e_traceback, e.e_mode
FROM e JOIN qc_jobs j ON j.id = e.e_id AND j.attempt = e.e_attempt
    AND j.lease_token = e.e_token AND j.state = 'running'

-- name: finish_jobs
-- The batch's jobs, fenced; state and reason come from policy.outcomes.end_state.
WITH e(e_now, e_id, e_attempt, e_token, e_state, e_reason, e_requeue, e_delay_ms,
       e_lost_delay_ms, e_result, e_has_error, e_error_class, e_error_type, e_message,
       e_traceback, e_outcome, e_a_reason, e_mode, e_dead_id) AS (VALUES {rows})
UPDATE qc_jobs SET state = e.e_state, reason = e.e_reason,
    run_at = CASE WHEN e.e_requeue THEN e.e_now + e.e_delay_ms ELSE run_at END,
    expires_at = CASE WHEN e.e_requeue AND schedule_to_start_ms IS NOT NULL
        THEN e.e_now + e.e_delay_ms + schedule_to_start_ms ELSE NULL END,
    retry_lost_delay_ms = coalesce(e.e_lost_delay_ms, retry_lost_delay_ms),
    result = e.e_result,
    finished_at = CASE WHEN e.e_requeue THEN NULL ELSE e.e_now END,
    error_class = CASE WHEN e.e_has_error THEN e.e_error_class ELSE error_class END,
    error_type = CASE WHEN e.e_has_error THEN e.e_error_type ELSE error_type END,
    error_message = CASE WHEN e.e_has_error THEN e.e_message ELSE error_message END,
    error_traceback = CASE WHEN e.e_has_error THEN e.e_traceback ELSE error_traceback END,
    dead_id = e.e_dead_id, lease_token = NULL, lease_expires_at = NULL, deadline = NULL,
    heartbeat_expires_at = NULL
FROM e
WHERE qc_jobs.id = e.e_id AND qc_jobs.attempt = e.e_attempt
    AND qc_jobs.lease_token = e.e_token AND qc_jobs.state = 'running'
RETURNING qc_jobs.id, qc_jobs.concurrency_key

-- ---------------------------------------------------------------- dead letters

-- name: select_for_dead
-- The rows (already ended dead) whose dead-letter entries are written now.
SELECT id, task_name, queue, payload, replay_of, finished_at, priority, max_attempts,
    lost_delay_ms, timeout_ms, heartbeat_ms, schedule_to_start_ms, concurrency_key,
    concurrency_limit, concurrency_skip, options, execution_id, step_id, rate_key
FROM qc_jobs WHERE id IN (SELECT value FROM json_each(:ids))

-- name: select_attempts_of
-- Ended attempts, then a running one from its job row (see claim).
SELECT job_id, number, worker_id, started_at, finished_at, outcome, reason, error_class,
    error_type, message, traceback, mode
FROM qc_attempts WHERE job_id IN (SELECT value FROM json_each(:ids))
UNION ALL
SELECT id, attempt, worker_id, started_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM qc_jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running'
ORDER BY job_id, number

-- name: insert_dead
INSERT INTO qc_dead (id, job_id, task_name, queue, payload, error, error_class, reason,
    attempts, dead_at, replay_of, spec)
VALUES (:id, :job_id, :task_name, :queue, :payload, :error, :error_class, :reason,
    :attempts, :dead_at, :replay_of, :spec)

-- name: list_dead
SELECT * FROM qc_dead ORDER BY dead_at DESC, seq DESC LIMIT :limit OFFSET :offset

-- name: list_dead_of_task
SELECT * FROM qc_dead WHERE task_name = :task
ORDER BY dead_at DESC, seq DESC LIMIT :limit OFFSET :offset

-- name: get_dead
SELECT * FROM qc_dead WHERE id = :id

-- name: take_dead
SELECT * FROM qc_dead WHERE id = :id

-- name: delete_dead
DELETE FROM qc_dead WHERE seq = :seq

-- name: purge_dead
DELETE FROM qc_dead WHERE (:task IS NULL OR task_name = :task)
    AND (:before IS NULL OR dead_at <= :before)

-- ---------------------------------------------------------------- reap

-- name: select_stale
-- Running attempts past a bound; which bound wins is policy.outcomes.reap_verdict's.
SELECT seq, id, attempt, max_attempts, lost_delay_ms, retry_lost_delay_ms,
    lease_expires_at, deadline, heartbeat_expires_at, cancel_requested, concurrency_key,
    run_at, schedule_to_start_ms,
    :now AS now_ms
FROM qc_jobs
WHERE state = 'running' AND execution_id IS NULL
    AND (lease_expires_at <= :now OR deadline <= :now OR heartbeat_expires_at <= :now)
ORDER BY lease_expires_at, seq LIMIT :limit

-- name: select_sts_expired
SELECT seq, id, concurrency_key, :now AS now_ms FROM qc_jobs
WHERE state = 'queued' AND expires_at <= :now AND execution_id IS NULL
ORDER BY expires_at, seq LIMIT :limit

-- name: end_attempt
-- The record of an attempt ended by the reaper or a flow deadline, from its job row (run
-- before the job row's own update, which leaves attempt, worker_id and started_at).
INSERT INTO qc_attempts (job_id, number, worker_id, started_at, finished_at, outcome, reason)
SELECT id, attempt, worker_id, started_at, :now, :outcome, :reason
FROM qc_jobs WHERE id = :job_id AND attempt = :number

-- name: reap_job
-- The job after a reap verdict (or a schedule-to-start expiry): :run_at only when queued.
UPDATE qc_jobs SET state = :state, reason = :reason, run_at = coalesce(:run_at, run_at),
    expires_at = CASE WHEN :run_at IS NOT NULL AND schedule_to_start_ms IS NOT NULL
        THEN :run_at + schedule_to_start_ms ELSE NULL END,
    finished_at = CASE WHEN :run_at IS NULL THEN :now ELSE NULL END,
    dead_id = :dead_id, result = NULL, lease_token = NULL, lease_expires_at = NULL,
    deadline = NULL, heartbeat_expires_at = NULL
WHERE seq = :seq

-- ---------------------------------------------------------------- prune

-- name: select_prunable
SELECT seq, id FROM qc_jobs
WHERE state NOT IN ('queued', 'running') AND finished_at <= :cutoff
ORDER BY finished_at LIMIT :limit

-- name: delete_attempts_of
DELETE FROM qc_attempts WHERE job_id IN (SELECT value FROM json_each(:ids))

-- name: delete_jobs
DELETE FROM qc_jobs WHERE seq IN (SELECT value FROM json_each(:seqs))

-- ---------------------------------------------------------------- control and reads

-- name: select_for_cancel
SELECT seq, state FROM qc_jobs WHERE id = :id

-- name: cancel_queued
UPDATE qc_jobs SET state = 'cancelled', reason = 'cancelled', finished_at = :now,
    expires_at = NULL
WHERE seq = :seq AND state = 'queued'

-- name: request_cancel
UPDATE qc_jobs SET cancel_requested = 1 WHERE seq = :seq AND state = 'running'

-- name: get_job
SELECT * FROM qc_jobs WHERE id = :id

-- name: list_attempts
-- Ended attempts, then a running one from its job row (see claim).
SELECT job_id, number, worker_id, started_at, finished_at, outcome, reason, error_class,
    error_type, message, traceback, mode
FROM qc_attempts WHERE job_id = :id
UNION ALL
SELECT id, attempt, worker_id, started_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM qc_jobs WHERE id = :id AND state = 'running'
ORDER BY number

-- name: count_pending
SELECT (SELECT count(*) FROM qc_jobs WHERE state = 'running'
            AND queue IN (SELECT value FROM json_each(:queues)))
     + (SELECT count(*) FROM qc_jobs WHERE state = 'queued'
            AND queue IN (SELECT value FROM json_each(:queues))
            AND run_at <= :now + :horizon_ms) AS n

-- name: stats
SELECT queue, CASE WHEN state = 'queued' AND run_at > :now THEN 'scheduled'
                   WHEN state = 'queued' THEN 'ready' ELSE state END AS kind,
    count(*) AS n
FROM qc_jobs GROUP BY queue, kind

-- name: list_jobs
SELECT * FROM qc_jobs WHERE (:state IS NULL OR state = :state)
    AND (:queue IS NULL OR queue = :queue)
ORDER BY enqueued_at DESC, seq DESC LIMIT :limit OFFSET :offset

-- name: ready_probe
-- wait_for_jobs: is a job ready now in the queues (a JSON list)?
SELECT 1 AS one FROM qc_jobs WHERE state = 'queued'
    AND queue IN (SELECT value FROM json_each(:queues))
    AND run_at <= :now AND (expires_at IS NULL OR expires_at > :now)
LIMIT 1

-- ---------------------------------------------------------------- workers (schema v6)

-- name: upsert_worker
INSERT INTO qc_workers (id, host, pid, queues, slots, busy, stuck, started_at, last_seen,
    ttl_ms)
VALUES (:id, :host, :pid, :queues, :slots, :busy, :stuck, :started_at, :last_seen, :ttl_ms)
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
    queues = excluded.queues, slots = excluded.slots, busy = excluded.busy,
    stuck = excluded.stuck, started_at = excluded.started_at,
    last_seen = excluded.last_seen, ttl_ms = excluded.ttl_ms

-- name: delete_worker
DELETE FROM qc_workers WHERE id = :id

-- name: delete_dead_worker
-- Only the record that was judged dead: a refresh meanwhile keeps it.
DELETE FROM qc_workers WHERE id = :id AND last_seen = :last_seen

-- name: select_workers
SELECT id, host, pid, queues, slots, busy, stuck, started_at, last_seen, ttl_ms
FROM qc_workers

-- name: select_cancel_requested
-- The cancel poll: running jobs among the ids (a JSON list) with a cancel request.
SELECT id, attempt, lease_token FROM qc_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running'
    AND cancel_requested = 1
-- ---------------------------------------------------------------- periodic schedules

-- name: schedule_claim_tick
-- Move a schedule's last tick to :tick when it is later (1 row changed) or new.
INSERT INTO qc_schedule_ticks (name, last_tick) VALUES (:name, :tick)
ON CONFLICT (name) DO UPDATE SET last_tick = excluded.last_tick
WHERE qc_schedule_ticks.last_tick < excluded.last_tick

-- name: schedule_ticks
SELECT name, last_tick FROM qc_schedule_ticks ORDER BY name

-- ---------------------------------------------------------------- flows (backends/sql/flows.py)
-- Lock order in every flow transaction: the concurrency key, the execution row, its
-- active step jobs (by id), then the rows they change. SQLite's write lock serializes all.

-- name: flow_lock_key
-- PostgreSQL takes an advisory lock per concurrency key; SQLite's write lock does.
SELECT 1 AS locked

-- name: flow_insert_spec
INSERT INTO qc_flow_specs (hash, body) VALUES (:hash, :body) ON CONFLICT (hash) DO NOTHING

-- name: flow_insert_execution
INSERT INTO qc_executions (id, flow, conc_key, conc_limit, conc_skip, spec_hash, input,
    state, reason, max_parallel, timeout_ms, created_at, finished_at, n_succeeded, n_bad)
VALUES (:id, :flow, :conc_key, :conc_limit, :conc_skip, :spec_hash, :input, :state,
    :reason, :max_parallel, :timeout_ms, :now, :finished_at, 0, :n_bad)

-- name: flow_insert_step
INSERT INTO qc_flow_steps (execution_id, idx, step_id, state, reason, deps, job, payload,
    unmet)
VALUES (:execution_id, :idx, :step_id, :state, :reason, :deps, :job, :payload,
    :unmet)

-- name: flow_active_of_key
SELECT id, state, created_at FROM qc_executions
WHERE conc_key = :key AND state IN ('queued', 'running', 'cancelling') ORDER BY seq

-- name: flow_conc_key_of
SELECT conc_key FROM qc_executions WHERE id = :e

-- name: flow_lock_execution
SELECT id, flow, conc_key, conc_limit, conc_skip, state, reason, failed_step, max_parallel,
    timeout_ms, deadline_at, created_at, started_at, finished_at, spec_hash, n_succeeded,
    n_bad
FROM qc_executions WHERE id = :e

-- name: flow_lock_jobs
-- The execution's active step jobs (PostgreSQL locks them in id order).
SELECT id, state, attempt FROM qc_jobs
WHERE execution_id = :e AND state IN ('queued', 'running') ORDER BY id

-- name: flow_steps
-- Steps with their job's state: a released step stored `queued` is `running` while its
-- job runs.
SELECT s.idx, s.step_id, s.state, s.reason, s.job_id, s.deps, j.state AS job_state
FROM qc_flow_steps s LEFT JOIN qc_jobs j ON j.id = s.job_id
WHERE s.execution_id = :e ORDER BY s.idx

-- name: flow_step_states
-- The steps in a flow transaction (their running jobs are known from flow_lock_jobs).
SELECT idx, state, reason, job_id FROM qc_flow_steps WHERE execution_id = :e ORDER BY idx

-- name: flow_step_deps
SELECT step_id, deps FROM qc_flow_steps WHERE execution_id = :e ORDER BY idx

-- name: flow_update_step
UPDATE qc_flow_steps SET state = :state, reason = :reason,
    job_id = coalesce(:job_id, job_id), result = coalesce(:result, result)
WHERE execution_id = :e AND idx = :idx

-- name: flow_update_execution
UPDATE qc_executions SET state = :state, reason = :reason, failed_step = :failed_step,
    deadline_at = :deadline_at, started_at = coalesce(:started_at, started_at),
    finished_at = coalesce(:finished_at, finished_at),
    n_succeeded = n_succeeded + :ds, n_bad = n_bad + :db
WHERE id = :e

-- name: flow_step_jobs
SELECT idx, job, payload FROM qc_flow_steps
WHERE execution_id = :e AND idx IN (SELECT value FROM json_each(:idxs))

-- name: flow_fast_steps
-- The fast step end (backends/sql/flow_fast.py): the ended step and its dependents.
SELECT idx, state, job_id, unmet FROM qc_flow_steps
WHERE execution_id = :e AND idx IN (SELECT value FROM json_each(:idxs))

-- name: flow_lower_unmet
-- Dependents of a step that succeeded: one dependency fewer not succeeded.
UPDATE qc_flow_steps SET unmet = unmet - 1
WHERE execution_id = :e AND idx IN (SELECT value FROM json_each(:idxs))

-- name: flow_lower_unmet_by
-- A folded batch of step ends: a dependent's dependencies that succeeded in it.
UPDATE qc_flow_steps SET unmet = unmet - :n WHERE execution_id = :e AND idx = :idx

-- name: flow_insert_job
-- A released step's job: records.JOB_COLUMNS, then execution_id, step_id, flow_deadline_at.
INSERT INTO qc_jobs (id, task_name, queue, payload, priority, state, reason, enqueued_at,
    run_at, expires_at, max_attempts, lost_delay_ms, timeout_ms, heartbeat_ms,
    schedule_to_start_ms, concurrency_key, concurrency_limit, concurrency_skip, options,
    replay_of, attempt, finished_at, cancel_requested, execution_id, step_id,
    flow_deadline_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: flow_time_out_job
UPDATE qc_jobs SET state = 'timed_out', reason = 'flow_timeout', finished_at = :now,
    lease_token = NULL, lease_expires_at = NULL, deadline = NULL,
    heartbeat_expires_at = NULL, expires_at = NULL
WHERE id = :id AND state = 'running'

-- name: flow_not_run_job
UPDATE qc_jobs SET state = 'cancelled', reason = 'not_run', finished_at = :now,
    expires_at = NULL
WHERE id = :id AND state = 'queued'

-- name: flow_cancel_job
UPDATE qc_jobs SET cancel_requested = 1 WHERE id = :id AND state = 'running'

-- name: flow_jobs_of
SELECT id, execution_id, step_id FROM qc_jobs
WHERE id IN (SELECT value FROM json_each(:ids))

-- name: flow_deadlines_due
SELECT id FROM qc_executions
WHERE state = 'running' AND deadline_at IS NOT NULL AND deadline_at <= :now
ORDER BY deadline_at LIMIT :limit

-- name: flow_stale_steps
SELECT id, execution_id FROM qc_jobs
WHERE state = 'running' AND execution_id IS NOT NULL
    AND (lease_expires_at <= :now OR deadline <= :now OR heartbeat_expires_at <= :now)
ORDER BY lease_expires_at, seq LIMIT :limit

-- name: flow_stale_one
-- select_stale for one step job (under its execution's lock).
SELECT seq, id, attempt, max_attempts, lost_delay_ms, retry_lost_delay_ms,
    lease_expires_at, deadline, heartbeat_expires_at, cancel_requested, concurrency_key,
    run_at, schedule_to_start_ms,
    :now AS now_ms
FROM qc_jobs
WHERE id = :id AND state = 'running'
    AND (lease_expires_at <= :now OR deadline <= :now OR heartbeat_expires_at <= :now)

-- name: flow_sts_steps
SELECT id, execution_id FROM qc_jobs
WHERE state = 'queued' AND expires_at <= :now AND execution_id IS NOT NULL
ORDER BY expires_at, seq LIMIT :limit

-- name: flow_sts_one
SELECT seq, id, concurrency_key, :now AS now_ms FROM qc_jobs
WHERE id = :id AND state = 'queued' AND expires_at <= :now

-- name: flow_job_state
SELECT seq, state, reason, result, step_id FROM qc_jobs WHERE id = :id

-- name: flow_get_execution
SELECT * FROM qc_executions WHERE id = :e

-- name: flow_list_executions
SELECT * FROM qc_executions WHERE (:flow IS NULL OR flow = :flow)
    AND (:state IS NULL OR state = :state)
ORDER BY seq DESC LIMIT :limit OFFSET :offset

-- name: flow_spec_bodies
SELECT hash, body FROM qc_flow_specs WHERE hash IN (SELECT value FROM json_each(:hashes))

-- name: flow_step_results
-- The results of some steps (a step's dependencies: get_step_inputs).
SELECT idx, result FROM qc_flow_steps WHERE execution_id = :e AND idx IN (SELECT value FROM json_each(:idxs))

-- name: flow_prunable
SELECT id, spec_hash FROM qc_executions
WHERE state NOT IN ('queued', 'running', 'cancelling') AND finished_at <= :cutoff
ORDER BY finished_at LIMIT :limit

-- name: flow_delete_steps
DELETE FROM qc_flow_steps WHERE execution_id IN (SELECT value FROM json_each(:ids))

-- name: flow_delete_executions
DELETE FROM qc_executions WHERE id IN (SELECT value FROM json_each(:ids))

-- name: flow_delete_specs
-- Specs no execution uses any more (of the pruned executions' hashes).
DELETE FROM qc_flow_specs WHERE hash IN (SELECT value FROM json_each(:hashes))
    AND NOT EXISTS (SELECT 1 FROM qc_executions e WHERE e.spec_hash = qc_flow_specs.hash)

-- ---------------------------------------------------------------- unique jobs, rate limits

-- name: unique_holder
-- The last job stored with a unique key, its state (NULL once pruned) and window.
SELECT u.job_id, u.enqueued_at, u.unique_for_ms, j.state FROM qc_unique u
LEFT JOIN qc_jobs j ON j.id = u.job_id WHERE u.key = :key

-- name: unique_set
INSERT INTO qc_unique (key, job_id, enqueued_at, unique_for_ms)
VALUES (:key, :job_id, :now, :unique_for_ms)
ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id,
    enqueued_at = excluded.enqueued_at, unique_for_ms = excluded.unique_for_ms

-- name: rate_define
-- A rate-limited enqueue: the key's rate (the latest enqueue's), claim times kept.
INSERT INTO qc_rates (key, rate_limit, window_ms, stamps)
VALUES (:key, :rate_limit, :window_ms, '[]')
ON CONFLICT (key) DO UPDATE SET rate_limit = excluded.rate_limit,
    window_ms = excluded.window_ms

-- name: rate_mark
UPDATE qc_jobs SET rate_key = :key WHERE id = :id

-- name: rate_get
SELECT rate_limit, window_ms, stamps FROM qc_rates WHERE key = :key

-- name: rate_put
UPDATE qc_rates SET stamps = :stamps WHERE key = :key

-- name: unique_forget
-- Prune: the unique keys whose last job is being deleted.
DELETE FROM qc_unique WHERE job_id IN (SELECT value FROM json_each(:ids))

-- ---------------------------------------------------------------- throughput (schema v9)

-- name: throughput_enqueued
-- Jobs enqueued per queue and minute in [:first, :now] (ix_qc_jobs_enqueued).
SELECT queue, enqueued_at - enqueued_at % 60000 AS minute, count(*) AS n FROM qc_jobs
WHERE enqueued_at >= :first AND enqueued_at <= :now
GROUP BY queue, minute

-- name: throughput_finished
-- Jobs finished per queue, final state and minute in [:first, :now] (ix_qc_jobs_finished).
SELECT queue, state, finished_at - finished_at % 60000 AS minute, count(*) AS n FROM qc_jobs
WHERE state NOT IN ('queued', 'running') AND finished_at >= :first AND finished_at <= :now
GROUP BY queue, state, minute
