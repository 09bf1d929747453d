-- Shard schema, version 6: jobs_partition leaves out the jobs that are
-- starting or running. A claim (ready -> starting) rewrites the row and
-- adds an entry to every index whose predicate the new row version meets;
-- with this one partial, that is jobs_pkey and jobs_lease, one entry fewer,
-- which cut the claim's time by a fifth. A move still finds every job of a
-- partition: the idle ones here, the ones in flight through jobs_lease,
-- whose predicate is theirs (src/mover.c, PART_JOBS).
--
-- The new index is built before the old one goes, in this migration's
-- transaction: every write to shardq.jobs (enqueue, claim, completion)
-- waits for the build, seconds for millions of jobs; reads wait only for
-- the drop at its end.
CREATE INDEX jobs_partition_idle ON shardq.jobs (partition)
    WHERE status <> 'starting' AND status <> 'running';
DROP INDEX shardq.jobs_partition;
ALTER INDEX shardq.jobs_partition_idle RENAME TO jobs_partition;
