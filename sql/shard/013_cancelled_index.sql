-- Shard schema, version 13: cancelled jobs found by type, in the order
-- they were cancelled (sq_jobs_list's status 'cancelled'; `shardq jobs
-- list --status cancelled`, GET /v1/jobs). A partial index: only a cancel
-- writes to it, so claims, starts and completions pay nothing. Built in
-- this migration's transaction (a cancelled job stays in shardq.jobs, so
-- writes to the table wait while it is built: seconds for millions of
-- jobs). Workers and daemons of the previous release run on it unchanged.
CREATE INDEX IF NOT EXISTS jobs_cancelled ON shardq.jobs (task, updated_at, id)
    WHERE status = 'cancelled';
