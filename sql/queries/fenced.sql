-- fenced.sql: the fenced writes after a claim (src/lifecycle.c): start,
-- heartbeat, complete, fail, release, unclaim, and the report of the
-- partitions not owned that runs before each of them. A write touches a
-- job only while its row still matches the ref (id, attempt) and the
-- worker, and never blindly: each returns the ordinals of the refs it
-- wrote, the others are lost (or moving).
--
-- Every fenced write has the same shape, for the same reasons:
--
-- 1. `f` finds and locks the rows: per ref (x), a LATERAL subquery with FOR
--    UPDATE, which PostgreSQL neither flattens nor reorders, so x drives
--    and each ref is one probe of jobs_pkey by its id, whatever the
--    statistics say and whether the plan is made for these values or once
--    for all (a generic plan). A join of x with the table may be planned
--    as a read of the whole of jobs_pkey compared with every ref: with the
--    statistics a vacuum leaves on a churned table (many pages, a few live
--    rows) that took 291 ms for a completion of 600 refs with 3,200 jobs
--    running.
-- 2. The write takes the rows `f` found by `j.id = ANY (ARRAY(...))`, which
--    only jobs_pkey serves, and joins nothing (as the claim's update does).
--    The lock is what a write would take anyway, and what makes this safe:
--    a row locked in `f` cannot change before the write, so the write needs
--    no fence of its own, and what `f` found is what is written (its ords
--    are the answer). A row changed by a transaction that committed after
--    this statement's snapshot is locked in its newest version, and the
--    fence is checked again on that version (as an UPDATE would).
-- 3. The fence includes that this shard owns the row's partition. The
--    statement runs after the gate statement, so its snapshot is taken once
--    the gate is held: a partition owned then stays owned until the commit
--    (a freeze needs the gate exclusive). A ref of a partition that is
--    moving or gone is left alone, and the other refs of the batch are
--    written; not_owned says which. It is a scalar subquery, not EXISTS:
--    the planner may turn an EXISTS into a join and start from
--    partition_state. Without statistics on that table (a fresh cluster,
--    until autovacuum first analyzes it) that plan took "owned" for 0.5% of
--    the partitions, read every job of each through jobs_partition and
--    matched them against the refs: 3.2 s for a completion of 250 jobs on
--    100,000. A subquery in the comparison is one probe of partition_state's
--    key per row found.
-- 4. The status is compared as text: written as the enum, it matches the
--    predicate of the partial index jobs_lease, which the planner then may
--    scan whole (2.4 ms against 1.8 ms for a 90-job completion with 2,090
--    running).
--
-- Parameters common to all: $1 bigint[] the job ids, $2 int[] their
-- attempts, $3 text the worker. Indexes: jobs_pkey per ref and per row
-- written, partition_state_pkey per row found.
--
-- A completion or failure takes a job that is running, or still starting:
-- a worker starts a buffered job on a free slot at once, under its starting
-- lease, and writes `running` in its next round; a job that finished before
-- that write is completed (or failed) straight from `starting`.

-- name: fenced_start
-- starting -> running. Running already (a start resent after its commit
-- went unanswered) is fine: same run, the lease is renewed. now() is the
-- transaction's, so the lease `f` answers is the one the update writes.
-- $4 text[]   the client's types
-- $5 bigint[] their execution leases in ms (300000 for a type not listed)
-- Returns (ord, the lease set in microseconds since the epoch).
WITH x AS (SELECT * FROM unnest($1::bigint[], $2::int[]) WITH ORDINALITY AS x(id, att, ord)),
 f AS (SELECT x.ord, m.* FROM x CROSS JOIN LATERAL (
         SELECT j.id, (extract(epoch FROM now()
                  + COALESCE(($5::bigint[])[array_position($4::text[], j.task)], 300000)
                    * interval '1 millisecond') * 1000000)::bigint AS lease
           FROM shardq.jobs j
          WHERE j.id = x.id AND j.attempt = x.att AND j.worker = $3
            AND j.status::text IN ('starting', 'running')
            AND (SELECT ps.state FROM shardq.partition_state ps
                  WHERE ps.partition = j.partition) = 'owned'
            FOR UPDATE) m),
 u AS (UPDATE shardq.jobs j SET status = 'running', updated_at = now(),
         expected_status_change_time = now()
           + COALESCE(($5::bigint[])[array_position($4::text[], j.task)], 300000)
             * interval '1 millisecond'
        WHERE j.id = ANY (ARRAY(SELECT f.id FROM f)))
SELECT f.ord, f.lease FROM f

-- name: fenced_heartbeat
-- running -> running, the lease extended: the start's statement under a
-- name of its own. A job still `starting` (a worker that runs it without
-- having sent its start) is started by it, as a start would: the worker
-- that holds it is running it, and answering `lost` would make it drop a
-- job that is still its own. Parameters and result as fenced_start.
{{fenced_start}}

-- name: fenced_complete
-- A completed job leaves the hot table (into history if its type keeps
-- it), unless a rerun is pending: then it is ready again with the rerun's
-- params and a fresh budget of attempts (the base moves up; the attempt,
-- which fences every write of a run, never goes down).
-- $4 text[]   the types that keep history
-- $5 int[]    their history_retention in whole days (expires_at picks the
--             history partition, docs/operations.md)
-- $6 float8   seconds added to now() for finished_at and expires_at (0; a
--             test clock only in failpoint builds)
-- Returns the ords written.
{{complete_lock_rerun}}
 del AS (DELETE FROM shardq.jobs j
          WHERE j.id = ANY (ARRAY(SELECT f.id FROM f WHERE NOT f.rerun))
          RETURNING j.*),
 hist AS (INSERT INTO shardq.jobs_history (id, partition, task, status, attempt, worker,
            active_uid, params, last_error, created_at, finished_at, expires_at)
          SELECT id, partition, task, 'completed', attempt - attempt_base, worker,
                 active_uid, params, last_error, created_at,
                 now() + $6::float8 * interval '1 second',
                 now() + $6::float8 * interval '1 second' + interval '1 day' *
                   COALESCE(($5::int[])[array_position($4::text[], task)], 7)
            FROM del WHERE task = ANY($4::text[]))
SELECT f.ord FROM f

-- name: fenced_complete_plain
-- The completion without history, for a client none of whose types keeps
-- it: the deleted rows need not come back for an insert that takes none of
-- them (returning them cost a session about 1 us a row, a third of the
-- statement). $1..$3 only. Returns the ords written.
{{complete_lock_rerun}}
 del AS (DELETE FROM shardq.jobs j
          WHERE j.id = ANY (ARRAY(SELECT f.id FROM f WHERE NOT f.rerun)))
SELECT f.ord FROM f

-- name: fenced_fail
-- Retry with the type's backoff while tries remain, else failed. A pending
-- rerun outlives a final failure: the job is ready again with it and a
-- fresh budget. The update joins `f` for each row's error and permanence:
-- a join of the found rows only, at worst quadratic in the refs of one
-- call (failures come in small batches), never in the table.
-- $4 text[]   the client's types; per type:
-- $5 int[]    backoff kind (0 constant, 1 linear, 2 exponential)
-- $6 bigint[] backoff base in ms
-- $7 bigint[] backoff cap in ms
-- $8 float8[] jitter (a fraction of the delay)
-- $9 text[]   per ref: the error
-- $10 bool[]  per ref: permanent (no retry)
-- Returns the ords written.
WITH x AS (SELECT * FROM unnest($1::bigint[], $2::int[], $9::text[], $10::bool[])
           WITH ORDINALITY AS x(id, att, err, perm, ord)),
 f AS (SELECT x.ord, x.err, x.perm, m.* FROM x CROSS JOIN LATERAL (
         SELECT j.id
           FROM shardq.jobs j
          WHERE j.id = x.id AND j.attempt = x.att AND j.worker = $3
            AND j.status::text IN ('starting', 'running')
            AND (SELECT ps.state FROM shardq.partition_state ps
                  WHERE ps.partition = j.partition) = 'owned'
            FOR UPDATE) m),
 u AS (UPDATE shardq.jobs j SET
  status = (CASE WHEN (f.perm OR (j.attempt - j.attempt_base) >= j.max_attempts)
                  AND j.rerun_params IS NULL THEN 'failed'
                 ELSE 'ready' END)::shardq.job_status,
  params = CASE WHEN (f.perm OR (j.attempt - j.attempt_base) >= j.max_attempts)
                 AND j.rerun_params IS NOT NULL THEN j.rerun_params
                ELSE j.params END,
  rerun_params = CASE WHEN (f.perm OR (j.attempt - j.attempt_base) >= j.max_attempts)
                      THEN NULL ELSE j.rerun_params END,
  attempt_base = CASE WHEN (f.perm OR (j.attempt - j.attempt_base) >= j.max_attempts)
                       AND j.rerun_params IS NOT NULL THEN j.attempt
                      ELSE j.attempt_base END,
  schedule_time = CASE WHEN (f.perm OR (j.attempt - j.attempt_base) >= j.max_attempts)
    THEN now() ELSE now() + interval '1 millisecond' *
    (LEAST(COALESCE(($7::bigint[])[array_position($4::text[], j.task)], 3600000),
      CASE COALESCE(($5::int[])[array_position($4::text[], j.task)], 2)
        WHEN 0 THEN COALESCE(($6::bigint[])[array_position($4::text[], j.task)], 1000)::float8
        WHEN 1 THEN COALESCE(($6::bigint[])[array_position($4::text[], j.task)], 1000)::float8
                    * (j.attempt - j.attempt_base)
        ELSE COALESCE(($6::bigint[])[array_position($4::text[], j.task)], 1000)::float8
             * power(2, LEAST(GREATEST((j.attempt - j.attempt_base) - 1, 0), 60)) END)
     * (1 + COALESCE(($8::float8[])[array_position($4::text[], j.task)], 0)
            * (2 * random() - 1))) END,
  delay_tolerance_time = NULL,
  worker = CASE WHEN (f.perm OR (j.attempt - j.attempt_base) >= j.max_attempts)
                 AND j.rerun_params IS NULL THEN j.worker END,
  expected_status_change_time = NULL,
  last_error = f.err, updated_at = now()
  FROM f WHERE j.id = ANY (ARRAY(SELECT f.id FROM f)) AND j.id = f.id)
SELECT f.ord FROM f

-- name: fenced_release
-- starting -> ready, and the try does not count: the base moves up.
-- $1..$3 only. Returns the ords written.
WITH x AS (SELECT * FROM unnest($1::bigint[], $2::int[]) WITH ORDINALITY AS x(id, att, ord)),
 f AS (SELECT x.ord, m.* FROM x CROSS JOIN LATERAL (
         SELECT j.id
           FROM shardq.jobs j
          WHERE j.id = x.id AND j.attempt = x.att AND j.worker = $3
            AND j.status::text = 'starting'
            AND (SELECT ps.state FROM shardq.partition_state ps
                  WHERE ps.partition = j.partition) = 'owned'
            FOR UPDATE) m),
 u AS (UPDATE shardq.jobs j SET status = 'ready', attempt_base = j.attempt_base + 1,
         worker = NULL, expected_status_change_time = NULL, updated_at = now()
        WHERE j.id = ANY (ARRAY(SELECT f.id FROM f)))
SELECT f.ord FROM f

-- name: fenced_unclaim
-- The release of a claim whose answer never reached a handler, also when
-- it was claimed straight to `running` (sq_unclaim). $1..$3 only. Returns
-- the ords written.
WITH x AS (SELECT * FROM unnest($1::bigint[], $2::int[]) WITH ORDINALITY AS x(id, att, ord)),
 f AS (SELECT x.ord, m.* FROM x CROSS JOIN LATERAL (
         SELECT j.id
           FROM shardq.jobs j
          WHERE j.id = x.id AND j.attempt = x.att AND j.worker = $3
            AND j.status::text IN ('starting', 'running')
            AND (SELECT ps.state FROM shardq.partition_state ps
                  WHERE ps.partition = j.partition) = 'owned'
            FOR UPDATE) m),
 u AS (UPDATE shardq.jobs j SET status = 'ready', attempt_base = j.attempt_base + 1,
         worker = NULL, expected_status_change_time = NULL, updated_at = now()
        WHERE j.id = ANY (ARRAY(SELECT f.id FROM f)))
SELECT f.ord FROM f

-- name: not_owned
-- The partitions of a batch that this shard does not own (moving, gone, or
-- unknown here), in the same transaction as the write, after the gate. It
-- runs in the plan made once per session whatever the batch: a probe of
-- partition_state's key per partition, which a plan per call would cost
-- four times over.
-- $1 int[]    the batch's partitions
-- Returns (partition, its state or 'missing').
-- Index: partition_state_pkey per partition.
SELECT p, coalesce(ps.state::text, 'missing') FROM unnest($1::int[]) AS p
  LEFT JOIN shardq.partition_state ps ON ps.partition = p
 WHERE ps.state IS DISTINCT FROM 'owned'

-- name: complete_lock_rerun
-- Fragment: the first steps of both completions. The refs' rows are found
-- and locked ref by ref (a probe of jobs_pkey each, fenced by attempt and
-- worker, in an owned partition), and the ones with a rerun pending are
-- made ready again with the rerun's params; the others are left to the
-- completion's delete (its CTE `f`, column `rerun`).
WITH x AS (SELECT * FROM unnest($1::bigint[], $2::int[]) WITH ORDINALITY AS x(id, att, ord)),
 f AS (SELECT x.ord, m.* FROM x CROSS JOIN LATERAL (
         SELECT j.id, j.rerun_params IS NOT NULL AS rerun
           FROM shardq.jobs j
          WHERE j.id = x.id AND j.attempt = x.att AND j.worker = $3
            AND j.status::text IN ('starting', 'running')
            AND (SELECT ps.state FROM shardq.partition_state ps
                  WHERE ps.partition = j.partition) = 'owned'
            FOR UPDATE) m),
 rr AS (UPDATE shardq.jobs j SET status = 'ready', params = j.rerun_params,
          rerun_params = NULL, attempt_base = j.attempt, worker = NULL,
          expected_status_change_time = NULL, schedule_time = now(),
          delay_tolerance_time = now() + (j.delay_tolerance_time - j.schedule_time),
          updated_at = now()
         WHERE j.id = ANY (ARRAY(SELECT f.id FROM f WHERE f.rerun))),
