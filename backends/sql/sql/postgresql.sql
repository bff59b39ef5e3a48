-- Every statement of the PostgreSQL dialect (see backends/sql/queries.py for the format).
-- Parameters are psycopg's %(name)s. {now} is coalesce(%(now)s, the server clock): a
-- caller that passes no time is judged by the server's clock, stable within a statement.
-- Claim and reap lock rows FOR UPDATE SKIP LOCKED; renew and finish lock in id order.
-- State filters are literals so the partial indexes apply.

-- ---------------------------------------------------------------- enqueue

-- name: insert_jobs
-- A batch in one statement (atomic on its own) with the wake-up; per-job arrays in
-- postgresql.ENQUEUE_ARRAYS order. `skipped` rows (concurrency skip) end at once.
WITH ins AS (
    INSERT INTO qc_jobs (id, task_name, queue, payload, priority, state, reason,
        enqueued_at, run_at, expires_at, max_attempts, lost_delay_ms, timeout_ms,
        heartbeat_ms, schedule_to_start_ms, concurrency_key, concurrency_limit,
        concurrency_skip, options, replay_of, attempt, finished_at, cancel_requested)
    SELECT e_id, e_task_name, e_queue, e_payload, e_priority, e_state, e_reason, {now},
        coalesce(e_run_at, {now}) + e_delay_ms,
        CASE WHEN e_state = 'queued' THEN coalesce(e_run_at, {now}) + e_delay_ms + e_sts END,
        e_max_attempts, e_lost_delay_ms, e_timeout_ms, e_heartbeat_ms, e_sts, e_ckey,
        e_climit, e_cskip, e_options, e_replay_of, 0,
        CASE WHEN e_state = 'queued' THEN NULL ELSE {now} END, false
    FROM unnest(CAST(%(id)s AS text[]), CAST(%(task_name)s AS text[]),
        CAST(%(queue)s AS text[]), CAST(%(payload)s AS bytea[]), CAST(%(priority)s AS int[]),
        CAST(%(run_at)s AS bigint[]), CAST(%(delay_ms)s AS bigint[]),
        CAST(%(sts)s AS bigint[]), CAST(%(max_attempts)s AS int[]),
        CAST(%(lost_delay_ms)s AS bigint[]), CAST(%(timeout_ms)s AS bigint[]),
        CAST(%(heartbeat_ms)s AS bigint[]), CAST(%(ckey)s AS text[]),
        CAST(%(climit)s AS int[]), CAST(%(cskip)s AS boolean[]), CAST(%(options)s AS text[]),
        CAST(%(replay_of)s AS text[]), CAST(%(state)s AS text[]), CAST(%(reason)s AS text[]))
        WITH ORDINALITY AS e(e_id, e_task_name, e_queue, e_payload, e_priority, e_run_at,
            e_delay_ms, e_sts, e_max_attempts, e_lost_delay_ms, e_timeout_ms, e_heartbeat_ms,
            e_ckey, e_climit, e_cskip, e_options, e_replay_of, e_state, e_reason, n)
    ORDER BY n
    RETURNING 1)
SELECT pg_notify('qc_jobs', '') AS notified

-- name: insert_job
-- One job of a plain enqueue: VALUES instead of unnest (bench/sql_microbench.py: enqueue
-- single about 2x faster), with the wake-up.
WITH ins AS (
    INSERT INTO qc_jobs (id, task_name, queue, payload, priority, state, reason,
        enqueued_at, run_at, expires_at, max_attempts, lost_delay_ms, timeout_ms,
        heartbeat_ms, schedule_to_start_ms, concurrency_key, concurrency_limit,
        concurrency_skip, options, replay_of, attempt, finished_at, cancel_requested)
    VALUES (%(id)s, %(task_name)s, %(queue)s, %(payload)s, %(priority)s, 'queued', NULL,
        {now}, coalesce(CAST(%(run_at)s AS bigint), {now}) + %(delay_ms)s,
        coalesce(CAST(%(run_at)s AS bigint), {now}) + %(delay_ms)s + CAST(%(sts)s AS bigint),
        %(max_attempts)s, %(lost_delay_ms)s, %(timeout_ms)s, %(heartbeat_ms)s, %(sts)s,
        %(ckey)s, %(climit)s, %(cskip)s, %(options)s, %(replay_of)s, 0, NULL, false)
    RETURNING 1)
SELECT pg_notify('qc_jobs', '') AS notified

-- name: lock_key
-- Serialises the `skip` count of one concurrency key (transaction advisory lock).
SELECT pg_advisory_xact_lock(815002, hashtext(%(k)s)) AS locked

