-- Shard schema, version 9: the ready jobs that carry a delay tolerance, in
-- the order the claim takes them once they are due but not yet late
-- (docs/design.md, "Ordering"). The claim reads jobs_ready only up to now
-- within each priority, and this index for the due jobs whose tolerance
-- runs past now: before this version, a claim that found fewer jobs than
-- it asked for read every job of the type scheduled for later (a shard
-- with 195,000 delayed jobs of one type took 2.4 s a claim).
--
-- schedule_time is a key column, last, so that the claim skips a job not
-- yet due on the index tuple, without reading its row. Only jobs with a
-- tolerance are in it: retries and plain delayed jobs have none.
--
-- As in versions 6 and 7, it is built in this migration's transaction:
-- writes to shardq.jobs wait for the build. Workers of this build run on
-- version 8 as well (the claim only runs slower when a type has many
-- tolerant jobs scheduled for later).
CREATE INDEX jobs_tolerant ON shardq.jobs
    ((hashtext(task)), priority DESC, delay_tolerance_time, id, schedule_time)
    WHERE status = 'ready' AND delay_tolerance_time IS NOT NULL;
