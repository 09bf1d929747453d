-- A completion's plan on the statistics of a churned table (stop 37): psql -d <a bench shard's database> -v ON_ERROR_STOP=1 -f this file
-- (the statement as it was before a70e503; the partition must be one the shard owns)

BEGIN;
TRUNCATE shardq.jobs;
INSERT INTO shardq.jobs (id, partition, task) SELECT (g::bigint << 16) | 3, 3, 'noop' FROM generate_series(1, 30000) g;
UPDATE shardq.jobs SET status = 'running', expected_status_change_time = now() + interval '30 s', worker = 'w', attempt = 1 WHERE (id >> 16) % 3 <> 0;
DELETE FROM shardq.jobs WHERE (id >> 16) % 100 <> 0;
ANALYZE shardq.jobs;
INSERT INTO shardq.jobs (id, partition, task, status, worker, attempt, expected_status_change_time)
  SELECT ((g + 100000)::bigint << 16) | 3, 3, 'noop', 'running', 'w', 1, now() + interval '30 s' FROM generate_series(1, 3000) g;
SET enable_seqscan = off; SET enable_bitmapscan = off;
PREPARE c(bigint[], int[], text) AS WITH x AS (SELECT * FROM unnest($1::bigint[], $2::int[])           WITH ORDINALITY AS x(id, att, ord)), rr AS (UPDATE shardq.jobs j SET status = 'ready', params = j.rerun_params,          rerun_params = NULL, attempt_base = j.attempt, worker = NULL,          expected_status_change_time = NULL, schedule_time = now(),          delay_tolerance_time = now() + (j.delay_tolerance_time - j.schedule_time),          updated_at = now()          FROM x WHERE j.id = x.id AND j.attempt = x.att AND j.worker = $3 AND j.status::text IN ('starting', 'running') AND (SELECT ps.state FROM shardq.partition_state ps  WHERE ps.partition = j.partition) = 'owned'            AND j.rerun_params IS NOT NULL          RETURNING x.ord), del AS (DELETE FROM shardq.jobs j USING x          WHERE j.id = x.id AND j.attempt = x.att AND j.worker = $3 AND j.status::text IN ('starting', 'running') AND (SELECT ps.state FROM shardq.partition_state ps  WHERE ps.partition = j.partition) = 'owned'            AND j.rerun_params IS NULL RETURNING x.ord) SELECT ord FROM rr UNION ALL SELECT ord FROM del;
SELECT array_agg(((g + 100000)::bigint << 16) | 3) AS ids FROM generate_series(1, 600) g \gset
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE c(:'ids', array_fill(1, ARRAY[600]), 'w');
ROLLBACK;
