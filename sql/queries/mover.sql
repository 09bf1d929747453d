-- mover.sql: the steps of an online partition move (src/mover.c; design
-- section 6): plan, prepare, freeze, drain, copy and take ownership,
-- switch, clean up, and abort. They run on the mover's own plain
-- connections, one at a time, mostly in explicit transactions the C code
-- opens and commits. Every step is recorded in shardq_meta.moves.
--
-- The move's partitions are $1, an int[] (the C code's literal of its own
-- integers), and the move's id $2 where a shard statement needs it.
--
-- A partition's jobs are read in two arms: jobs_partition leaves out the
-- jobs in flight (shard schema 6: a claim then adds one index entry
-- fewer), so those are found through jobs_lease, whose predicate is
-- theirs; the two arms together are every job. Each arm repeats its
-- index's predicate so that the planner can use it.

-- name: move_record_step
-- The move's step. $1 bigint move id, $2 text the step.
-- Index: moves_pkey.
UPDATE shardq_meta.moves SET step = $2, updated_at = now() WHERE move_id = $1

-- name: move_record_frozen
-- The step `frozen` and the write stall the freeze caused.
-- $1 bigint move id, $2 text the step, $3 float8 the stall in ms.
UPDATE shardq_meta.moves SET step = $2, updated_at = now(), stall_ms = $3 WHERE move_id = $1

-- name: move_record_copied
-- The step `copied` and the rows the destination took.
-- $1 bigint move id, $2 text the step, $3 bigint the rows.
UPDATE shardq_meta.moves SET step = $2, updated_at = now(), rows_copied = $3 WHERE move_id = $1

-- name: move_record_error
-- The error that stopped the move (kept until it is resumed and done).
-- $1 bigint move id, $2 text the message.
UPDATE shardq_meta.moves SET error = left($2, 1000), updated_at = now() WHERE move_id = $1

-- name: move_load
-- A move's row. $1 bigint move id.
SELECT array_to_string(partitions, ','), from_shard, to_shard, step,
       coalesce(rows_copied, -1), coalesce(stall_ms, 0)
  FROM shardq_meta.moves WHERE move_id = $1

-- name: move_lock
-- One driver per move: a session advisory lock (1397837138, move id; see
-- SQ_MOVE_KEY in src/schema.h) on the mover's meta connection, held until
-- the connection closes. $1 int move id. Returns whether it was taken.
SELECT pg_try_advisory_lock(1397837138, $1::int)

-- name: move_lock_end_own
-- A mover that lost its meta connection (the meta database away) and
-- takes its move's lock again: the session that still holds the lock, when
-- it is the mover's own from before ($2, its backend pid; a connection
-- that died unseen, which the server ends only much later), is ended, so
-- that the next try takes the lock. Another mover's session is left alone.
-- $1 int move id, $2 int the pid. Returns whether one was ended.
SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM pg_locks
 WHERE locktype = 'advisory' AND classid = 1397837138 AND objid = $1::int
   AND objsubid = 2 AND granted AND pid = $2::int

-- name: move_plan_on_source
-- How many of the partitions the map places on the source.
-- $1 int[] partitions, $2 text the source shard.
SELECT count(*) FROM shardq_meta.partition_map
 WHERE partition = ANY($1::int[]) AND shard_id = $2

-- name: move_plan_insert
-- A new move. $1 int[] partitions, $2 text source, $3 text destination.
-- Returns its id.
INSERT INTO shardq_meta.moves (partitions, from_shard, to_shard, step)
VALUES ($1::int[], $2, $3, 'planned') RETURNING move_id

-- name: move_plan_lock_parts
-- The partitions locked to the move; one already locked to another is not
-- returned. $1 int[] partitions, $2 bigint move id.
INSERT INTO shardq_meta.move_lock (partition, move_id)
SELECT p, $2 FROM unnest($1::int[]) p ON CONFLICT (partition) DO NOTHING
RETURNING partition

-- name: move_prepare_owned
-- On the destination, its rows of the partitions locked: how many it
-- already owns (or is moving out). $1 int[] partitions.
SELECT count(*) FILTER (WHERE state::text IN ('owned', 'moving_out', 'adopted'))
  FROM (SELECT state FROM shardq.partition_state
         WHERE partition = ANY($1::int[]) FOR UPDATE) x

