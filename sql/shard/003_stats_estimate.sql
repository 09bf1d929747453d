-- Shard schema, version 3: PostgreSQL's own estimate of a type's ready
-- jobs, from the planner's statistics (kept fresh by autovacuum's analyze),
-- for stats that must not count a backlog of millions row by row
-- (sq_stats_fast: exact up to a cap, this estimate above it). VOLATILE:
-- PostgreSQL runs EXPLAIN only there.
CREATE FUNCTION shardq.ready_estimate(p_task text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    plan json;
BEGIN
    EXECUTE format('EXPLAIN (FORMAT JSON) SELECT 1 FROM shardq.jobs'
                   ' WHERE task = %L AND status = ''ready''', p_task) INTO plan;
    RETURN (plan -> 0 -> 'Plan' ->> 'Plan Rows')::bigint;
END $$;

-- The failed jobs, newest first, for dashboards (sq_failed_recent): only
-- failed rows are in it, so the hot path never writes it.
CREATE INDEX jobs_failed ON shardq.jobs (updated_at) WHERE status = 'failed';
