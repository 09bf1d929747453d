IDS="{$(seq -s, 900000001 900000100)}"; ATT="{$(yes 1 | head -100 | paste -sd,)}"
OWN="(SELECT ps.state FROM shardq.partition_state ps WHERE ps.partition = j.partition) = 'owned'"
F="j.id = x.id AND j.attempt = x.att AND j.worker = \$3 AND j.status::text IN ('starting','running')"
RR="rr AS (UPDATE shardq.jobs j SET status='ready', params=j.rerun_params, rerun_params=NULL, attempt_base=j.attempt, worker=NULL, expected_status_change_time=NULL, schedule_time=now(), updated_at=now() FROM x WHERE $F AND $OWN AND j.rerun_params IS NOT NULL RETURNING x.ord)"
X="x AS (SELECT * FROM unnest(\$1::bigint[], \$2::int[]) WITH ORDINALITY AS x(id, att, ord))"
declare -A V
V[full]="WITH $X, $RR, del AS (DELETE FROM shardq.jobs j USING x WHERE $F AND $OWN AND j.rerun_params IS NULL RETURNING x.ord) SELECT ord FROM rr UNION ALL SELECT ord FROM del"
V[delonly]="WITH $X, del AS (DELETE FROM shardq.jobs j USING x WHERE $F AND $OWN AND j.rerun_params IS NULL RETURNING x.ord) SELECT ord FROM del"
V[noown]="WITH $X, del AS (DELETE FROM shardq.jobs j USING x WHERE $F AND j.rerun_params IS NULL RETURNING x.ord) SELECT ord FROM del"
V[inline]="WITH rr AS (UPDATE shardq.jobs j SET status='ready', params=j.rerun_params, rerun_params=NULL, attempt_base=j.attempt, worker=NULL, expected_status_change_time=NULL, schedule_time=now(), updated_at=now() FROM unnest(\$1::bigint[], \$2::int[]) WITH ORDINALITY AS x(id, att, ord) WHERE $F AND $OWN AND j.rerun_params IS NOT NULL RETURNING x.ord), del AS (DELETE FROM shardq.jobs j USING unnest(\$1::bigint[], \$2::int[]) WITH ORDINALITY AS x(id, att, ord) WHERE $F AND $OWN AND j.rerun_params IS NULL RETURNING x.ord) SELECT ord FROM rr UNION ALL SELECT ord FROM del"
V[anyfence]="WITH del AS (DELETE FROM shardq.jobs j WHERE j.id = ANY(\$1::bigint[]) AND j.worker = \$3 AND j.status::text IN ('starting','running') AND j.attempt = (\$2::int[])[array_position(\$1::bigint[], j.id)] AND $OWN AND j.rerun_params IS NULL RETURNING j.id) SELECT id FROM del"
V[bare]="DELETE FROM shardq.jobs j WHERE j.id = ANY(\$1::bigint[]) AND \$2::int[] IS NOT NULL AND \$3::text IS NOT NULL"
for v in full inline anyfence noown bare; do
 for i in 1 2 3 4 5 6; do
 psql -X -h 127.0.0.1 -p 55631 -U postgres shardq -q <<SQL
BEGIN;
INSERT INTO shardq.jobs (id, partition, task, status, attempt, worker, expected_status_change_time)
SELECT 900000000+g, (SELECT partition FROM shardq.partition_state WHERE state='owned' LIMIT 1), 'noop', 'running', 1, 'w1', now()+interval '30s' FROM generate_series(1,100) g;
SET LOCAL plan_cache_mode = force_generic_plan;
PREPARE c(bigint[], int[], text) AS ${V[$v]};
EXECUTE c('$IDS', '$ATT', 'w1');
ROLLBACK;
BEGIN;
INSERT INTO shardq.jobs (id, partition, task, status, attempt, worker, expected_status_change_time)
SELECT 900000000+g, (SELECT partition FROM shardq.partition_state WHERE state='owned' LIMIT 1), 'noop', 'running', 1, 'w1', now()+interval '30s' FROM generate_series(1,100) g;
SET LOCAL plan_cache_mode = force_generic_plan;
\timing on
EXECUTE c('$IDS', '$ATT', 'w1');
\timing off
ROLLBACK;
SQL
 done 2>&1 | grep Time | awk -v v=$v '{print v, $2}' | sort -k2 -n | head -3 | tr '\n' ' '; echo
done
