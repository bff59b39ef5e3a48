-- The statements only PostgreSQL runs: the batch shapes of enqueue, claim, renew and finish
-- (backends/sql/postgresql.py), advisory locks and NOTIFY. Parameters are psycopg's
-- %(name)s; {now} is coalesce(%(now)s, the server clock), stable within a statement.
-- Claim locks rows FOR UPDATE SKIP LOCKED; renew and finish lock in id order.

-- name: insert_jobs
-- A batch in one statement (atomic on its own) with the wake-up; per-job arrays in
-- postgresql.ENQUEUE_ARRAYS order. `skipped` rows (concurrency skip) end at once;
-- expires_at mirrors rules.leases.queued_expiry.
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
-- single about 2x faster), with the wake-up; expires_at mirrors rules.leases.queued_expiry.
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

-- name: flow_lock_key
-- Serializes the executions of one concurrency key (admit, promote, their events).
SELECT pg_advisory_xact_lock(815003, hashtext(%(k)s)) AS locked

-- name: claim
-- One statement: lock the top :limit ready jobs, start the unkeyed ones; keyed ones come
-- back with keyed = true for the keyed claim (`expires_at > now`: not
-- rules.leases.schedule_to_start_expired). The running attempt lives on the job row
-- (attempt, worker_id, started_at): its qc_attempts record is written once, when it ends.
-- `seq = ANY(ARRAY(...))`, not a join with picked: psycopg prepares the statement, and the
-- generic plan (LIMIT $n estimated at 10 % of the ready rows) hash-joined picked with a
-- sequential scan of qc_jobs, every claim (bench/pg_drain_profile.py, auto_explain).
-- %(pv)s is the pauses' version the claim's queue list was made with (backends/sql/pauses.py):
-- after a pause or resume it claims nothing, and the claim is made again. %(ahead)s: a
-- claim ahead of free slots (SupportsPrefetch) sets no deadline and no heartbeat bound.
WITH picked AS (
    SELECT seq, ((concurrency_key IS NOT NULL AND concurrency_limit IS NOT NULL
                 AND NOT concurrency_skip) OR rate_key IS NOT NULL
                 OR concurrency_behavior IS NOT NULL) AS keyed
    FROM qc_jobs
    WHERE state = 'queued' AND held IS NULL AND {queues} AND run_at <= {now}
        AND (expires_at IS NULL OR expires_at > {now})
        AND (flow_deadline_at IS NULL OR flow_deadline_at > {now})
        AND (SELECT value FROM qc_meta WHERE key = 'pauses_version')
            IS NOT DISTINCT FROM CAST(%(pv)s AS text)
    ORDER BY priority DESC, coalesce(place_at, run_at), seq LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED),
upd AS (
    UPDATE qc_jobs SET state = 'running', reason = NULL, attempt = qc_jobs.attempt + 1,
        worker_id = %(worker)s, lease_token = replace(CAST(gen_random_uuid() AS text), '-', ''),
        lease_expires_at = {now} + %(lease_ms)s,
        deadline = CASE WHEN timeout_ms IS NULL OR %(ahead)s THEN NULL
            ELSE {now} + timeout_ms END,
        heartbeat_expires_at = CASE WHEN heartbeat_ms IS NULL OR %(ahead)s THEN NULL
            ELSE {now} + heartbeat_ms END,
        started_at = {now}, expires_at = NULL, ahead = %(ahead)s
    WHERE qc_jobs.seq = ANY(ARRAY(SELECT seq FROM picked WHERE NOT keyed))
    RETURNING qc_jobs.seq, qc_jobs.id, qc_jobs.task_name, qc_jobs.queue, qc_jobs.payload,
        qc_jobs.priority, qc_jobs.attempt, qc_jobs.max_attempts, qc_jobs.timeout_ms,
        qc_jobs.heartbeat_ms, qc_jobs.options, qc_jobs.enqueued_at, qc_jobs.replay_of,
        qc_jobs.lease_token, qc_jobs.lease_expires_at, qc_jobs.deadline, qc_jobs.started_at,
        qc_jobs.run_at, qc_jobs.worker_id, qc_jobs.execution_id, qc_jobs.step_id,
        qc_jobs.flow_deadline_at, qc_jobs.place_at)
