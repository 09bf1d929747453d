-- client.sql: what every client's pipeline puts around its statements on a
-- shard (src/client.c), and the client's own questions to the meta
-- database and the shards.

-- name: gate_shared
-- The partition gate (1397837137, 1; SQ_GATE_KEY in src/schema.h), taken
-- shared for the transaction by every write that names partitions, in a
-- statement of its own before it checks the partitions' state: the
-- statement after it takes its snapshot with the gate held, and the mover
-- takes it exclusive to change that state.
SELECT pg_advisory_xact_lock_shared(1397837137, 1)

-- name: check_owned
-- Fails the transaction (SQLSTATEs the client reads as "moving" or
-- "moved") unless this shard owns every partition given.
-- $1 int[]    the partitions
-- Index: partition_state_pkey per partition (in shardq.check_owned).
SELECT shardq.check_owned($1::int[])

-- name: plans_generic
-- The rest of the transaction runs its prepared statements in the plan made
-- once per session (why: SQ_GENERIC_PLAN_ROWS in src/client.h).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true)

-- name: plans_auto
-- The rest of the transaction plans as PostgreSQL chooses.
SELECT set_config('plan_cache_mode', 'auto', true)

-- name: partition_map
-- The whole map, from the meta database, in partition order.
SELECT m.partition, m.shard_id FROM shardq_meta.partition_map m ORDER BY m.partition

-- name: partition_map_since
-- The partitions the map moved after version $1 (meta schema 4), as
-- partition_map, with the version that moved each: the versions commit in
-- order (the trigger locks the cluster row), so every version up to the
-- highest one here is in this answer. Index: partition_map_version.
SELECT m.partition, m.shard_id, m.version FROM shardq_meta.partition_map m
 WHERE m.version > $1::bigint

-- name: map_head
-- The cluster row and the meta schema's version (the map's rows carry
-- versions from version 4 on), and the paused types (map_poll).
SELECT c.partitions, c.map_version, c.cluster_id,
       (SELECT coalesce(max(v.version), 0) FROM shardq_meta.schema_version v),
       to_jsonb(c) -> 'paused_types'
  FROM shardq_meta.cluster c

-- name: map_poll
-- What a client asks every map_poll: the map's version and the types
-- paused fleet-wide, as a JSON array of strings (NULL before meta schema 5,
-- whose column it is: to_jsonb reads the row whatever its columns).
SELECT c.map_version, to_jsonb(c) -> 'paused_types' FROM shardq_meta.cluster c

-- name: type_pause
-- Pauses ($2 true) or resumes type $1 fleet-wide; returns the paused types
-- (meta schema 5). The NOTIFY (on commit) makes the listening clients poll
-- at once instead of at their next map_poll; a client of the previous
-- release takes it for a map change and reads the map's head.
WITH u AS (
  UPDATE shardq_meta.cluster c SET paused_types = CASE WHEN $2::boolean
      THEN (SELECT array_agg(DISTINCT x ORDER BY x) FROM unnest(c.paused_types || $1::text) x)
      ELSE array_remove(c.paused_types, $1::text) END
  RETURNING to_jsonb(c) -> 'paused_types' AS paused)
SELECT u.paused, pg_notify('shardq_map', 'paused') FROM u

-- name: shard_schema_version
-- The shard's schema version (0: none applied).
SELECT coalesce(max(version), 0) FROM shardq.schema_version

-- name: id_blocks
-- $1 blocks of job ids from the meta database's sequence; the client uses
-- them as one range when they come out consecutive.
-- $1 int      how many blocks
SELECT nextval('shardq_meta.id_block') FROM generate_series(1, $1::int)
