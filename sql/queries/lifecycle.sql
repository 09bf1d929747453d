-- lifecycle.sql: cancel and look up jobs (src/lifecycle.c). The cancels
-- run after the gate and the check of the partitions' ownership
-- (client.sql), in one transaction.

-- name: cancel
-- Cancels live jobs by id; a finished one is left as it is.
-- $1 bigint[] the ids
-- Returns the ids cancelled.
-- Index: jobs_pkey per id.
UPDATE shardq.jobs j SET status = 'cancelled', expected_status_change_time = NULL,
       rerun_params = NULL, updated_at = now()
 WHERE j.id = ANY($1::bigint[]) AND j.status IN ('ready', 'starting', 'running')
 RETURNING j.id

-- name: retry
-- Makes failed jobs ready again, due now, with a fresh budget of tries
-- (attempt_base = attempt: the fence keeps growing); their last error is
-- kept. A job that is not failed, or whose key a live job of its type has
-- taken meanwhile, is left as it is.
-- $1 bigint[] the ids
-- Returns each id found here, and whether it was made ready.
-- Index: jobs_pkey per id; jobs_active_uid per key.
WITH u AS (
  UPDATE shardq.jobs j SET status = 'ready', attempt_base = j.attempt, worker = NULL,
         schedule_time = now(), delay_tolerance_time = NULL,
         expected_status_change_time = NULL, updated_at = now()
   WHERE j.id = ANY($1::bigint[]) AND j.status = 'failed'
     AND (j.active_uid IS NULL OR NOT EXISTS (
           SELECT 1 FROM shardq.jobs o
            WHERE o.task = j.task AND o.active_uid = j.active_uid
              AND o.status IN ('ready', 'starting', 'running')))
  RETURNING j.id)
SELECT j.id, u.id IS NOT NULL FROM shardq.jobs j LEFT JOIN u ON u.id = j.id
 WHERE j.id = ANY($1::bigint[])

-- name: cancel_key
-- Cancels the live job of a type with a key.
-- $1 text     the type
-- $2 text     the key
-- Returns its id (no row: none is live).
-- Index: jobs_active_uid (its predicate is the status condition here).
UPDATE shardq.jobs j SET status = 'cancelled', expected_status_change_time = NULL,
       rerun_params = NULL, updated_at = now()
 WHERE j.task = $1 AND j.active_uid = $2 AND j.status IN ('ready', 'starting', 'running')
 RETURNING j.id

-- name: get
-- A job in the hot table, columns as job_columns (read by
-- sq_jobrow_parse in src/jobrow.c).
-- $1 bigint   the id
-- Index: jobs_pkey.
SELECT {{job_columns}} FROM shardq.jobs j WHERE j.id = $1

-- name: get_history
-- A finished job in the history (its last run), in the columns of
-- job_columns: the fields history does not keep are NULL or copies.
-- $1 bigint   the id
-- Index: jobs_history_id in each history partition.
SELECT j.id, j.attempt, j.attempt, j.attempt, 0, j.status::text, j.task, j.active_uid,
       j.params::text, j.worker, NULL, NULL, NULL,
       (extract(epoch from j.created_at) * 1000000)::bigint
  FROM shardq.jobs_history j WHERE j.id = $1 ORDER BY j.finished_at DESC LIMIT 1

-- name: get_error
-- A job's last error: in the hot table, else its latest history row.
-- $1 bigint   the id
-- Index: jobs_pkey; jobs_history_id in each history partition.
SELECT x.e FROM (
  SELECT j.last_error AS e, 0 AS o FROM shardq.jobs j WHERE j.id = $1
  UNION ALL
  (SELECT h.last_error, 1 FROM shardq.jobs_history h WHERE h.id = $1
    ORDER BY h.finished_at DESC LIMIT 1)) x
ORDER BY x.o LIMIT 1

-- name: job_columns
-- Fragment: a job as text, in the order sq_jobrow_parse reads it; times in
-- microseconds since the epoch.
j.id, j.attempt, (j.attempt - j.attempt_base), j.max_attempts, j.priority,
j.status::text, j.task, j.active_uid,
j.params::text, j.worker,
(extract(epoch from j.schedule_time) * 1000000)::bigint,
(extract(epoch from j.delay_tolerance_time) * 1000000)::bigint,
(extract(epoch from j.expected_status_change_time) * 1000000)::bigint,
(extract(epoch from j.created_at) * 1000000)::bigint
