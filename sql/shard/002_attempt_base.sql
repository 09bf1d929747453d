-- Shard schema, version 2: `attempt` is the fence of a run and only grows
-- (every claim adds one), so an old write can never match a newer run. What
-- counts toward max_attempts is attempt - attempt_base: a release (no
-- attempt counted) and a rerun (a fresh budget) raise the base instead of
-- lowering the attempt.
ALTER TABLE shardq.jobs ADD COLUMN attempt_base integer NOT NULL DEFAULT 0;
