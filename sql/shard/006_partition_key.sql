-- Shard schema, version 6: one index fewer on the hot table. A job's id
-- holds its partition in its low 16 bits (id = unique << 16 | partition),
-- so the primary key becomes (partition, id): still one row per id, and
-- the same index now finds a partition's rows for a move, which
-- jobs_partition did. Every job's insert, claim and other non-HOT updates
-- wrote an entry into both; now one. Lookups by id name the partition
-- too: partition = (id & 65535)::int.
--
-- Applied to a shard that holds jobs, this builds the new key over them
-- and holds writes to shardq.jobs while it does (seconds per million
-- rows): run `shardq init` for this upgrade when the queue is quiet.
ALTER TABLE shardq.jobs
    ADD CONSTRAINT jobs_partition_of_id CHECK (partition = (id & 65535)::int);
ALTER TABLE shardq.jobs DROP CONSTRAINT jobs_pkey;
CREATE UNIQUE INDEX jobs_pkey ON shardq.jobs (partition, id);
ALTER TABLE shardq.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY USING INDEX jobs_pkey;
DROP INDEX shardq.jobs_partition;