-- name: try_lock_key
-- The keyed claim: a key busy in another claim is skipped this round.
SELECT pg_try_advisory_xact_lock(815002, hashtext(%(k)s)) AS locked

-- name: count_active
SELECT concurrency_key AS key, count(*) AS n FROM qc_jobs
WHERE concurrency_key = ANY(CAST(%(keys)s AS text[]))
    AND concurrency_key IS NOT NULL AND state IN ('queued', 'running')
GROUP BY concurrency_key

-- ---------------------------------------------------------------- claim

-- name: claim
-- One statement: lock the top :limit ready jobs, start the unkeyed ones; keyed ones come
-- back with keyed = true for claim_keyed. The running attempt lives on the job row
-- (attempt, worker_id, started_at): its qc_attempts record is written once, when it ends.
-- `seq = ANY(ARRAY(...))`, not a join with picked: psycopg prepares the statement, and the
-- generic plan (LIMIT $n estimated at 10 % of the ready rows) hash-joined picked with a
-- sequential scan of qc_jobs, every claim (bench/pg_drain_profile.py, auto_explain).
WITH picked AS (
    SELECT seq, ((concurrency_key IS NOT NULL AND concurrency_limit IS NOT NULL
                 AND NOT concurrency_skip) OR rate_key IS NOT NULL) AS keyed
    FROM qc_jobs
    WHERE state = 'queued' AND {queues} AND run_at <= {now}
        AND (expires_at IS NULL OR expires_at > {now})
    ORDER BY priority DESC, run_at, seq LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED),
upd AS (
    UPDATE qc_jobs SET state = 'running', reason = NULL, attempt = qc_jobs.attempt + 1,
        worker_id = %(worker)s, lease_token = replace(CAST(gen_random_uuid() AS text), '-', ''),
        lease_expires_at = {now} + %(lease_ms)s,
        deadline = CASE WHEN timeout_ms IS NULL THEN NULL ELSE {now} + timeout_ms END,
        heartbeat_expires_at = CASE WHEN heartbeat_ms IS NULL THEN NULL
            ELSE {now} + heartbeat_ms END,
        started_at = {now}, expires_at = NULL
    WHERE qc_jobs.seq = ANY(ARRAY(SELECT seq FROM picked WHERE NOT keyed))
    RETURNING qc_jobs.seq, qc_jobs.id, qc_jobs.task_name, qc_jobs.queue, qc_jobs.payload,
        qc_jobs.priority, qc_jobs.attempt, qc_jobs.max_attempts, qc_jobs.timeout_ms,
        qc_jobs.heartbeat_ms, qc_jobs.options, qc_jobs.enqueued_at, qc_jobs.replay_of,
        qc_jobs.lease_token, qc_jobs.lease_expires_at, qc_jobs.deadline, qc_jobs.started_at,
        qc_jobs.run_at, qc_jobs.worker_id, qc_jobs.execution_id, qc_jobs.step_id,
        qc_jobs.flow_deadline_at)
SELECT seq, id, task_name, queue, payload, priority, attempt, max_attempts, timeout_ms,
    heartbeat_ms, options, enqueued_at, replay_of, lease_token, lease_expires_at, deadline,
    started_at, run_at, execution_id, step_id, flow_deadline_at, false AS keyed
FROM upd
UNION ALL
SELECT seq, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, true
FROM picked WHERE keyed

-- name: select_ready
-- The keyed claim ({queues} as in claim): the top ready jobs not yet looked at
-- (:excluded, seq numbers).
SELECT seq, id, task_name, queue, payload, priority, attempt, max_attempts, timeout_ms,
    heartbeat_ms, options, enqueued_at, replay_of, concurrency_key, concurrency_limit,
    concurrency_skip, run_at, execution_id, step_id, flow_deadline_at, rate_key, {now} AS now_ms
FROM qc_jobs
WHERE state = 'queued' AND {queues}
    AND run_at <= {now} AND (expires_at IS NULL OR expires_at > {now})
    AND seq <> ALL(CAST(%(excluded)s AS bigint[]))
ORDER BY priority DESC, run_at, seq LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: count_running
SELECT concurrency_key AS key, count(*) AS n FROM qc_jobs
WHERE concurrency_key = ANY(CAST(%(keys)s AS text[])) AND state = 'running'
GROUP BY concurrency_key

