-- Meta schema, version 4: each partition's row in the map carries the map
-- version that last moved it, so that a client whose map is at version V
-- reads only the rows moved since (partition_map_since) instead of all of
-- them. During a rebalance every set bumps the version, and every worker,
-- daemon and producer re-read the whole map of 16,384 rows each time.
--
-- The version is set by a trigger, so that a mover of an older release,
-- which switches the map and then bumps the version in one transaction,
-- keeps its clients' maps right too. The trigger locks the cluster row
-- before it reads the version: two movers switch one after the other, and
-- the row takes the version the mover's bump will then give out. An
-- update that no bump follows gives its rows a version that the next bump
-- gives out, so a client reads them then.
ALTER TABLE shardq_meta.partition_map ADD COLUMN version bigint NOT NULL DEFAULT 0;
CREATE INDEX partition_map_version ON shardq_meta.partition_map (version);

CREATE FUNCTION shardq_meta.partition_map_versioned() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := (SELECT c.map_version + 1 FROM shardq_meta.cluster c FOR UPDATE);
    RETURN NEW;
END
$$;

CREATE TRIGGER partition_map_versioned BEFORE UPDATE OF shard_id ON shardq_meta.partition_map
    FOR EACH ROW EXECUTE FUNCTION shardq_meta.partition_map_versioned();
