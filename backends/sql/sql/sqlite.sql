-- The statements only SQLite runs: the batch shapes of enqueue, claim, renew and finish
-- (backends/sql/sqlite.py). Parameters are sqlite3's :name and ?; see backends/sql/queries.py.

-- name: insert_job
-- One new job (executemany for a batch): positional values, the tuple that
-- records.job_row builds in records.JOB_COLUMNS order (the columns below; binding by
-- position costs about 2/3 of binding 23 names).
INSERT INTO qc_jobs (id, task_name, queue, payload, priority, state, reason, enqueued_at,
    run_at, expires_at, max_attempts, lost_delay_ms, timeout_ms, heartbeat_ms,
    schedule_to_start_ms, concurrency_key, concurrency_limit, concurrency_skip, options,
    replay_of, attempt, finished_at, cancel_requested)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: claim
-- Starts the unkeyed jobs among the top :limit ready ones in one UPDATE; {queues} is
-- queries.queues_filter. Keyed jobs (a `queue` concurrency limit, a rate limit, a
-- flow-control behaviour) are left to the keyed claim. The running attempt lives on the job row (attempt, worker_id, started_at): its
-- qc_attempts record is written once, when it ends. `expires_at > now` is not
-- rules.leases.schedule_to_start_expired. :pv is the pauses' version the claim's queue list
-- was made with (backends/sql/pauses.py): after a pause or resume it claims nothing, and
-- the claim is made again with the new pauses. :ahead: a claim ahead of free slots
-- (SupportsPrefetch) sets no deadline and no heartbeat bound (start_claimed does).
UPDATE qc_jobs SET state = 'running', reason = NULL, attempt = attempt + 1,
    worker_id = :worker, lease_token = lower(hex(randomblob(12))),
    lease_expires_at = :now + :lease_ms,
    deadline = CASE WHEN timeout_ms IS NULL OR :ahead THEN NULL ELSE :now + timeout_ms END,
    heartbeat_expires_at = CASE WHEN heartbeat_ms IS NULL OR :ahead THEN NULL
        ELSE :now + heartbeat_ms END,
    started_at = :now, expires_at = NULL, ahead = :ahead
WHERE seq IN (
        SELECT seq FROM qc_jobs WHERE state = 'queued' AND held IS NULL AND {queues}
            AND run_at <= :now AND (expires_at IS NULL OR expires_at > :now)
            AND (flow_deadline_at IS NULL OR flow_deadline_at > :now)
            AND (SELECT value FROM qc_meta WHERE key = 'pauses_version') IS :pv
        ORDER BY priority DESC, coalesce(place_at, run_at), seq LIMIT :limit)
    AND NOT (concurrency_key IS NOT NULL AND concurrency_limit IS NOT NULL
             AND NOT concurrency_skip)
    AND rate_key IS NULL AND concurrency_behavior IS NULL
RETURNING seq, id, task_name, queue, payload, priority, attempt, max_attempts, timeout_ms,
    heartbeat_ms, options, enqueued_at, replay_of, lease_token, lease_expires_at, deadline,
    started_at, run_at, execution_id, step_id, flow_deadline_at, place_at

-- name: keyed_ready
-- Whether a keyed, rate-limited or round-robin job is ready (then the claim goes on with
-- claim_keyed; ix_qc_jobs_rr holds only queued round-robin jobs).
SELECT 1 AS one FROM qc_jobs WHERE concurrency_key IS NOT NULL
    AND state IN ('queued', 'running') AND state = 'queued'
    AND concurrency_limit IS NOT NULL AND NOT concurrency_skip AND run_at <= :now
UNION ALL
SELECT 1 AS one FROM qc_jobs WHERE rate_key IS NOT NULL AND state = 'queued'
    AND run_at <= :now
UNION ALL
SELECT 1 AS one FROM qc_jobs WHERE state = 'queued' AND concurrency_behavior = 'round_robin'
    AND run_at <= :now
LIMIT 1

-- name: renew
-- One ref, fenced; no row = the lease is lost.
UPDATE qc_jobs SET lease_expires_at = :now + :lease_ms
WHERE id = :id AND attempt = :attempt AND lease_token = :token AND state = 'running'
RETURNING cancel_requested

-- name: start_claimed
-- Refs held ahead of free slots (SupportsPrefetch), fenced: each body started at s_at.
-- {rows}: one (?, ?, ?, ?) per ref: id, attempt, lease token, start time.
WITH s(s_id, s_attempt, s_token, s_at) AS (VALUES {rows})
UPDATE qc_jobs SET started_at = s.s_at, ahead = NULL,
    deadline = CASE WHEN timeout_ms IS NULL THEN NULL ELSE s.s_at + timeout_ms END,
    heartbeat_expires_at = CASE WHEN heartbeat_ms IS NULL THEN NULL
        ELSE s.s_at + heartbeat_ms END
FROM s
WHERE qc_jobs.id = s.s_id AND qc_jobs.attempt = s.s_attempt AND qc_jobs.lease_token = s.s_token
    AND qc_jobs.state = 'running'