-- name: start_job
UPDATE qc_jobs SET state = 'running', reason = NULL, attempt = %(attempt)s,
    worker_id = %(worker)s, lease_token = %(token)s, lease_expires_at = %(lease)s,
    deadline = %(deadline)s, heartbeat_expires_at = %(hb)s, started_at = %(now)s,
    expires_at = NULL
WHERE seq = %(seq)s

-- ---------------------------------------------------------------- lease

-- name: renew
-- Every ref in one statement, rows locked in id order; a ref not returned lost its lease.
-- Rows are found by id: the state test is written as in finish (no partial index).
WITH e AS (
    SELECT * FROM unnest(CAST(%(ids)s AS text[]), CAST(%(attempts)s AS int[]),
        CAST(%(tokens)s AS text[])) AS e(e_id, e_attempt, e_token)),
l AS (
    SELECT qc_jobs.seq FROM qc_jobs
    JOIN e ON qc_jobs.id = e.e_id AND qc_jobs.attempt = e.e_attempt
        AND qc_jobs.lease_token = e.e_token
    WHERE coalesce(qc_jobs.state, '') = 'running' ORDER BY qc_jobs.id FOR UPDATE OF qc_jobs)
UPDATE qc_jobs SET lease_expires_at = {now} + %(lease_ms)s FROM l WHERE qc_jobs.seq = l.seq
RETURNING qc_jobs.id, qc_jobs.attempt, qc_jobs.lease_token, qc_jobs.cancel_requested

-- name: heartbeat
UPDATE qc_jobs SET heartbeat_expires_at = {now} + heartbeat_ms
WHERE id = %(id)s AND attempt = %(attempt)s AND lease_token = %(token)s
    AND state = 'running'
RETURNING cancel_requested

-- ---------------------------------------------------------------- finish

-- name: finish
-- The whole batch in one statement (padded with NULL rows to one of postgresql.FINISH_SIZES,
-- values as text: pg_hot.finish_params): {rows} is one typed row per end (postgresql.FINISH_ROW
-- order, native $n parameters: psycopg re-parses %s queries over 4 kB or 50 parameters on
-- every call), rows locked in id order, jobs updated and their attempt records written
-- (once: the running attempt was on the job row); state and reason come from
-- policy.outcomes.end_state. e_now NULL = the server clock. The state test is written so
-- that no partial index on state = 'running' matches it: right after a claim the table
-- statistics count ~no running job, and the planner then read the whole lease index once
-- per VALUES row (a nested loop, batch x running: 450 ms for a batch of 500); rows are
-- found by id. The attempt records come from u's RETURNING, not from a join of u with l
-- (CTE scans estimated at 1 row: another batch x batch nested loop).
WITH e(e_now, e_id, e_attempt, e_token, e_state, e_reason, e_requeue, e_delay_ms,
       e_lost_delay_ms, e_result, e_has_error, e_error_class, e_error_type, e_message,
       e_traceback, e_outcome, e_a_reason, e_mode, e_dead_id) AS (VALUES {rows}),
l AS (
    SELECT qc_jobs.seq, e.*,
        coalesce(e.e_now, (extract(epoch from statement_timestamp()) * 1000)::bigint) AS t
    FROM qc_jobs
    JOIN e ON qc_jobs.id = e.e_id AND qc_jobs.attempt = e.e_attempt
        AND qc_jobs.lease_token = e.e_token
    WHERE coalesce(qc_jobs.state, '') = 'running' ORDER BY qc_jobs.id FOR UPDATE OF qc_jobs),
u AS (
    UPDATE qc_jobs SET state = l.e_state, reason = l.e_reason,
        run_at = CASE WHEN l.e_requeue THEN l.t + l.e_delay_ms ELSE run_at END,
        expires_at = CASE WHEN l.e_requeue AND schedule_to_start_ms IS NOT NULL
            THEN l.t + l.e_delay_ms + schedule_to_start_ms ELSE NULL END,
        retry_lost_delay_ms = coalesce(l.e_lost_delay_ms, retry_lost_delay_ms),
        result = l.e_result,
        finished_at = CASE WHEN l.e_requeue THEN NULL ELSE l.t END,
        error_class = CASE WHEN l.e_has_error THEN l.e_error_class ELSE error_class END,
        error_type = CASE WHEN l.e_has_error THEN l.e_error_type ELSE error_type END,
        error_message = CASE WHEN l.e_has_error THEN l.e_message ELSE error_message END,
        error_traceback = CASE WHEN l.e_has_error THEN l.e_traceback
            ELSE error_traceback END,
        dead_id = l.e_dead_id, lease_token = NULL, lease_expires_at = NULL, deadline = NULL,
        heartbeat_expires_at = NULL
    FROM l WHERE qc_jobs.seq = l.seq
    RETURNING qc_jobs.id, qc_jobs.concurrency_key, qc_jobs.attempt, qc_jobs.worker_id,
        qc_jobs.started_at, l.t, l.e_outcome, l.e_a_reason, l.e_error_class, l.e_error_type,
        l.e_message, l.e_traceback, l.e_mode),
