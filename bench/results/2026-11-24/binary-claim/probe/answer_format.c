/* answer_format.c - what the claim's answer costs the shard to format.
 *
 * One session runs SELECT <columns> FROM shardq.jobs over 1000 rows, 100
 * times per variant, best of 5, in text (fmt 0) and binary (fmt 1) result
 * format. Variants (cols N):
 *   0  SQ_JOB_COLUMNS as of 5b273d3 (timestamps through extract(epoch) * 1e6)
 *   1  the same with the timestamps as stored (SQ_JOB_COLUMNS_BIN + worker)
 *   2  the id alone
 *   3  as 1, params as jsonb instead of ::text
 *   4  as 1 without params, status as the enum
 *   5  as 1 without worker (SQ_JOB_COLUMNS_BIN)
 * Setup (a shardq schema in database shardq_lat on port 55631):
 *   CREATE SEQUENCE s1;
 *   INSERT INTO shardq.jobs (id, partition, task, params, priority, schedule_time,
 *     delay_tolerance_time, max_attempts, dedup_policy, worker,
 *     expected_status_change_time, status)
 *   SELECT (nextval('s1') << 16) | 5, 5, 't', '{"t":1700000000000000}', 0, now(),
 *     NULL, 1, 'i', 'host-123-worker', now(), 'running' FROM generate_series(1, 1000);
 * Build: gcc -O2 -o answer_format answer_format.c -I/usr/include/postgresql -lpq
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <time.h>
static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}
int main(void)
{
	PGconn *c = PQconnectdb("host=127.0.0.1 port=55631 dbname=shardq_lat user=postgres");
	const char *cols[] = {
		"j.id, j.attempt, (j.attempt - j.attempt_base), j.max_attempts, j.priority, "
		"j.status::text, j.task, j.active_uid, j.params::text, j.worker, (extract(epoch "
		"from j.schedule_time) * 1000000)::bigint, (extract(epoch from "
		"j.delay_tolerance_time) * 1000000)::bigint, (extract(epoch from "
		"j.expected_status_change_time) * 1000000)::bigint, (extract(epoch from "
		"j.created_at) * 1000000)::bigint",
		"j.id, j.attempt, (j.attempt - j.attempt_base), j.max_attempts, j.priority, "
		"j.status::text, j.task, j.active_uid, j.params::text, j.worker, j.schedule_time, "
		"j.delay_tolerance_time, j.expected_status_change_time, j.created_at",
		"j.id",
		"j.id, j.attempt, (j.attempt - j.attempt_base), j.max_attempts, j.priority, "
		"j.status::text, j.task, j.active_uid, j.params, j.worker, j.schedule_time, "
		"j.delay_tolerance_time, j.expected_status_change_time, j.created_at",
		"j.id, j.attempt, (j.attempt - j.attempt_base), j.max_attempts, j.priority, "
		"j.status, j.task, j.active_uid, j.worker, j.schedule_time, "
		"j.delay_tolerance_time, j.expected_status_change_time, j.created_at",
		"j.id, j.attempt, (j.attempt - j.attempt_base), j.max_attempts, j.priority, "
		"j.status, j.task, j.active_uid, j.params, j.schedule_time, "
		"j.delay_tolerance_time, j.expected_status_change_time, j.created_at"};
	for (int v = 0; v < 6; v++)
		for (int fmt = 0; fmt < 2; fmt++) {
			char q[2048];
			snprintf(q, sizeof q, "SELECT %s FROM shardq.jobs j", cols[v]);
			char name[8];
			snprintf(name, 8, "q%d%d", v, fmt);
			PQclear(PQprepare(c, name, q, 0, NULL));
			double best = 1e9;
			for (int r = 0; r < 5; r++) {
				double t0 = now();
				for (int i = 0; i < 100; i++)
					PQclear(PQexecPrepared(c, name, 0, NULL, NULL, NULL, fmt));
				double d = (now() - t0) / 100 * 1000;
				if (d < best)
					best = d;
			}
			printf("cols %d fmt %d: %.3f ms per 1000 rows\n", v, fmt, best);
		}
	return 0;
}
