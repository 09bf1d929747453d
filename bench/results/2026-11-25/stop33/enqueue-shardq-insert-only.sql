\startpipeline
BEGIN;
INSERT INTO shardq.jobs (id, partition, task, params, priority, schedule_time, delay_tolerance_time, max_attempts, dedup_policy) SELECT n * 65536 + g, g, 'noop', '{}'::jsonb, 0, now(), NULL, 1, 'i' FROM (SELECT nextval('public.sqid') AS n) s, generate_series(1,100) g;
COMMIT;
\endpipeline