a AS (
    INSERT INTO qc_attempts (job_id, number, worker_id, started_at, finished_at, outcome,
        reason, error_class, error_type, message, traceback, mode)
    SELECT id, attempt, worker_id, started_at, t, e_outcome, e_a_reason, e_error_class,
        e_error_type, e_message, e_traceback, e_mode
    FROM u)
SELECT id, concurrency_key FROM u

-- ---------------------------------------------------------------- dead letters

-- name: select_for_dead
SELECT id, task_name, queue, payload, replay_of, finished_at, priority, max_attempts,
    lost_delay_ms, timeout_ms, heartbeat_ms, schedule_to_start_ms, concurrency_key,
    concurrency_limit, concurrency_skip, options, execution_id, step_id, rate_key
FROM qc_jobs WHERE id = ANY(CAST(%(ids)s AS text[]))

-- name: select_attempts_of
-- Ended attempts, then a running one from its job row (see claim).
SELECT job_id, number, worker_id, started_at, finished_at, outcome, reason, error_class,
    error_type, message, traceback, mode
FROM qc_attempts WHERE job_id = ANY(CAST(%(ids)s AS text[]))
UNION ALL
SELECT id, attempt, worker_id, started_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM qc_jobs WHERE id = ANY(CAST(%(ids)s AS text[])) AND state = 'running'
ORDER BY job_id, number

-- name: insert_dead
INSERT INTO qc_dead (id, job_id, task_name, queue, payload, error, error_class, reason,
    attempts, dead_at, replay_of, spec)
VALUES (%(id)s, %(job_id)s, %(task_name)s, %(queue)s, %(payload)s, %(error)s,
    %(error_class)s, %(reason)s, %(attempts)s, %(dead_at)s, %(replay_of)s, %(spec)s)

-- name: list_dead
SELECT * FROM qc_dead ORDER BY dead_at DESC, seq DESC LIMIT %(limit)s OFFSET %(offset)s

-- name: list_dead_of_task
SELECT * FROM qc_dead WHERE task_name = %(task)s
ORDER BY dead_at DESC, seq DESC LIMIT %(limit)s OFFSET %(offset)s

-- name: get_dead
SELECT * FROM qc_dead WHERE id = %(id)s

-- name: take_dead
SELECT * FROM qc_dead WHERE id = %(id)s FOR UPDATE

-- name: delete_dead
DELETE FROM qc_dead WHERE seq = %(seq)s

-- name: purge_dead
DELETE FROM qc_dead WHERE (CAST(%(task)s AS text) IS NULL OR task_name = %(task)s)
    AND (CAST(%(before)s AS bigint) IS NULL OR dead_at <= %(before)s)

-- ---------------------------------------------------------------- reap

-- name: select_stale
-- Running attempts past a bound; which bound wins is policy.outcomes.reap_verdict's.
SELECT seq, id, attempt, max_attempts, lost_delay_ms, retry_lost_delay_ms,
    lease_expires_at, deadline, heartbeat_expires_at, cancel_requested, concurrency_key,
    run_at, schedule_to_start_ms,
    {now} AS now_ms
FROM qc_jobs
WHERE state = 'running' AND execution_id IS NULL
    AND (lease_expires_at <= {now} OR deadline <= {now} OR heartbeat_expires_at <= {now})
