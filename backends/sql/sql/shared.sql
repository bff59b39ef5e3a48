-- The statements both dialects run, written once (see backends/sql/queries.py). Parameters
-- are :name (and ? for positional rows), rewritten to %(name)s / %s for psycopg at load.
-- {now}: the operation's time (SQLite :now, given; PostgreSQL coalesce(:now, server clock)).
-- {in:p:type} / {not_in:p:type}: membership in list parameter p (SQLite a JSON list read
-- with json_each, PostgreSQL an array). {for_update} / {skip_locked}: PostgreSQL row
-- locks (SQLite's write lock serializes every write transaction). State filters are
-- literals so that the partial indexes apply. No CAST to a binary type (SQLite would
-- read it as NUMERIC) and no literal percent sign.

-- ---------------------------------------------------------------- enqueue, concurrency

-- name: count_active
-- Active (queued + running) jobs per concurrency key: the `skip` behaviour's count.
SELECT concurrency_key AS key, count(*) AS n FROM qc_jobs
WHERE concurrency_key {in:keys:text}
    AND concurrency_key IS NOT NULL AND state IN ('queued', 'running')
GROUP BY concurrency_key

-- name: count_running
SELECT concurrency_key AS key, count(*) AS n FROM qc_jobs
WHERE concurrency_key {in:keys:text} AND state = 'running'
GROUP BY concurrency_key

-- ---------------------------------------------------------------- claim (keyed)

-- name: select_ready
-- The keyed claim ({queues}: queries.queues_filter): the top ready jobs not yet looked at;
-- none when the pauses changed since :pv (backends/sql/pauses.py). {paused}: NULL, or
-- paused_field while a task or flow is paused (the pause a job is to be set aside for).
-- `expires_at > now` is not schedule_to_start_expired, `flow_deadline_at > now` not
-- step_refused (rules.leases: a step at its flow's deadline is left for the reaper).
SELECT seq, id, task_name, queue, payload, priority, attempt, max_attempts, timeout_ms,
    heartbeat_ms, options, enqueued_at, replay_of, concurrency_key, concurrency_limit,
    concurrency_skip, run_at, execution_id, step_id, flow_deadline_at, rate_key,
    concurrency_behavior, concurrency_group, place_at, {now} AS now_ms, {paused} AS paused
FROM qc_jobs
WHERE state = 'queued' AND held IS NULL AND {queues}
    AND run_at <= {now} AND (expires_at IS NULL OR expires_at > {now})
    AND (flow_deadline_at IS NULL OR flow_deadline_at > {now})
    AND seq {not_in:excluded:bigint}
    AND coalesce((SELECT value FROM qc_meta WHERE key = 'pauses_version'), '')
        = coalesce(CAST(:pv AS text), '')
ORDER BY priority DESC, coalesce(place_at, run_at), seq LIMIT :limit
{skip_locked}

-- name: start_job
UPDATE qc_jobs SET state = 'running', reason = NULL, attempt = :attempt, worker_id = :worker,
    lease_token = :token, lease_expires_at = :lease, deadline = :deadline,
    heartbeat_expires_at = :hb, started_at = :now, expires_at = NULL, ahead = :ahead
WHERE seq = :seq

-- name: give_back_rows
-- SupportsGiveBack: the current held attempts among the refs, locked in id order (as
-- renew and finish lock). :refs holds one 'attempt:token:id' per ref (attempt and token
-- hold no ':'), :ids their job ids: rows found by id, the state test written as in renew
-- and finish (no partial index on running rows matches it). Refused, so not read and
-- left running for the worker to release: a flow step's job (finished with its
-- execution), a round_robin job (the served mark its claim wrote in qc_rr is not undone)
-- and one whose cancel was requested (the request is the attempt's: given back, a queued
-- job would carry it into its next claim).
SELECT seq, id, attempt, lease_token FROM qc_jobs
WHERE id {in:ids:text} AND coalesce(state, '') = 'running'
    AND (CAST(attempt AS text) || ':' || lease_token || ':' || id) {in:refs:text}
    AND execution_id IS NULL AND NOT cancel_requested
    AND (concurrency_behavior IS NULL OR concurrency_behavior <> 'round_robin')
ORDER BY id
{for_update}

-- name: give_back
-- The rows give_back_rows locked: queued again as before the claim (claim, start_job):
-- the attempt number as then, lease, worker, bounds and start cleared, expires_at as a
-- queued job has it (rules.leases.queued_expiry of run_at); run_at, place_at and seq
-- kept (its place in claim order). The claim wrote no attempt record and a key's running
-- count is read from the rows (count_running): nothing else to undo.
UPDATE qc_jobs SET state = 'queued', attempt = attempt - 1, worker_id = NULL,
    lease_token = NULL, lease_expires_at = NULL, deadline = NULL,
    heartbeat_expires_at = NULL, started_at = NULL,
    expires_at = CASE WHEN schedule_to_start_ms IS NOT NULL
        THEN run_at + schedule_to_start_ms ELSE NULL END
WHERE seq {in:seqs:bigint}

-- ---------------------------------------------------------------- lease

-- name: heartbeat
UPDATE qc_jobs SET heartbeat_expires_at = {now} + heartbeat_ms
WHERE id = :id AND attempt = :attempt AND lease_token = :token AND state = 'running'
RETURNING cancel_requested

-- ---------------------------------------------------------------- dead letters

-- name: select_for_dead
-- The rows (already ended dead) whose dead-letter entries are written now.
SELECT id, task_name, queue, payload, replay_of, finished_at, priority, max_attempts,
    lost_delay_ms, timeout_ms, heartbeat_ms, schedule_to_start_ms, concurrency_key,
    concurrency_limit, concurrency_skip, options, execution_id, step_id, rate_key,
    concurrency_behavior, concurrency_group, debounce_key, debounce_ms, debounce_max_ms
FROM qc_jobs WHERE id {in:ids:text}

-- name: select_attempts_of
-- Ended attempts, then a running one from its job row (its record is written when it ends).
SELECT job_id, number, worker_id, started_at, finished_at, outcome, reason, error_class,
    error_type, message, traceback, mode
FROM qc_attempts WHERE job_id {in:ids:text}
UNION ALL
SELECT id, attempt, worker_id, started_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM qc_jobs WHERE id {in:ids:text} AND state = 'running'
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
SELECT * FROM qc_dead WHERE id = :id {for_update}

-- name: delete_dead
DELETE FROM qc_dead WHERE seq = :seq

-- name: delete_dead_id
DELETE FROM qc_dead WHERE id = :id

-- name: purge_dead
DELETE FROM qc_dead WHERE (CAST(:task AS text) IS NULL OR task_name = :task)
    AND (CAST(:before AS bigint) IS NULL OR dead_at <= :before)

-- ---------------------------------------------------------------- reap

-- name: select_stale
-- Running attempts past a bound (deadlines {reap_margin} late: rules.leases.reap_cutoff);
-- which bound wins is rules.outcomes.reap_verdict's.
SELECT seq, id, attempt, max_attempts, lost_delay_ms, retry_lost_delay_ms,
    lease_expires_at, deadline, heartbeat_expires_at, cancel_requested, concurrency_key,
    run_at, place_at, schedule_to_start_ms, ahead, ahead_refunds, {now} AS now_ms
FROM qc_jobs
WHERE state = 'running' AND execution_id IS NULL
    AND (lease_expires_at <= {now} OR deadline <= {now} - {reap_margin}
        OR heartbeat_expires_at <= {now} - {reap_margin}
        OR lease_expires_at > 9223372036854775807)
ORDER BY lease_expires_at, seq LIMIT :limit
{skip_locked}

-- (lease_expires_at > the largest bigint: never on PostgreSQL; on SQLite a lease expiry
-- stored as text or a blob, which sorts after every number: a corrupt row the reaper
-- dead-letters, queue_core.records.corrupt)

-- name: select_corrupt_queued
-- SQLite only (PostgreSQL enforces the column types): queued rows whose ready time is
-- not a number (text and blobs sort after every number), never claimable; the reaper
-- dead-letters them corrupt_record. Scans the queued rows' index: run once a minute.
SELECT seq, id, run_at, {now} AS now_ms FROM qc_jobs
WHERE state = 'queued' AND held IS NULL AND run_at > 9223372036854775807
    AND execution_id IS NULL
UNION ALL
SELECT seq, id, run_at, {now} AS now_ms FROM qc_jobs
WHERE held IS NOT NULL AND state = 'queued' AND run_at > 9223372036854775807
    AND execution_id IS NULL
LIMIT :limit

-- name: select_sts_expired
-- Queued jobs whose expires_at (rules.leases.queued_expiry) has come; the reaper confirms
-- each with schedule_to_start_expired.
SELECT seq, id, run_at, schedule_to_start_ms, {now} AS now_ms FROM qc_jobs
WHERE state = 'queued' AND expires_at <= {now} AND execution_id IS NULL
ORDER BY expires_at, seq LIMIT :limit
{skip_locked}

-- name: end_attempt
-- The record of an attempt ended by the reaper or a flow deadline, from its job row (the
-- job row's update leaves attempt, worker_id and started_at).
INSERT INTO qc_attempts (job_id, number, worker_id, started_at, finished_at, outcome, reason)
SELECT id, attempt, worker_id, started_at, CAST(:now AS bigint), CAST(:outcome AS text),
    CAST(:reason AS text)
FROM qc_jobs WHERE id = :job_id AND attempt = :number

-- name: reindex_expiry
-- A queued job that select_sts_expired found but schedule_to_start_expired does not judge
-- expired (its expires_at was written apart from its bound): expires_at gets back
-- rules.leases.queued_expiry of its run time and bound, so claims and the reaper agree.
UPDATE qc_jobs SET expires_at = CAST(:expires_at AS bigint)
WHERE seq = :seq AND state = 'queued'

-- name: reap_job
-- The job after a reap verdict (or a schedule-to-start expiry): :run_at and :place_at
-- (rules.outcomes.reap_place_at) only when queued; expires_at mirrors
-- rules.leases.queued_expiry; :refund (0 or 1) raises max_attempts and counts the refund
-- (ReapVerdict.refund).
UPDATE qc_jobs SET state = :state, reason = :reason,
    max_attempts = max_attempts + CAST(:refund AS integer),
    ahead_refunds = CASE WHEN CAST(:refund AS integer) = 1
        THEN coalesce(ahead_refunds, 0) + 1 ELSE ahead_refunds END,
    run_at = coalesce(CAST(:run_at AS bigint), run_at), place_at = CAST(:place_at AS bigint),
    expires_at = CASE WHEN CAST(:run_at AS bigint) IS NOT NULL
        AND schedule_to_start_ms IS NOT NULL
        THEN CAST(:run_at AS bigint) + schedule_to_start_ms ELSE NULL END,
    finished_at = CASE WHEN CAST(:run_at AS bigint) IS NULL
        THEN CAST(:now AS bigint) ELSE NULL END,
    dead_id = :dead_id, result = NULL, lease_token = NULL, lease_expires_at = NULL,
    deadline = NULL, heartbeat_expires_at = NULL
WHERE seq = :seq

-- ---------------------------------------------------------------- prune

-- name: select_prunable
-- A workflow's jobs go with their execution (wf_prune_jobs), not by their own end.
SELECT seq, id FROM qc_jobs
WHERE state NOT IN ('queued', 'running') AND finished_at <= :cutoff
    AND (execution_id IS NULL OR NOT EXISTS (SELECT 1 FROM qc_executions e
        WHERE e.id = qc_jobs.execution_id AND e.kind = 'workflow'))
ORDER BY finished_at LIMIT :limit

-- name: delete_attempts_of
DELETE FROM qc_attempts WHERE job_id {in:ids:text}

-- name: delete_jobs
DELETE FROM qc_jobs WHERE seq {in:seqs:bigint}

-- name: unique_forget
-- The unique keys whose last job is being deleted.
DELETE FROM qc_unique WHERE job_id {in:ids:text}

-- ---------------------------------------------------------------- control and reads

-- name: select_for_cancel
SELECT seq, state FROM qc_jobs WHERE id = :id {for_update}

-- name: cancel_queued
UPDATE qc_jobs SET state = 'cancelled', reason = 'cancelled', finished_at = :now,
    expires_at = NULL
WHERE seq = :seq AND state = 'queued'

-- name: request_cancel
UPDATE qc_jobs SET cancel_requested = true WHERE seq = :seq AND state = 'running'

-- name: get_job
SELECT * FROM qc_jobs WHERE id = :id

-- name: list_attempts
-- Ended attempts, then a running one from its job row.
SELECT job_id, number, worker_id, started_at, finished_at, outcome, reason, error_class,
    error_type, message, traceback, mode
FROM qc_attempts WHERE job_id = :id
UNION ALL
SELECT id, attempt, worker_id, started_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM qc_jobs WHERE id = :id AND state = 'running'
ORDER BY number

-- name: count_pending
SELECT (SELECT count(*) FROM qc_jobs WHERE state = 'running' AND queue {in:queues:text})
     + (SELECT count(*) FROM qc_jobs WHERE state = 'queued' AND held IS NULL
            AND queue {in:queues:text} AND run_at <= {now} + :horizon_ms) AS n

-- name: stats
SELECT queue, CASE WHEN state = 'queued' AND run_at > {now} THEN 'scheduled'
                   WHEN state = 'queued' THEN 'ready' ELSE state END AS kind,
    count(*) AS n
FROM qc_jobs GROUP BY queue, kind

-- name: list_jobs
SELECT * FROM qc_jobs WHERE (CAST(:state AS text) IS NULL OR state = :state)
    AND (CAST(:queue AS text) IS NULL OR queue = :queue)
ORDER BY enqueued_at DESC, seq DESC LIMIT :limit OFFSET :offset

-- name: ready_probe
-- An idle worker's wait: is a job ready now in the queues (`expires_at > now`: not
-- rules.leases.schedule_to_start_expired)?
SELECT 1 AS one FROM qc_jobs WHERE state = 'queued' AND held IS NULL AND queue {in:queues:text}
    AND run_at <= {now} AND (expires_at IS NULL OR expires_at > {now})
    AND (flow_deadline_at IS NULL OR flow_deadline_at > {now})
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
-- The cancel poll: running jobs among the ids with a cancel request.
SELECT id, attempt, lease_token FROM qc_jobs
WHERE id {in:ids:text} AND state = 'running' AND cancel_requested = true

-- ---------------------------------------------------------------- periodic schedules

-- name: schedule_claim_tick
-- Move a schedule's last tick to :tick when it is later (1 row changed) or new.
INSERT INTO qc_schedule_ticks (name, last_tick) VALUES (:name, :tick)
ON CONFLICT (name) DO UPDATE SET last_tick = excluded.last_tick
WHERE qc_schedule_ticks.last_tick < excluded.last_tick

-- name: schedule_ticks
SELECT name, last_tick FROM qc_schedule_ticks ORDER BY name

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

-- name: rate_get
SELECT rate_limit, window_ms, stamps FROM qc_rates WHERE key = :key

-- name: rate_put
UPDATE qc_rates SET stamps = :stamps WHERE key = :key

-- ---------------------------------------------------------------- throughput (schema v9)

-- name: throughput_enqueued
-- Jobs enqueued per queue and minute in [:first, :now] (ix_qc_jobs_enqueued); integer
-- division rounds down to the minute.
SELECT queue, (enqueued_at / 60000) * 60000 AS minute, count(*) AS n FROM qc_jobs
WHERE enqueued_at >= :first AND enqueued_at <= :now
GROUP BY queue, minute

-- name: throughput_finished
-- Jobs finished per queue, final state and minute in [:first, :now] (ix_qc_jobs_finished).
SELECT queue, state, (finished_at / 60000) * 60000 AS minute, count(*) AS n FROM qc_jobs
WHERE state NOT IN ('queued', 'running') AND finished_at >= :first AND finished_at <= :now
GROUP BY queue, state, minute

-- ---------------------------------------------------------------- progress (schema v11)

-- name: progress_set
-- A running attempt's report, fenced like heartbeat.
UPDATE qc_jobs SET progress = :fraction, progress_message = :message, progress_at = {now}
WHERE id = :id AND attempt = :attempt AND lease_token = :token AND state = 'running'
RETURNING id

-- name: progress_record
-- The report an end carries, for an end just taken (its fence checked by the finish).
UPDATE qc_jobs SET progress = :fraction, progress_message = :message, progress_at = {now}
WHERE id = :id

-- name: progress_get
SELECT progress, progress_message, progress_at FROM qc_jobs WHERE id = :id

-- ---------------------------------------------------------------- pauses (schema v11)

-- name: pause_add
INSERT INTO qc_pauses (kind, name, since) VALUES (:kind, :name, {now})
ON CONFLICT (kind, name) DO NOTHING
RETURNING kind

-- name: pause_remove
DELETE FROM qc_pauses WHERE kind = :kind AND name = :name RETURNING kind

-- name: pauses_changed
-- Every pause or resume: the cached pause lists of other storages see the new version.
INSERT INTO qc_meta (key, value) VALUES ('pauses_version', '1')
ON CONFLICT (key) DO UPDATE SET value = CAST(CAST(qc_meta.value AS bigint) + 1 AS text)

-- name: pauses_version
SELECT value FROM qc_meta WHERE key = 'pauses_version'

-- name: pauses_list
SELECT kind, name, since FROM qc_pauses ORDER BY kind, name

-- name: unpaused_filter
-- Not a statement: the predicate (on qc_jobs) of jobs no task or flow pause matches,
-- rules.control.paused for task and flow pauses (a step job's flow is its execution's).
task_name {not_in:paused_tasks:text}
    AND (execution_id IS NULL OR execution_id NOT IN (
        SELECT id FROM qc_executions WHERE flow {in:paused_flows:text}))

-- name: paused_field
-- Not a statement: the pause (`<kind>:<name>`) a job on qc_jobs is to be set aside for,
-- NULL when none matches (rules.control.paused for task and flow pauses).
CASE WHEN task_name {in:paused_tasks:text} THEN 'task:' || task_name
    WHEN execution_id IS NOT NULL THEN (SELECT 'flow:' || flow FROM qc_executions
        WHERE id = qc_jobs.execution_id AND flow {in:paused_flows:text}) END

-- name: pause_lock
-- A pause still stored, locked against its resume until the transaction ends (a job set
-- aside now is put back by that resume's sweep).
SELECT kind FROM qc_pauses WHERE kind = :kind AND name = :name {for_share}

-- name: hold_task
-- Pausing a task sets its queued jobs aside (out of ix_qc_jobs_ready).
UPDATE qc_jobs SET held = :field
WHERE state = 'queued' AND held IS NULL AND task_name = :name

-- name: hold_flow
-- Pausing a flow sets the queued step jobs of its executions aside (ix_qc_jobs_execution).
UPDATE qc_jobs SET held = :field
WHERE execution_id IS NOT NULL AND state IN ('queued', 'running') AND state = 'queued'
    AND held IS NULL
    AND execution_id IN (SELECT id FROM qc_executions WHERE flow = :name)

-- name: hold_met
-- The jobs of a paused task or flow that a claim met (enqueued after the pause).
UPDATE qc_jobs SET held = :field
WHERE seq {in:seqs:bigint} AND state = 'queued' AND held IS NULL

-- name: unhold
-- A resume puts its jobs back in the ready index (in their order: nothing else moves).
UPDATE qc_jobs SET held = NULL WHERE held = :field

-- name: count_pending_unpaused
-- count_pending while something is paused: running jobs of every queue asked, queued
-- ones of the queues not paused ({in:queues}) that no task or flow pause matches.
SELECT (SELECT count(*) FROM qc_jobs WHERE state = 'running' AND queue {in:all_queues:text})
     + (SELECT count(*) FROM qc_jobs WHERE state = 'queued' AND held IS NULL
            AND queue {in:queues:text} AND run_at <= {now} + :horizon_ms
            -- unpaused_filter:
            AND task_name {not_in:paused_tasks:text}
                AND (execution_id IS NULL OR execution_id NOT IN (
                    SELECT id FROM qc_executions WHERE flow {in:paused_flows:text}))) AS n

-- name: ready_probe_unpaused
-- ready_probe while a task or flow is paused.
SELECT 1 AS one FROM qc_jobs WHERE state = 'queued' AND held IS NULL AND queue {in:queues:text}
    AND run_at <= {now} AND (expires_at IS NULL OR expires_at > {now})
    AND (flow_deadline_at IS NULL OR flow_deadline_at > {now})
    -- unpaused_filter:
    AND task_name {not_in:paused_tasks:text}
    AND (execution_id IS NULL OR execution_id NOT IN (
        SELECT id FROM qc_executions WHERE flow {in:paused_flows:text}))
LIMIT 1

-- ---------------------------------------------------------------- debounce, supersede (v11)

-- name: debounce_holder
-- The last job stored with a debounce key (locked: a racing claim went first or waits).
SELECT j.seq, j.id, j.state, j.enqueued_at, j.schedule_to_start_ms
FROM qc_debounce d JOIN qc_jobs j ON j.id = d.job_id WHERE d.key = :key
{for_update}

-- name: debounce_merge
-- Last call wins: the holder's payload and run time (its seq, so its place, stays);
-- expires_at is rules.leases.queued_expiry of the new run time.
UPDATE qc_jobs SET payload = :payload, run_at = :run_at, expires_at = :expires_at,
    place_at = NULL
WHERE seq = :seq AND state = 'queued'
RETURNING id

-- name: debounce_set
INSERT INTO qc_debounce (key, job_id) VALUES (:key, :job_id)
ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id

-- name: debounce_forget
-- The debounce keys whose last job is being deleted.
DELETE FROM qc_debounce WHERE job_id {in:ids:text}

-- name: supersede_active
-- A superseding key's queued and running jobs, oldest first (ix_qc_jobs_ckey).
SELECT seq, id, state, attempt FROM qc_jobs
WHERE concurrency_key = :key AND state IN ('queued', 'running')
ORDER BY seq
{for_update}

-- name: supersede_end
-- A superseded job ends (rules.control.superseded_end); a running one's lease goes.
UPDATE qc_jobs SET state = :state, reason = :reason, finished_at = :now, expires_at = NULL,
    lease_token = NULL, lease_expires_at = NULL, deadline = NULL, heartbeat_expires_at = NULL
WHERE id = :id AND state IN ('queued', 'running')

-- name: job_mark
-- What a limited or controlled job carries beyond the plain insert's columns.
UPDATE qc_jobs SET rate_key = :rate_key, concurrency_behavior = :behavior,
    concurrency_group = :grp, debounce_key = :debounce_key, debounce_ms = :debounce_ms,
    debounce_max_ms = :debounce_max_ms
WHERE id = :id

-- ---------------------------------------------------------------- round robin (schema v11)

-- name: rr_ready
-- One key's best ready jobs in a round-robin group and queue ({queues}: the key, and the
-- unpaused filter while a task or flow is paused), the first :n in claim order
-- (ix_qc_jobs_rr). The select_ready columns.
SELECT seq, id, task_name, queue, payload, priority, attempt, max_attempts, timeout_ms,
    heartbeat_ms, options, enqueued_at, replay_of, concurrency_key, concurrency_limit,
    concurrency_skip, run_at, execution_id, step_id, flow_deadline_at, rate_key,
    concurrency_behavior, concurrency_group, {now} AS now_ms
FROM qc_jobs
WHERE state = 'queued' AND concurrency_behavior = 'round_robin' AND queue = :queue
    AND concurrency_group = :grp AND {queues}
    AND run_at <= {now} AND (expires_at IS NULL OR expires_at > {now})
    AND (flow_deadline_at IS NULL OR flow_deadline_at > {now})
ORDER BY priority DESC, run_at, seq LIMIT :n

-- name: rr_lock_row
-- A turn's job, still queued and held by no other claim.
SELECT seq FROM qc_jobs WHERE seq = :seq AND state = 'queued'
{skip_locked}

-- name: rr_marks
SELECT key, served FROM qc_rr WHERE grp = :grp AND queue = :queue

-- name: rr_marks_of_group
SELECT key, served FROM qc_rr WHERE grp = :grp AND key <> ''

-- name: rr_mark
INSERT INTO qc_rr (grp, queue, key, served) VALUES (:grp, :queue, :key, :served)
ON CONFLICT (grp, queue, key) DO UPDATE SET served = excluded.served

-- name: rr_join
-- A round-robin job was stored: its key takes turns (never served unless it has a mark).
INSERT INTO qc_rr (grp, queue, key, served) VALUES (:grp, :queue, :key, 0)
ON CONFLICT (grp, queue, key) DO NOTHING

-- name: rr_forget
-- A key left without a queued or running job loses its row (ix_qc_jobs_ckey); it joins
-- again, never served, with its next job.
DELETE FROM qc_rr WHERE grp = :grp AND queue = :queue AND key = :key AND NOT EXISTS (
    SELECT 1 FROM qc_jobs WHERE concurrency_key = :key AND state IN ('queued', 'running'))

-- name: rr_heads
-- round_robin_keys: the best ready job of each key of a group, in every queue.
SELECT concurrency_key, concurrency_limit, priority, run_at, seq FROM (
    SELECT concurrency_key, concurrency_limit, priority, run_at, seq,
        ROW_NUMBER() OVER (PARTITION BY queue, concurrency_key
                           ORDER BY priority DESC, run_at, seq) AS rn
    FROM qc_jobs
    WHERE state = 'queued' AND concurrency_behavior = 'round_robin'
        AND concurrency_group = :grp
        AND run_at <= :now AND (expires_at IS NULL OR expires_at > :now)
        AND (flow_deadline_at IS NULL OR flow_deadline_at > :now)
) ranked
WHERE rn = 1
