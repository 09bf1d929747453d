-- maintain.sql: history retention on one shard (src/maintain.c): the daily
-- partitions of shardq.jobs_history made ahead and dropped once their day
-- has ended, and the default partition's expired rows deleted. The
-- partitions and their functions are in sql/shard/004_history_partitions.sql.

-- name: maintain_lock
-- One runner per shard: a session advisory lock (1397837137, 3;
-- SQ_MAINTAIN_KEY in src/schema.h), held until the connection closes.
-- Returns whether it was taken.
SELECT pg_try_advisory_lock(1397837137, 3)

-- name: history_partitions
-- The day partitions, their bounds as epoch seconds ('' for none) and
-- their estimated rows, in the order of their upper bounds.
SELECT name, coalesce(floor(extract(epoch from lo))::bigint::text, ''),
       coalesce(floor(extract(epoch from hi))::bigint::text, ''), est_rows
  FROM shardq.history_partitions() WHERE NOT is_default ORDER BY hi

-- name: history_add_day
-- Makes the partition of a day, moving its rows out of the default
-- partition. $1 date the day. Returns the rows moved (-1: it exists).
SELECT shardq.history_add_day($1::date)

-- name: history_delete_expired_default
-- Deletes at most $2 expired rows of the default partition (in batches, so
-- that no one statement runs long). $1 float8 now in microseconds since
-- the epoch, $2 bigint the batch. Returns how many it deleted.
WITH d AS (DELETE FROM shardq.jobs_history_default WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM shardq.jobs_history_default
   WHERE expires_at <= to_timestamp($1::float8 / 1e6) LIMIT $2::bigint))
  RETURNING 1)
SELECT count(*) FROM d

-- name: history_count_default
-- The rows of the default partition, counted up to $1 bigint.
SELECT count(*) FROM (SELECT 1 FROM shardq.jobs_history_default LIMIT $1::bigint) x

-- name: history_count_partitions
-- How many day partitions there are.
SELECT count(*) FROM shardq.history_partitions() WHERE NOT is_default