ORDER BY lease_expires_at, seq LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: select_sts_expired
SELECT seq, id, concurrency_key, {now} AS now_ms FROM qc_jobs
WHERE state = 'queued' AND expires_at <= {now} AND execution_id IS NULL
ORDER BY expires_at, seq LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: end_attempt
-- The record of an attempt ended by the reaper or a flow deadline, from its job row (run
-- before the job row's own update, which leaves attempt, worker_id and started_at).
INSERT INTO qc_attempts (job_id, number, worker_id, started_at, finished_at, outcome, reason)
SELECT id, attempt, worker_id, started_at, CAST(%(now)s AS bigint),
    CAST(%(outcome)s AS text), CAST(%(reason)s AS text)
FROM qc_jobs WHERE id = %(job_id)s AND attempt = %(number)s

-- name: reap_job
UPDATE qc_jobs SET state = %(state)s, reason = %(reason)s,
    run_at = coalesce(CAST(%(run_at)s AS bigint), run_at),
    expires_at = CASE WHEN CAST(%(run_at)s AS bigint) IS NOT NULL
        AND schedule_to_start_ms IS NOT NULL
        THEN CAST(%(run_at)s AS bigint) + schedule_to_start_ms ELSE NULL END,
    finished_at = CASE WHEN CAST(%(run_at)s AS bigint) IS NULL
        THEN CAST(%(now)s AS bigint) ELSE NULL END,
    dead_id = %(dead_id)s, result = NULL, lease_token = NULL, lease_expires_at = NULL,
    deadline = NULL, heartbeat_expires_at = NULL
WHERE seq = %(seq)s

-- ---------------------------------------------------------------- prune

-- name: select_prunable
SELECT seq, id FROM qc_jobs
WHERE state NOT IN ('queued', 'running') AND finished_at <= %(cutoff)s
ORDER BY finished_at LIMIT %(limit)s

-- name: delete_attempts_of
DELETE FROM qc_attempts WHERE job_id = ANY(CAST(%(ids)s AS text[]))

-- name: delete_jobs
DELETE FROM qc_jobs WHERE seq = ANY(CAST(%(seqs)s AS bigint[]))

-- ---------------------------------------------------------------- control and reads

-- name: server_now
SELECT {now} AS now_ms

-- name: notify
SELECT pg_notify('qc_jobs', '') AS notified

-- name: select_for_cancel
SELECT seq, state FROM qc_jobs WHERE id = %(id)s FOR UPDATE

-- name: cancel_queued
UPDATE qc_jobs SET state = 'cancelled', reason = 'cancelled', finished_at = %(now)s,
    expires_at = NULL
WHERE seq = %(seq)s AND state = 'queued'

-- name: request_cancel
UPDATE qc_jobs SET cancel_requested = true WHERE seq = %(seq)s AND state = 'running'

-- name: get_job
SELECT * FROM qc_jobs WHERE id = %(id)s

-- name: list_attempts
-- Ended attempts, then a running one from its job row (see claim).
SELECT job_id, number, worker_id, started_at, finished_at, outcome, reason, error_class,
    error_type, message, traceback, mode
FROM qc_attempts WHERE job_id = %(id)s
UNION ALL
SELECT id, attempt, worker_id, started_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM qc_jobs WHERE id = %(id)s AND state = 'running'
ORDER BY number

-- name: count_pending
SELECT (SELECT count(*) FROM qc_jobs WHERE state = 'running'
            AND queue = ANY(CAST(%(queues)s AS text[])))
     + (SELECT count(*) FROM qc_jobs WHERE state = 'queued'
            AND queue = ANY(CAST(%(queues)s AS text[]))
            AND run_at <= {now} + %(horizon_ms)s) AS n

-- name: stats
SELECT queue, CASE WHEN state = 'queued' AND run_at > {now} THEN 'scheduled'
                   WHEN state = 'queued' THEN 'ready' ELSE state END AS kind,
    count(*) AS n
FROM qc_jobs GROUP BY queue, kind

-- name: list_jobs
SELECT * FROM qc_jobs WHERE (CAST(%(state)s AS text) IS NULL OR state = %(state)s)
    AND (CAST(%(queue)s AS text) IS NULL OR queue = %(queue)s)
ORDER BY enqueued_at DESC, seq DESC LIMIT %(limit)s OFFSET %(offset)s

-- ---------------------------------------------------------------- workers (schema v6)

-- name: upsert_worker
INSERT INTO qc_workers (id, host, pid, queues, slots, busy, stuck, started_at, last_seen,
    ttl_ms)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, %(slots)s, %(busy)s, %(stuck)s,
    %(started_at)s, %(last_seen)s, %(ttl_ms)s)
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
    queues = excluded.queues, slots = excluded.slots, busy = excluded.busy,
    stuck = excluded.stuck, started_at = excluded.started_at,
    last_seen = excluded.last_seen, ttl_ms = excluded.ttl_ms

-- name: delete_worker
DELETE FROM qc_workers WHERE id = %(id)s

-- name: delete_dead_worker
-- Only the record that was judged dead: a refresh meanwhile keeps it.
DELETE FROM qc_workers WHERE id = %(id)s AND last_seen = %(last_seen)s

