-- Meta schema, version 5: the task types paused fleet-wide (shardq pause,
-- POST /v1/types/pause). Every client reads the list with the map's version
-- at each map poll (map_poll) and its claims leave the paused types out;
-- jobs of a paused type are still enqueued, and the ones already claimed
-- run to their end. A column of the cluster row, so that clients of the
-- previous release, which read the row by name, do not see it, and clients
-- of this release read it through to_jsonb (absent on meta schema 4).
ALTER TABLE shardq_meta.cluster ADD COLUMN IF NOT EXISTS paused_types text[] NOT NULL DEFAULT '{}';