-- name: move_delete_jobs
-- Every job of the partitions (on the destination: what an aborted
-- attempt left). $1 int[] partitions.
-- Indexes: jobs_partition and jobs_lease.
DELETE FROM shardq.jobs WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM
{{partition_jobs_ctid}}))

-- name: move_prepare_importing
-- The destination marks the partitions importing for this move.
-- $1 int[] partitions, $2 bigint move id.
INSERT INTO shardq.partition_state (partition, state, move_id)
SELECT p, 'importing', $2 FROM unnest($1::int[]) p
ON CONFLICT (partition) DO UPDATE SET state = 'importing', move_id = $2,
  epoch = shardq.partition_state.epoch + 1, updated_at = now()

-- name: move_gate_exclusive
-- The partition gate (1397837137, 1; SQ_GATE_KEY in src/schema.h),
-- exclusive: waits for every write in flight on the shard (they hold it
-- shared) and holds new ones until the transaction ends. Once it is held,
-- the rest of the transaction waits for a lock at most $1 (ms): the
-- gate's own try may wait much less (src/mover.c, gate_exclusive), and the
-- freeze's update may wait a moment for a lock on partition_state (an
-- autovacuum truncating it). The target list is evaluated in order.
SELECT pg_advisory_xact_lock(1397837137, 1), set_config('lock_timeout', $1, true)

-- name: move_freeze
-- On the source, under the exclusive gate: the partitions are marked
-- moving_out (writers hear "moving") if it owns every one of them, or
-- froze them for this move already (a resumed move); else nothing is
-- changed. One statement, so that the writers held behind the gate wait
-- for one round trip less. Returns how many it owns or froze for this
-- move. $1 int[] partitions, $2 bigint move id, $3 int their count.
WITH chk AS (
  SELECT count(*) FILTER (WHERE state = 'owned' OR (state = 'moving_out' AND move_id = $2::bigint)) AS ok
    FROM shardq.partition_state WHERE partition = ANY($1::int[])
), upd AS (
  UPDATE shardq.partition_state SET state = 'moving_out', move_id = $2,
         epoch = epoch + 1, updated_at = now()
   WHERE partition = ANY($1::int[]) AND state = 'owned'
     AND (SELECT chk.ok FROM chk) = $3::int
  RETURNING 1
)
SELECT (SELECT chk.ok FROM chk), (SELECT count(*) FROM upd)

-- name: move_copied_before
-- On the destination: how many of the partitions this move has adopted (or
-- owns) already (a mover killed after the copy's commit, before recording
-- it). $1 int[] partitions, $2 bigint move id.
SELECT count(*) FROM shardq.partition_state WHERE partition = ANY($1::int[])
   AND state::text IN ('adopted', 'owned') AND move_id = $2::bigint

-- name: move_count_jobs
-- How many jobs the partitions hold. $1 int[] partitions.
-- Indexes: jobs_partition and jobs_lease.
SELECT count(*) FROM
  (SELECT 1 FROM shardq.jobs WHERE partition = ANY($1::int[])
      AND status <> 'starting' AND status <> 'running'
   UNION ALL SELECT 1 FROM shardq.jobs WHERE partition = ANY($1::int[])
      AND status IN ('starting', 'running')) pj

-- name: move_copy_importing
-- On the destination, the partitions locked: how many it imports for this
-- move. $1 int[] partitions, $2 bigint move id.
SELECT count(*) FROM (SELECT 1 FROM shardq.partition_state
                       WHERE partition = ANY($1::int[]) AND state = 'importing'
                         AND move_id = $2::bigint FOR UPDATE) x

-- name: move_copy_in
-- The destination's end of the copy, every column of shardq.jobs in the
-- order of move_copy_out.
COPY shardq.jobs (id, partition, task, status, priority, schedule_time, delay_tolerance_time,
  expected_status_change_time, attempt, max_attempts, worker, active_uid,
  dedup_policy, params, rerun_params, last_error, created_at, updated_at, attempt_base)
FROM STDIN (FORMAT binary)