-- name: select_workers
SELECT id, host, pid, queues, slots, busy, stuck, started_at, last_seen, ttl_ms
FROM qc_workers

-- name: select_cancel_requested
-- The cancel poll: running jobs among the ids with a cancel request.
SELECT id, attempt, lease_token FROM qc_jobs
WHERE id = ANY(CAST(%(ids)s AS text[])) AND state = 'running' AND cancel_requested
-- ---------------------------------------------------------------- periodic schedules

-- name: schedule_claim_tick
-- Move a schedule's last tick to the tick when it is later (1 row changed) or new.
INSERT INTO qc_schedule_ticks (name, last_tick) VALUES (%(name)s, %(tick)s)
ON CONFLICT (name) DO UPDATE SET last_tick = excluded.last_tick
WHERE qc_schedule_ticks.last_tick < excluded.last_tick

-- name: schedule_ticks
SELECT name, last_tick FROM qc_schedule_ticks ORDER BY name

-- ---------------------------------------------------------------- flows (backends/sql/flows.py)
-- Lock order in every flow transaction: the concurrency key (advisory), the execution row,
-- its active step jobs (FOR UPDATE in id order), then the rows they change.

-- name: flow_lock_key
-- Serializes the executions of one concurrency key (admit, promote, their events).
SELECT pg_advisory_xact_lock(815003, hashtext(%(k)s)) AS locked

-- name: flow_insert_spec
INSERT INTO qc_flow_specs (hash, body) VALUES (%(hash)s, %(body)s) ON CONFLICT (hash) DO NOTHING

-- name: flow_insert_execution
INSERT INTO qc_executions (id, flow, conc_key, conc_limit, conc_skip, spec_hash, input,
    state, reason, max_parallel, timeout_ms, created_at, finished_at, n_succeeded, n_bad)
VALUES (%(id)s, %(flow)s, %(conc_key)s, %(conc_limit)s, %(conc_skip)s, %(spec_hash)s, %(input)s, %(state)s,
    %(reason)s, %(max_parallel)s, %(timeout_ms)s, %(now)s, %(finished_at)s, 0, %(n_bad)s)

-- name: flow_insert_step
INSERT INTO qc_flow_steps (execution_id, idx, step_id, state, reason, deps, job, payload,
    unmet)
VALUES (%(execution_id)s, %(idx)s, %(step_id)s, %(state)s, %(reason)s, %(deps)s, %(job)s, %(payload)s,
    %(unmet)s)

-- name: flow_active_of_key
SELECT id, state, created_at FROM qc_executions
WHERE conc_key = %(key)s AND state IN ('queued', 'running', 'cancelling') ORDER BY seq

-- name: flow_conc_key_of
SELECT conc_key FROM qc_executions WHERE id = %(e)s

-- name: flow_lock_execution
SELECT id, flow, conc_key, conc_limit, conc_skip, state, reason, failed_step, max_parallel,
    timeout_ms, deadline_at, created_at, started_at, finished_at, spec_hash, n_succeeded,
    n_bad
FROM qc_executions WHERE id = %(e)s FOR UPDATE

-- name: flow_lock_jobs
-- The execution's active step jobs (PostgreSQL locks them in id order).
SELECT id, state, attempt FROM qc_jobs
WHERE execution_id = %(e)s AND state IN ('queued', 'running') ORDER BY id FOR UPDATE

-- name: flow_steps
-- Steps with their job's state: a released step stored `queued` is `running` while its
-- job runs.
SELECT s.idx, s.step_id, s.state, s.reason, s.job_id, s.deps, j.state AS job_state
FROM qc_flow_steps s LEFT JOIN qc_jobs j ON j.id = s.job_id
WHERE s.execution_id = %(e)s ORDER BY s.idx

-- name: flow_step_states
-- The steps in a flow transaction (their running jobs are known from flow_lock_jobs).
SELECT idx, state, reason, job_id FROM qc_flow_steps WHERE execution_id = %(e)s ORDER BY idx

-- name: flow_step_deps
SELECT step_id, deps FROM qc_flow_steps WHERE execution_id = %(e)s ORDER BY idx

-- name: flow_update_step
UPDATE qc_flow_steps SET state = %(state)s, reason = %(reason)s,
    job_id = coalesce(CAST(%(job_id)s AS text), job_id),
    result = coalesce(CAST(%(result)s AS bytea), result)
WHERE execution_id = %(e)s AND idx = %(idx)s

