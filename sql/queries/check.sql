-- check.sql: `shardq check` (src/check.c), the read-only consistency check
-- of the cluster's own invariants, and the few repairs it may make. Every
-- statement on shardq.jobs finds its rows by key or reads an index in
-- order; the rest read the small tables (markers, map, moves) whole.

-- name: check_meta_head
-- The cluster row, the meta schema version and the id sequence.
SELECT c.cluster_id, c.partitions,
       (SELECT coalesce(max(v.version), 0) FROM shardq_meta.schema_version v),
       s.last_value, s.is_called
  FROM shardq_meta.cluster c, shardq_meta.id_block s

-- name: check_meta_map
-- The whole map, partition by partition.
SELECT partition, shard_id FROM shardq_meta.partition_map ORDER BY partition

-- name: check_meta_moves_open
-- The unfinished moves and the partitions each holds (move_lock).
SELECT m.move_id, m.from_shard, m.to_shard, m.step, l.partition
  FROM shardq_meta.moves m JOIN shardq_meta.move_lock l USING (move_id)
 WHERE m.finished_at IS NULL

-- name: check_meta_locks_stale
-- Partition locks whose move is finished (or gone): nothing to hold.
SELECT l.partition, l.move_id, coalesce(m.step, '(no such move)')
  FROM shardq_meta.move_lock l LEFT JOIN shardq_meta.moves m USING (move_id)
 WHERE m.finished_at IS NOT NULL OR m.move_id IS NULL
 ORDER BY l.partition

-- name: check_meta_unlock_stale
-- Drops the stale locks of check_meta_locks_stale. $1 int[] partitions.
DELETE FROM shardq_meta.move_lock l
 WHERE l.partition = ANY($1::int[])
   AND NOT EXISTS (SELECT 1 FROM shardq_meta.moves m
                    WHERE m.move_id = l.move_id AND m.finished_at IS NULL)

-- name: check_meta_last_move
-- The latest move of partition $1: from, to, step (no row: never moved).
SELECT from_shard, to_shard, step FROM shardq_meta.moves
 WHERE $1::int = ANY(partitions) ORDER BY move_id DESC LIMIT 1

-- name: check_meta_map_set
-- The map names the shard that owns the partitions. $1 int[] partitions,
-- $2 text shard. The version bump and NOTIFY follow (mover.sql).
UPDATE shardq_meta.partition_map SET shard_id = $2 WHERE partition = ANY($1::int[])

-- name: check_meta_lock_ids
-- Holds back every nextval of the id sequence until the transaction ends
-- (ALTER SEQUENCE takes a lock that nextval's conflicts with), so that its
-- value is read and raised with no block given out in between.
ALTER SEQUENCE shardq_meta.id_block INCREMENT BY 1

-- name: check_meta_raise_ids
-- Under check_meta_lock_ids: the sequence gives blocks after $1 only.
SELECT setval('shardq_meta.id_block', $1::bigint, true)
 WHERE (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END
          FROM shardq_meta.id_block) < $1::bigint

-- name: check_shard_head
-- Who the shard is, its schema version, and its highest job ids (live and
-- finished: each the end of an index).
SELECT n.shard_id, n.cluster_id, n.partitions,
       (SELECT coalesce(max(v.version), 0) FROM shardq.schema_version v),
       (SELECT coalesce(max(id), 0) FROM shardq.jobs),
       (SELECT coalesce(max(id), 0) FROM shardq.jobs_history)
  FROM shardq.node n

-- name: check_shard_markers
-- Every partition marker of the shard.
SELECT partition, state::text, coalesce(move_id, 0) FROM shardq.partition_state

-- name: check_shard_stray_counts
-- How many jobs the shard holds in each of the partitions $1 (int[]),
-- which it does not own: a probe of jobs_partition per partition and one
-- read of jobs_lease (the jobs in flight).
SELECT pj.partition, count(*) FROM
{{partition_jobs_ctid}}
 GROUP BY pj.partition

-- name: check_shard_stray_jobs
-- At most $2 of the shard's jobs in the partitions $1 (int[]): id,
-- partition, type, key (NULL: none).
SELECT j.id, j.partition, j.task, j.active_uid FROM shardq.jobs j
 WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM
{{partition_jobs_ctid}} LIMIT $2::int))

-- name: check_shard_have_ids
-- Which of the ids $1 (bigint[]) the shard holds, live or finished.
SELECT j.id FROM shardq.jobs j WHERE j.id = ANY($1::bigint[])
UNION SELECT h.id FROM shardq.jobs_history h WHERE h.id = ANY($1::bigint[])

-- name: check_shard_live_keys
-- The live jobs of the (type, key) pairs $1 text[], $2 text[]: type, key,
-- id. Index: jobs_active_uid.
SELECT j.task, j.active_uid, j.id
  FROM unnest($1::text[], $2::text[]) AS k(task, uid)
  JOIN LATERAL (SELECT j.task, j.active_uid, j.id FROM shardq.jobs j
                 WHERE j.task = k.task AND j.active_uid = k.uid
                   AND j.status IN ('ready', 'starting', 'running')) j ON true

-- name: check_shard_delete_copies
-- Deletes the shard's jobs $1 (bigint[]) of partitions it does not own
-- (a marker that says so, or none): copies the owner also holds.
DELETE FROM shardq.jobs j WHERE j.id = ANY($1::bigint[])
   AND coalesce((SELECT ps.state::text FROM shardq.partition_state ps
                  WHERE ps.partition = j.partition), 'none')
       NOT IN ('owned', 'moving_out', 'importing', 'adopted')

-- name: check_shard_unfreeze
-- A partition frozen by a move no longer recorded as open, and owned by no
-- other shard, is owned here again (as an abort leaves it). $1 int.
UPDATE shardq.partition_state SET state = 'owned', epoch = epoch + 1, updated_at = now()
 WHERE partition = $1::int AND state = 'moving_out'

-- name: check_shard_gate
-- The partition gate (mover.sql, move_gate_exclusive) held exclusive until
-- the transaction ends: a write in flight finishes first, and later ones
-- see what the transaction changed. The change comes in a later statement,
-- whose snapshot is taken after the wait.
SELECT pg_advisory_xact_lock(1397837137, 1)

-- name: check_shard_forget
-- After check_shard_gate: a marker a move left, or an owned one that a
-- restored backup brought back after the partition moved away, goes, and
-- then the shard's rows of the partition (jobs_partition and jobs_lease).
-- $1 int[] partitions, $2 text the state the marker must still have.
WITH gone AS (
  DELETE FROM shardq.partition_state WHERE partition = ANY($1::int[]) AND state::text = $2
  RETURNING partition)
DELETE FROM shardq.jobs WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM
{{partition_jobs_ctid}}))
   AND partition IN (SELECT partition FROM gone)

-- name: check_shard_adopt
-- A partition no shard owns or marks, which the map puts here: owned here
-- (with whatever rows the shard holds of it). $1 int.
INSERT INTO shardq.partition_state (partition, state) VALUES ($1::int, 'owned')
ON CONFLICT (partition) DO NOTHING

-- name: check_meta_notify_map
-- In the repair's transaction: tells the clients that LISTEN of the new
-- map version (sent at its commit).
SELECT pg_notify('shardq_map', map_version::text) FROM shardq_meta.cluster