-- name: move_copy_out
-- The source's end of the copy. COPY takes no parameters: the C code puts
-- the partitions' int[] literal (its own integers) in place of $1.
-- Indexes: jobs_partition and jobs_lease.
COPY (SELECT id, partition, task, status, priority, schedule_time, delay_tolerance_time,
        expected_status_change_time, attempt, max_attempts, worker, active_uid,
        dedup_policy, params, rerun_params, last_error, created_at, updated_at, attempt_base
  FROM
  (SELECT id, partition, task, status, priority, schedule_time, delay_tolerance_time,
          expected_status_change_time, attempt, max_attempts, worker, active_uid,
          dedup_policy, params, rerun_params, last_error, created_at, updated_at, attempt_base
     FROM shardq.jobs WHERE partition = ANY($1::int[])
      AND status <> 'starting' AND status <> 'running'
   UNION ALL
   SELECT id, partition, task, status, priority, schedule_time, delay_tolerance_time,
          expected_status_change_time, attempt, max_attempts, worker, active_uid,
          dedup_policy, params, rerun_params, last_error, created_at, updated_at, attempt_base
     FROM shardq.jobs WHERE partition = ANY($1::int[])
      AND status IN ('starting', 'running')) pj) TO STDOUT (FORMAT binary)

-- name: move_row_versions
-- The partitions' jobs as (id, version): the version is the row's xmin,
-- which every write to the row changes (an UPDATE makes a new row version
-- in the writer's transaction). On the source, read at the pre-copy's
-- snapshot and again under the freeze: the rows whose version differs are
-- the ones written meanwhile. $1 int[] partitions.
-- Indexes: jobs_partition and jobs_lease.
SELECT id, xmin::text FROM shardq.jobs WHERE partition = ANY($1::int[])
   AND status <> 'starting' AND status <> 'running'
UNION ALL
SELECT id, xmin::text FROM shardq.jobs WHERE partition = ANY($1::int[])
   AND status IN ('starting', 'running')

-- name: move_copy_out_ids
-- The source's end of the catch-up copy: only the jobs written since the
-- pre-copy. As move_copy_out, the C code puts the partitions' literal in
-- place of $1 and the ids' (int8[], its own integers) in place of $2.
-- Index: jobs_pkey.
COPY (SELECT id, partition, task, status, priority, schedule_time, delay_tolerance_time,
        expected_status_change_time, attempt, max_attempts, worker, active_uid,
        dedup_policy, params, rerun_params, last_error, created_at, updated_at, attempt_base
   FROM shardq.jobs WHERE id = ANY($2::bigint[]) AND partition = ANY($1::int[]))
  TO STDOUT (FORMAT binary)

-- name: move_precopy_xid
-- On the destination, in the pre-copy's transaction: its xid as an xmin
-- reads (32 bits), the version of every row it wrote.
SELECT (pg_current_xact_id()::text::bigint % 4294967296)::text

-- name: move_delete_ids
-- On the destination, in the copy's transaction: the pre-copied rows that
-- changed on the source since ($2, their ids). $1 int[] partitions.
-- Index: jobs_pkey.
DELETE FROM shardq.jobs WHERE id = ANY($2::bigint[]) AND partition = ANY($1::int[])

-- name: move_delete_not_precopied
-- On the destination, in the copy's transaction: any row of the partitions
-- that is not the version the pre-copy wrote ($2: its xid as an xmin), so
-- that nothing written there since stays. $1 int[] partitions.
-- Indexes: jobs_partition and jobs_lease.
DELETE FROM shardq.jobs WHERE ctid = ANY(ARRAY(
  SELECT j.ctid FROM shardq.jobs j WHERE j.partition = ANY($1::int[])
     AND j.status <> 'starting' AND j.status <> 'running' AND j.xmin::text <> $2
  UNION ALL
  SELECT j.ctid FROM shardq.jobs j WHERE j.partition = ANY($1::int[])
     AND j.status IN ('starting', 'running') AND j.xmin::text <> $2))

-- name: move_ids_held
-- On the destination: the ids of the partitions' jobs it holds.
-- $1 int[] partitions. Indexes: jobs_partition and jobs_lease.
SELECT id FROM shardq.jobs WHERE partition = ANY($1::int[])
   AND status <> 'starting' AND status <> 'running'
UNION ALL
SELECT id FROM shardq.jobs WHERE partition = ANY($1::int[])
   AND status IN ('starting', 'running')

-- name: move_own
-- The destination adopts the partitions; its commit is the move's point
-- of no return. They are owned once the map has switched to it
-- (move_take_adopted): until then every client routes their writes to the
-- source, which refuses them, so a job claimed here meanwhile could not
-- finish, and its lease would run out here while it waited (shard schema
-- 11). $1 int[] partitions, $2 bigint move id.
UPDATE shardq.partition_state SET state = 'adopted', epoch = epoch + 1, updated_at = now()
 WHERE partition = ANY($1::int[]) AND move_id = $2

-- name: move_take_adopted
-- On the destination, once the map has switched to it: the move's adopted
-- partitions are owned (claims take their jobs from now on), and the jobs
-- in flight there get 10 s of lease at least: their workers' writes waited
-- on the source's freeze, and reach this shard once the client has heard
-- of the switch (NOTIFY, or its map poll, 1 s) and sent them again (every
-- 0.5 s at most, docs/worker.md). A second run changes nothing.
-- $1 int[] partitions, $2 bigint move id. Index: jobs_lease.
WITH own AS (
  UPDATE shardq.partition_state SET state = 'owned', epoch = epoch + 1, updated_at = now()
   WHERE partition = ANY($1::int[]) AND move_id = $2::bigint AND state::text = 'adopted'
  RETURNING partition)
UPDATE shardq.jobs SET expected_status_change_time =
       greatest(expected_status_change_time, now() + interval '10 seconds')
 WHERE partition = ANY(ARRAY(SELECT o.partition FROM own o))
   AND status IN ('starting', 'running')

-- name: move_notify_jobs
-- On the destination, in the copy's transaction: wakes the workers that
-- LISTEN there once it commits, so that the set's ready jobs, which no
-- claim could take since the freeze, are claimed at once, not at each
-- worker's next poll of a shard it may have found empty. A payload with no
-- type list wakes every listener (src/listener.c, wake_is_ours).
SELECT pg_notify('shardq_jobs', 'moved-in')

-- name: move_switch_map
-- The meta map follows. $1 int[] partitions, $2 text the destination.
UPDATE shardq_meta.partition_map SET shard_id = $2 WHERE partition = ANY($1::int[])

-- name: move_bump_map_version
-- A new map version, which clients poll. Returns it.
UPDATE shardq_meta.cluster SET map_version = map_version + 1 RETURNING map_version

-- name: move_notify_map
-- Tells the clients that LISTEN of the new map. $1 text its version.
SELECT pg_notify('shardq_map', $1)

-- name: move_record_switched
-- $1 bigint move id.
UPDATE shardq_meta.moves SET step = 'switched', switched_at = now(), updated_at = now()
 WHERE move_id = $1

-- name: move_gone
-- The source marks the partitions gone (writers hear "moved").
-- $1 int[] partitions, $2 bigint move id.
UPDATE shardq.partition_state SET state = 'gone', epoch = epoch + 1, updated_at = now()
 WHERE partition = ANY($1::int[]) AND move_id = $2 AND state = 'moving_out'

-- name: move_gone_count
-- How many of the partitions the source shows gone for this very move:
-- rows are deleted only then, never rows of partitions it still owns.
-- $1 int[] partitions, $2 bigint move id.
SELECT count(*) FROM shardq.partition_state WHERE partition = ANY($1::int[])
   AND state = 'gone' AND move_id = $2::bigint

-- name: move_delete_jobs_batch
-- At most $2 jobs of the partitions, deleted on the source in batches so
-- that no one statement runs long. $1 int[] partitions, $2 int the batch.
-- Indexes: jobs_partition and jobs_lease.
DELETE FROM shardq.jobs WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM
{{partition_jobs_ctid}} LIMIT $2::int))

