-- Shard schema, version 12: the history found by type and finish time
-- (sq_jobs_list's status 'completed', sq_history_purge; `shardq jobs list
-- --status completed`, `shardq purge`, GET /v1/jobs), without a scan of
-- the history. A partitioned index: every day partition gets its own, the
-- ones made later too (history_add_day). Each completion of a type that
-- keeps history writes one index entry more. Built in this migration's
-- transaction: completions that write history wait while it is built
-- (seconds for millions of rows). Workers and daemons of the previous
-- release run on it unchanged.
CREATE INDEX IF NOT EXISTS jobs_history_task ON shardq.jobs_history (task, finished_at, id);