SELECT seq, id, task_name, queue, payload, priority, attempt, max_attempts, timeout_ms,
    heartbeat_ms, options, enqueued_at, replay_of, lease_token, lease_expires_at, deadline,
    started_at, run_at, execution_id, step_id, flow_deadline_at, place_at, false AS keyed
FROM upd
UNION ALL
SELECT seq, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true
FROM picked WHERE keyed

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

-- name: start_claimed
-- Every ref held ahead of free slots (SupportsPrefetch) in one statement, fenced as renew:
-- each body started e_ago ms before now.
WITH e AS (
    SELECT * FROM unnest(CAST(%(ids)s AS text[]), CAST(%(attempts)s AS int[]),
        CAST(%(tokens)s AS text[]), CAST(%(ago)s AS bigint[])) AS e(e_id, e_attempt, e_token,
        e_ago)),
l AS (
    SELECT qc_jobs.seq, {now} - e.e_ago AS s FROM qc_jobs
    JOIN e ON qc_jobs.id = e.e_id AND qc_jobs.attempt = e.e_attempt
        AND qc_jobs.lease_token = e.e_token
    WHERE coalesce(qc_jobs.state, '') = 'running' ORDER BY qc_jobs.id FOR UPDATE OF qc_jobs)
UPDATE qc_jobs SET started_at = l.s, ahead = NULL,
    deadline = CASE WHEN timeout_ms IS NULL THEN NULL ELSE l.s + timeout_ms END,
    heartbeat_expires_at = CASE WHEN heartbeat_ms IS NULL THEN NULL
        ELSE l.s + heartbeat_ms END
FROM l WHERE qc_jobs.seq = l.seq
RETURNING qc_jobs.id, qc_jobs.attempt, qc_jobs.lease_token

-- name: finish
-- {steps}: '' (plain jobs only: a step's job is finished with its execution's decision,
-- backends/sql/finishing.py) or 'NOT '. The whole batch in one statement (padded with NULL rows to one of postgresql.FINISH_SIZES,
-- values as text: pg_hot.finish_params): {rows} is one typed row per end (postgresql.FINISH_ROW
-- order, native $n parameters: psycopg re-parses %s queries over 4 kB or 50 parameters on
-- every call), rows locked in id order, jobs updated and their attempt records written
-- (once: the running attempt was on the job row); state and reason come from
-- rules.outcomes.end_state (a retry's expires_at:
-- rules.leases.queued_expiry). e_now NULL = the server clock. The state test is written so
-- that no partial index on state = 'running' matches it: right after a claim the table
-- statistics count ~no running job, and the planner then read the whole lease index once
-- per VALUES row (a nested loop, batch x running: 450 ms for a batch of 500); rows are
-- found by id: `id = ANY(ARRAY(...))` as in claim, because on a table never analyzed
-- (a new store) the state test is estimated at ~1 row and the planner read the whole
-- table once per finish (auto_explain, 10,000 queued: a Seq Scan on qc_jobs of 300 ms),
-- a cost that grows with the table until autovacuum analyzes it (issue 30). The attempt
-- records come from u's RETURNING, not from a join of u with l (CTE scans estimated at 1
-- row: another batch x batch nested loop).
WITH e(e_now, e_id, e_attempt, e_token, e_state, e_reason, e_requeue, e_delay_ms,
       e_lost_delay_ms, e_result, e_has_error, e_error_class, e_error_type, e_message,
       e_traceback, e_outcome, e_a_reason, e_mode, e_dead_id, e_refund,
       e_started_ago) AS (VALUES {rows}),
l AS (
    SELECT qc_jobs.seq, e.*,
        coalesce(e.e_now, (extract(epoch from statement_timestamp()) * 1000)::bigint) AS t
    FROM qc_jobs
    JOIN e ON qc_jobs.id = e.e_id AND qc_jobs.attempt = e.e_attempt
        AND qc_jobs.lease_token = e.e_token
    WHERE qc_jobs.id = ANY(ARRAY(SELECT e_id FROM e WHERE e_id IS NOT NULL))
        AND coalesce(qc_jobs.state, '') = 'running' AND qc_jobs.execution_id IS {steps}NULL
    ORDER BY qc_jobs.id FOR UPDATE OF qc_jobs),