-- name: move_record_done
-- $1 bigint move id.
UPDATE shardq_meta.moves SET step = 'done', finished_at = now(), error = NULL,
       updated_at = now()
 WHERE move_id = $1

-- name: move_unlock
-- The move's partitions are free for another move. $1 bigint move id.
DELETE FROM shardq_meta.move_lock WHERE move_id = $1

-- name: move_forget_gone
-- The source forgets the partitions once the move is done: to a writer a
-- partition it does not know is "moved", as a gone one is, and a shard
-- whose partitions are all owned has the claim's test of them once per
-- statement instead of once per row (claim.sql, claim_body).
-- $1 int[] partitions, $2 bigint move id.
DELETE FROM shardq.partition_state WHERE partition = ANY($1::int[])
   AND state = 'gone' AND move_id = $2::bigint

-- name: move_check_locks
-- How many of the partitions an unfinished move holds, and the first such
-- move. $1 int[] partitions.
SELECT count(*), min(move_id) FROM shardq_meta.move_lock WHERE partition = ANY($1::int[])

-- name: move_check_dst_owned
-- How many of the partitions the destination owns or moves out already.
-- $1 int[] partitions.
SELECT count(*) FROM shardq.partition_state WHERE partition = ANY($1::int[])
   AND state::text IN ('owned', 'moving_out', 'adopted')

