-- Shard schema, version 14: failed jobs found by type, in the order they
-- failed (sq_jobs_list's status 'failed'; `shardq jobs list --status
-- failed`, `shardq retry --type`, GET /v1/jobs, the console's Failed
-- view). jobs_failed (version 3) holds every type's failed jobs by time
-- alone, so a page of a type with few failed jobs beside a type with a
-- million read past the million. A partial index: only a failure writes
-- to it, so claims, starts and completions pay nothing. Built in this
-- migration's transaction (writes to shardq.jobs wait while it is built:
-- seconds for millions of failed jobs). Workers and daemons of the
-- previous release run on it unchanged; its listings read jobs_failed.
CREATE INDEX IF NOT EXISTS jobs_failed_task ON shardq.jobs (task, updated_at, id)
    WHERE status = 'failed';