-- name: flow_update_execution
UPDATE qc_executions SET state = %(state)s, reason = %(reason)s, failed_step = %(failed_step)s,
    deadline_at = %(deadline_at)s, started_at = coalesce(CAST(%(started_at)s AS bigint), started_at),
    finished_at = coalesce(CAST(%(finished_at)s AS bigint), finished_at),
    n_succeeded = n_succeeded + %(ds)s, n_bad = n_bad + %(db)s
WHERE id = %(e)s

-- name: flow_step_jobs
SELECT idx, job, payload FROM qc_flow_steps
WHERE execution_id = %(e)s AND idx = ANY(CAST(%(idxs)s AS int[]))

-- name: flow_fast_steps
-- The fast step end (backends/sql/flow_fast.py): the ended step and its dependents.
SELECT idx, state, job_id, unmet FROM qc_flow_steps
WHERE execution_id = %(e)s AND idx = ANY(CAST(%(idxs)s AS int[]))

-- name: flow_lower_unmet
-- Dependents of a step that succeeded: one dependency fewer not succeeded.
UPDATE qc_flow_steps SET unmet = unmet - 1
WHERE execution_id = %(e)s AND idx = ANY(CAST(%(idxs)s AS int[]))

-- name: flow_lower_unmet_by
-- A folded batch of step ends: a dependent's dependencies that succeeded in it.
UPDATE qc_flow_steps SET unmet = unmet - %(n)s WHERE execution_id = %(e)s AND idx = %(idx)s

-- name: flow_insert_job
-- A released step's job: records.JOB_COLUMNS, then execution_id, step_id, flow_deadline_at.
INSERT INTO qc_jobs (id, task_name, queue, payload, priority, state, reason, enqueued_at,
    run_at, expires_at, max_attempts, lost_delay_ms, timeout_ms, heartbeat_ms,
    schedule_to_start_ms, concurrency_key, concurrency_limit, concurrency_skip, options,
    replay_of, attempt, finished_at, cancel_requested, execution_id, step_id,
    flow_deadline_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
    %s, %s, %s, %s, %s, %s)

-- name: flow_time_out_job
UPDATE qc_jobs SET state = 'timed_out', reason = 'flow_timeout', finished_at = %(now)s,
    lease_token = NULL, lease_expires_at = NULL, deadline = NULL,
    heartbeat_expires_at = NULL, expires_at = NULL
WHERE id = %(id)s AND state = 'running'

-- name: flow_not_run_job
UPDATE qc_jobs SET state = 'cancelled', reason = 'not_run', finished_at = %(now)s,
    expires_at = NULL
WHERE id = %(id)s AND state = 'queued'

-- name: flow_cancel_job
UPDATE qc_jobs SET cancel_requested = true WHERE id = %(id)s AND state = 'running'

-- name: flow_jobs_of
SELECT id, execution_id, step_id FROM qc_jobs
WHERE id = ANY(CAST(%(ids)s AS text[]))

-- name: flow_deadlines_due
SELECT id FROM qc_executions
WHERE state = 'running' AND deadline_at IS NOT NULL AND deadline_at <= %(now)s
ORDER BY deadline_at LIMIT %(limit)s

-- name: flow_stale_steps
SELECT id, execution_id FROM qc_jobs
WHERE state = 'running' AND execution_id IS NOT NULL
    AND (lease_expires_at <= %(now)s OR deadline <= %(now)s OR heartbeat_expires_at <= %(now)s)
ORDER BY lease_expires_at, seq LIMIT %(limit)s