-- name: move_abort_owned
-- On the destination, the partitions locked: how many this move owns (its
-- copy committed: it cannot be aborted). $1 int[] partitions, $2 bigint
-- move id.
SELECT count(*) FILTER (WHERE state::text IN ('adopted', 'owned') AND move_id = $2::bigint)
  FROM (SELECT state, move_id FROM shardq.partition_state
         WHERE partition = ANY($1::int[]) FOR UPDATE) x

-- name: move_abort_delete_jobs
-- The destination's jobs of the partitions it imports for this move.
-- $1 int[] partitions, $2 bigint move id.
DELETE FROM shardq.jobs WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM
{{partition_jobs_ctid}}
   WHERE EXISTS (SELECT 1 FROM shardq.partition_state ps
                  WHERE ps.partition = pj.partition
                    AND ps.state = 'importing' AND ps.move_id = $2)))

-- name: move_abort_forget
-- The destination forgets the partitions it imported for this move.
-- $1 int[] partitions, $2 bigint move id.
DELETE FROM shardq.partition_state WHERE partition = ANY($1::int[])
   AND state = 'importing' AND move_id = $2

-- name: move_abort_restore
-- The source owns the partitions it froze for this move again, and the
-- leases of their jobs in flight move on by the time the freeze held
-- those jobs' writes, 10 s at least (move_take_adopted says why). Once
-- restored, a second
-- run changes nothing. $1 int[] partitions, $2 bigint move id.
WITH frozen AS (
  SELECT partition, updated_at FROM shardq.partition_state
   WHERE partition = ANY($1::int[]) AND move_id = $2 AND state = 'moving_out'
     FOR UPDATE
), back AS (
  UPDATE shardq.partition_state ps SET state = 'owned', epoch = ps.epoch + 1,
         updated_at = now()
    FROM frozen f WHERE ps.partition = f.partition
  RETURNING ps.partition, f.updated_at AS frozen_at
)
UPDATE shardq.jobs SET expected_status_change_time = greatest(expected_status_change_time
       + (now() - (SELECT min(b.frozen_at) FROM back b)), now() + interval '10 seconds')
 WHERE partition = ANY(ARRAY(SELECT b.partition FROM back b))
   AND status IN ('starting', 'running')

-- name: move_record_aborted
-- $1 bigint move id.
UPDATE shardq_meta.moves SET step = 'aborted', finished_at = now(), updated_at = now()
 WHERE move_id = $1

-- name: moves_list_all
-- Every move, with its elapsed time in ms.
SELECT move_id, from_shard, to_shard, cardinality(partitions), step,
       coalesce(rows_copied, -1), coalesce(stall_ms, 0),
       extract(epoch from coalesce(finished_at, now()) - started_at) * 1000,
       coalesce(error, '')
  FROM shardq_meta.moves ORDER BY move_id

-- name: moves_list_open
-- The unfinished moves, with their elapsed time in ms.
SELECT move_id, from_shard, to_shard, cardinality(partitions), step,
       coalesce(rows_copied, -1), coalesce(stall_ms, 0),
       extract(epoch from now() - started_at) * 1000, coalesce(error, '')
  FROM shardq_meta.moves WHERE finished_at IS NULL ORDER BY move_id

-- name: partition_jobs_ctid
-- Fragment: the partitions' ($1) jobs as (ctid, partition), in the two arms
-- this file's header describes; for the deletes.
    (SELECT ctid, partition FROM shardq.jobs WHERE partition = ANY($1::int[])
        AND status <> 'starting' AND status <> 'running'
     UNION ALL SELECT ctid, partition FROM shardq.jobs WHERE partition = ANY($1::int[])
        AND status IN ('starting', 'running')) pj