RETURNING qc_jobs.id, qc_jobs.attempt, qc_jobs.lease_token

-- name: finish_attempts
-- The batch's attempt records, written once from the job rows (the running attempt was
-- on them), fenced (run before finish_jobs, which clears the lease). {rows}: one
-- (?, ...) per end, in sqlite.FINISH_ROW order. {steps}: '' (plain jobs only: a step's
-- job is finished with its execution's decision, backends/sql/finishing.py) or 'NOT '.
WITH e(e_now, e_id, e_attempt, e_token, e_state, e_reason, e_requeue, e_delay_ms,
       e_lost_delay_ms, e_result, e_has_error, e_error_class, e_error_type, e_message,
       e_traceback, e_outcome, e_a_reason, e_mode, e_dead_id, e_refund,
       e_started_ago) AS (VALUES {rows})
INSERT INTO qc_attempts (job_id, number, worker_id, started_at, finished_at, outcome, reason,
    error_class, error_type, message, traceback, mode)
SELECT e.e_id, e.e_attempt, j.worker_id,
    CASE WHEN e.e_started_ago IS NULL THEN j.started_at ELSE e.e_now - e.e_started_ago END,
    e.e_now, e.e_outcome, e.e_a_reason,
    e.e_error_class, e.e_error_type, e.e_message, e.e_traceback, e.e_mode
FROM e JOIN qc_jobs j ON j.id = e.e_id AND j.attempt = e.e_attempt
    AND j.lease_token = e.e_token AND j.state = 'running' AND j.execution_id IS {steps}NULL

-- name: finish_jobs
-- The batch's jobs, fenced; state and reason come from rules.outcomes.end_state; a retry's
-- expires_at mirrors rules.leases.queued_expiry; an attempt that spent no budget
-- (Decision.spends_attempt false) raises max_attempts. {steps} as in finish_attempts.
WITH e(e_now, e_id, e_attempt, e_token, e_state, e_reason, e_requeue, e_delay_ms,
       e_lost_delay_ms, e_result, e_has_error, e_error_class, e_error_type, e_message,
       e_traceback, e_outcome, e_a_reason, e_mode, e_dead_id, e_refund,
       e_started_ago) AS (VALUES {rows})
UPDATE qc_jobs SET state = e.e_state, reason = e.e_reason,
    max_attempts = CASE WHEN e.e_refund THEN max_attempts + 1 ELSE max_attempts END,
    run_at = CASE WHEN e.e_requeue THEN e.e_now + e.e_delay_ms ELSE run_at END,
    place_at = NULL,
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
    heartbeat_expires_at = NULL,
    started_at = CASE WHEN e.e_started_ago IS NULL THEN started_at
        ELSE e.e_now - e.e_started_ago END
FROM e
WHERE qc_jobs.id = e.e_id AND qc_jobs.attempt = e.e_attempt
    AND qc_jobs.lease_token = e.e_token AND qc_jobs.state = 'running'
    AND qc_jobs.execution_id IS {steps}NULL
RETURNING qc_jobs.id, qc_jobs.concurrency_key


-- name: next_due
-- An idle worker's wait: the earliest ready time after :now of a queued job (not set
-- aside) in the queues (a JSON list), NULL when none: per queue, a skip scan of
-- ix_qc_jobs_ready over its priorities (one seek per priority present, the next lower
-- one found by a seek too), then at each priority, in that index's order (its place,
-- coalesce(place_at, run_at)): the first place after :now (a seek; a lower bound of the
-- run_at of every job placed there, equal to it for a job not placed, place_at being
-- none, so at worst one early wake), and the run_at after :now of the jobs placed at or
-- before :now (reaped jobs in their backoff, ready jobs waiting for a limit: the entries
-- a claim walks too). Delayed jobs are never walked, so the read does not grow with them.
WITH RECURSIVE p(q, pr) AS (
    SELECT value, (SELECT max(priority) FROM qc_jobs
        WHERE state = 'queued' AND held IS NULL AND queue = value)
    FROM json_each(:queues)
    UNION ALL
    SELECT q, (SELECT max(priority) FROM qc_jobs
        WHERE state = 'queued' AND held IS NULL AND queue = p.q AND priority < p.pr)
    FROM p WHERE pr IS NOT NULL)
SELECT nullif(min(min(
        coalesce((SELECT coalesce(place_at, run_at) FROM qc_jobs
            WHERE state = 'queued' AND held IS NULL AND queue = p.q AND priority = p.pr
                AND coalesce(place_at, run_at) > :now
            ORDER BY coalesce(place_at, run_at) LIMIT 1), 9223372036854775807),
        coalesce((SELECT min(run_at) FROM qc_jobs
            WHERE state = 'queued' AND held IS NULL AND queue = p.q AND priority = p.pr
                AND coalesce(place_at, run_at) <= :now AND run_at > :now),
            9223372036854775807))), 9223372036854775807) AS due, :now AS now_ms
FROM p WHERE pr IS NOT NULL