-- name: flow_stale_one
-- select_stale for one step job (under its execution's lock).
SELECT seq, id, attempt, max_attempts, lost_delay_ms, retry_lost_delay_ms,
    lease_expires_at, deadline, heartbeat_expires_at, cancel_requested, concurrency_key,
    run_at, schedule_to_start_ms,
    CAST(%(now)s AS bigint) AS now_ms
FROM qc_jobs
WHERE id = %(id)s AND state = 'running'
    AND (lease_expires_at <= %(now)s OR deadline <= %(now)s OR heartbeat_expires_at <= %(now)s)
FOR UPDATE

-- name: flow_sts_steps
SELECT id, execution_id FROM qc_jobs
WHERE state = 'queued' AND expires_at <= %(now)s AND execution_id IS NOT NULL
ORDER BY expires_at, seq LIMIT %(limit)s

-- name: flow_sts_one
SELECT seq, id, concurrency_key, CAST(%(now)s AS bigint) AS now_ms FROM qc_jobs
WHERE id = %(id)s AND state = 'queued' AND expires_at <= %(now)s
FOR UPDATE

-- name: flow_job_state
SELECT seq, state, reason, result, step_id FROM qc_jobs WHERE id = %(id)s

-- name: flow_get_execution
SELECT * FROM qc_executions WHERE id = %(e)s

-- name: flow_list_executions
SELECT * FROM qc_executions WHERE (CAST(%(flow)s AS text) IS NULL OR flow = %(flow)s)
    AND (CAST(%(state)s AS text) IS NULL OR state = %(state)s)
ORDER BY seq DESC LIMIT %(limit)s OFFSET %(offset)s

-- name: flow_spec_bodies
SELECT hash, body FROM qc_flow_specs WHERE hash = ANY(CAST(%(hashes)s AS text[]))

-- name: flow_step_results
-- The results of some steps (a step's dependencies: get_step_inputs).
SELECT idx, result FROM qc_flow_steps WHERE execution_id = %(e)s AND idx = ANY(CAST(%(idxs)s AS int[]))

-- name: flow_prunable
SELECT id, spec_hash FROM qc_executions
WHERE state NOT IN ('queued', 'running', 'cancelling') AND finished_at <= %(cutoff)s
ORDER BY finished_at LIMIT %(limit)s

-- name: flow_delete_steps
DELETE FROM qc_flow_steps WHERE execution_id = ANY(CAST(%(ids)s AS text[]))

-- name: flow_delete_executions
DELETE FROM qc_executions WHERE id = ANY(CAST(%(ids)s AS text[]))

-- name: flow_delete_specs
-- Specs no execution uses any more (of the pruned executions' hashes).
DELETE FROM qc_flow_specs WHERE hash = ANY(CAST(%(hashes)s AS text[]))
    AND NOT EXISTS (SELECT 1 FROM qc_executions e WHERE e.spec_hash = qc_flow_specs.hash)

-- ---------------------------------------------------------------- unique jobs, rate limits

-- name: unique_holder
-- The last job stored with a unique key, its state (NULL once pruned) and window.
SELECT u.job_id, u.enqueued_at, u.unique_for_ms, j.state FROM qc_unique u
LEFT JOIN qc_jobs j ON j.id = u.job_id WHERE u.key = %(key)s

-- name: unique_set
INSERT INTO qc_unique (key, job_id, enqueued_at, unique_for_ms)
VALUES (%(key)s, %(job_id)s, %(now)s, %(unique_for_ms)s)
ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id,
    enqueued_at = excluded.enqueued_at, unique_for_ms = excluded.unique_for_ms

-- name: rate_define
-- A rate-limited enqueue: the key's rate (the latest enqueue's), claim times kept.
INSERT INTO qc_rates (key, rate_limit, window_ms, stamps)
VALUES (%(key)s, %(rate_limit)s, %(window_ms)s, '[]')
ON CONFLICT (key) DO UPDATE SET rate_limit = excluded.rate_limit,
    window_ms = excluded.window_ms

-- name: rate_mark
UPDATE qc_jobs SET rate_key = %(key)s WHERE id = %(id)s

-- name: rate_get
SELECT rate_limit, window_ms, stamps FROM qc_rates WHERE key = %(key)s

-- name: rate_put
UPDATE qc_rates SET stamps = %(stamps)s WHERE key = %(key)s

-- name: unique_forget
-- Prune: the unique keys whose last job is being deleted.
DELETE FROM qc_unique WHERE job_id = ANY(CAST(%(ids)s AS text[]))
-- name: any_ready
-- Whether a job is ready in one of the queues (an idle worker's poll behind PgBouncer).
SELECT EXISTS (SELECT 1 FROM qc_jobs WHERE state = 'queued'
    AND queue = ANY(CAST(%(queues)s AS text[])) AND run_at <= {now}) AS ready

-- ---------------------------------------------------------------- throughput (schema v9)

-- name: throughput_enqueued
-- Jobs enqueued per queue and minute in [first, now] (ix_qc_jobs_enqueued).
SELECT queue, enqueued_at - mod(enqueued_at, 60000) AS minute, count(*) AS n FROM qc_jobs
WHERE enqueued_at >= %(first)s AND enqueued_at <= %(now)s
GROUP BY queue, minute

-- name: throughput_finished
-- Jobs finished per queue, final state and minute in [first, now] (ix_qc_jobs_finished).
SELECT queue, state, finished_at - mod(finished_at, 60000) AS minute, count(*) AS n
FROM qc_jobs
WHERE state NOT IN ('queued', 'running') AND finished_at >= %(first)s
    AND finished_at <= %(now)s
GROUP BY queue, state, minute