u AS (
    UPDATE qc_jobs SET state = l.e_state, reason = l.e_reason,
        -- an attempt that spent no budget (Decision.spends_attempt false)
        max_attempts = CASE WHEN l.e_refund THEN max_attempts + 1 ELSE max_attempts END,
        run_at = CASE WHEN l.e_requeue THEN l.t + l.e_delay_ms ELSE run_at END,
        place_at = NULL,
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
        heartbeat_expires_at = NULL,
        -- a held attempt's start told with its end (start_and_finish)
        started_at = CASE WHEN l.e_started_ago IS NULL THEN started_at
            ELSE l.t - l.e_started_ago END
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

-- name: server_now
SELECT {now} AS now_ms

-- name: notify
SELECT pg_notify('qc_jobs', '') AS notified

-- name: jobs_dead_rows
-- What rules.vacuum.vacuum_due takes (backends/sql/vacuum.py): qc_jobs's dead row
-- versions and the milliseconds since its last vacuum by anyone (NULL: never vacuumed).
SELECT n_dead_tup AS dead,
    CAST(extract(epoch FROM clock_timestamp() - greatest(last_vacuum, last_autovacuum))
        * 1000 AS bigint) AS since_ms
FROM pg_stat_user_tables WHERE relid = CAST('qc_jobs' AS regclass)

-- name: vacuum_jobs
-- Never in a transaction (an autocommit statement). SKIP_LOCKED: returns at once while
-- another worker's vacuum or autovacuum holds the table; INDEX_CLEANUP ON: the index pass
-- is what removes the claimed jobs' entries from the claim's way.
VACUUM (INDEX_CLEANUP ON, SKIP_LOCKED) qc_jobs

-- name: next_due
-- An idle worker's wait: the earliest ready time after now of a queued job (not set
-- aside) in the queues, NULL when none, and the server's now: per queue, a skip scan of
-- ix_qc_jobs_ready over its priorities (one index seek per priority present), then at
-- each priority, in that index's order (coalesce(place_at, run_at)): the first place
-- after now (a seek: a lower bound of the run_at of every job placed there, equal to it
-- for a job not placed, so at worst one early wake) and the run_at after now of the jobs
-- placed at or before now (reaped jobs in their backoff, ready jobs waiting for a limit:
-- what a claim walks too). Delayed jobs are never walked: the read does not grow with them.
WITH RECURSIVE p(q, pr) AS (
    SELECT u.q, (SELECT max(priority) FROM qc_jobs
        WHERE state = 'queued' AND held IS NULL AND queue = u.q)
    FROM unnest(CAST(%(queues)s AS text[])) AS u(q)
    UNION ALL
    SELECT p.q, (SELECT max(priority) FROM qc_jobs
        WHERE state = 'queued' AND held IS NULL AND queue = p.q AND priority < p.pr)
    FROM p WHERE p.pr IS NOT NULL)
SELECT min(LEAST(
        (SELECT coalesce(place_at, run_at) FROM qc_jobs
            WHERE state = 'queued' AND held IS NULL AND queue = p.q AND priority = p.pr
                AND coalesce(place_at, run_at) > {now}
            ORDER BY coalesce(place_at, run_at) LIMIT 1),
        (SELECT min(run_at) FROM qc_jobs
            WHERE state = 'queued' AND held IS NULL AND queue = p.q AND priority = p.pr
                AND coalesce(place_at, run_at) <= {now} AND run_at > {now}))) AS due,
    {now} AS now_ms
FROM p WHERE p.pr IS NOT NULL

-- name: flow_update_step_arrays
-- flow_update_step for a batch of step rows (PostgreSQL.many): one statement, an array
-- per parameter; each step once per batch.
UPDATE qc_flow_steps s SET state = u.state, reason = u.reason,
    job_id = coalesce(u.job_id, s.job_id), unmet = s.unmet - u.lowered,
    result = CASE WHEN u.state = 'succeeded' AND s.state <> 'succeeded'
        THEN (SELECT j.result FROM qc_jobs j WHERE j.id = s.job_id) ELSE s.result END
FROM unnest(CAST(%(e)b AS text[]), CAST(%(idx)b AS int[]), CAST(%(state)b AS text[]),
        CAST(%(reason)b AS text[]), CAST(%(job_id)b AS text[]), CAST(%(lowered)b AS int[]))
    AS u(e, idx, state, reason, job_id, lowered)
WHERE s.execution_id = u.e AND s.idx = u.idx
