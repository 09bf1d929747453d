/* test_claim.c - the multi-type claim: limits per type, one statement per
 * shard (counted by the servers), the documented order, and many
 * concurrent claimers taking each job exactly once. */
#include "support.h"

#include <pthread.h>

static const char *types = "[type a]\n[type b]\n[type c]\n[type ord]\n";

static void enqueue_many(sq_client *c, const char *type, int n, int prio_mod)
{
	sq_job_spec *js = calloc((size_t)n, sizeof(*js));
	sq_enqueue_result *rs = calloc((size_t)n, sizeof(*rs));
	char(*keys)[32] = calloc((size_t)n, sizeof(*keys));
	sq_error err;
	/* keyed, so that every job finds its own partition: a run of keyless
	 * jobs shares one, and these tests want every shard to hold every type */
	for (int i = 0; i < n; i++) {
		snprintf(keys[i], sizeof(keys[i]), "%s:%d", type, i);
		js[i].key = keys[i];
		js[i].type = type;
		js[i].delay_tolerance_ms = prio_mod ? (i * 7919) % 5000 : 0;
		js[i].has_priority = prio_mod > 0;
		js[i].priority = prio_mod ? i % prio_mod : 0;
	}
	for (int done = 0; done < n; done += 5000) {
		int k = n - done < 5000 ? n - done : 5000;
		OKE(sq_enqueue(c, js + done, (size_t)k, rs + done, &err));
	}
	free(js);
	free(rs);
	free(keys);
}

static const char *claims_sql =
	"SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
	"WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
	"AND query LIKE 'WITH t AS (%' AND query LIKE '%FOR UPDATE SKIP LOCKED%'";

START_TEST(three_types_one_statement_per_shard)
{
	testdb t;
	int ns = test_shard_count();
	testdb_open(&t, "sqt_claim", ns, 1024, types);
	enqueue_many(t.client, "a", 400 * ns, 3);
	enqueue_many(t.client, "b", 400 * ns, 3);
	enqueue_many(t.client, "c", 400 * ns, 3);
	for (int s = 0; s < ns; s++)
		testdb_scalar(
			&t, s,
			"SELECT 1 FROM (SELECT pg_stat_statements_reset(0, "
			"(SELECT oid FROM pg_database WHERE datname = current_database()), 0)) x");
	sq_claim_req rq[3] = {{"a", 10 * ns, 0}, {"b", 5 * ns, 0}, {"c", 2 * ns, 0}};
	sq_job *js;
	size_t n;
	sq_error err;
	OKE(sq_claim(t.client, "w1", rq, 3, &js, &n, &err));
	int per_type[3] = {0}, per_shard_type[16][3];
	memset(per_shard_type, 0, sizeof(per_shard_type));
	for (size_t i = 0; i < n; i++) {
		int k = js[i].type[0] - 'a';
		per_type[k]++;
		per_shard_type[js[i].shard][k]++;
		ck_assert_int_eq(js[i].status, SQ_STARTING);
		ck_assert_int_eq(js[i].attempt, 1);
		ck_assert_str_eq(js[i].worker, "w1");
		ck_assert(js[i].lease_until_us > js[i].schedule_time_us);
	}
	ck_assert_int_eq(per_type[0], 10 * ns);
	ck_assert_int_eq(per_type[1], 5 * ns);
	ck_assert_int_eq(per_type[2], 2 * ns);
	/* every shard gave jobs of every type, in one claim statement each */
	for (int s = 0; s < ns; s++) {
		for (int k = 0; k < 3; k++)
			ck_assert_msg(per_shard_type[s][k] > 0, "shard %d gave no job of type %c",
				      s, 'a' + k);
		ck_assert_int_eq(testdb_scalar(&t, s, claims_sql), 1);
	}
	/* documented order: priority DESC, COALESCE(delay_tolerance_time,
	 * schedule_time) ASC */
	for (size_t i = 1; i < n; i++) {
		const sq_job *p = &js[i - 1], *q = &js[i];
		int64_t op = p->delay_tolerance_time_us ? p->delay_tolerance_time_us
							: p->schedule_time_us;
		int64_t oq = q->delay_tolerance_time_us ? q->delay_tolerance_time_us
							: q->schedule_time_us;
		ck_assert(p->priority >= q->priority);
		if (p->priority == q->priority)
			ck_assert(op <= oq);
	}
	/* and within a shard, the claim took the best jobs: none left ready on
	 * a shard outranks one it gave */
	ck_assert_int_eq(testdb_sum(&t,
				    "SELECT count(*) FROM shardq.jobs r WHERE r.status = 'ready' "
				    "AND r.task = 'a' AND r.priority > (SELECT min(priority) FROM "
				    "shardq.jobs s WHERE s.status = 'starting' AND s.task = 'a')"),
			 0);
	ck_assert_int_eq(
		testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE status = 'starting'"),
		(long long)n);
	sq_jobs_free(js, n);
	testdb_close(&t);
}
END_TEST

/* Seed 002's example: a job that tolerates 1 s of delay, created later, runs
 * before one created earlier that tolerates 10 s. Not-yet-due jobs wait. */
START_TEST(delay_tolerance_orders_and_schedule_waits)
{
	testdb t;
	sq_error err;
	testdb_open(&t, "sqt_claim_ord", 2, 64, types);
	sq_job_spec js[3];
	sq_enqueue_result rs[3];
	memset(js, 0, sizeof(js));
	int64_t now = (int64_t)time(NULL) * 1000000;
	js[0].type = "ord", js[0].key = "early-lax", js[0].run_at_us = now - 5000000;
	js[0].delay_tolerance_ms = 10000;
	js[1].type = "ord", js[1].key = "late-strict", js[1].run_at_us = now;
	js[1].delay_tolerance_ms = 1000;
	js[2].type = "ord", js[2].key = "future", js[2].delay_ms = 60000,
	js[2].delay_tolerance_ms = 0;
	OKE(sq_enqueue(t.client, js, 3, rs, &err));
	sq_job *got;
	ck_assert_uint_eq(claim_type(t.client, "w", "ord", 1, &got), 1);
	ck_assert_str_eq(got[0].key, "late-strict");
	sq_jobs_free(got, 1);
	ck_assert_uint_eq(claim_type(t.client, "w", "ord", 5, &got), 1);
	ck_assert_str_eq(got[0].key, "early-lax");
	sq_jobs_free(got, 1);
	ck_assert_uint_eq(claim_type(t.client, "w", "ord", 5, &got), 0);
	testdb_close(&t);
}
END_TEST

/* The claim's answer comes in binary format, the stored values as they
 * are; a lookup (sq_get_job) reads the same row as text. Every field must
 * agree: a negative priority, a NULL key and tolerance, non-ASCII params,
 * and both statuses a claim hands out. */
START_TEST(claimed_jobs_read_as_stored)
{
	testdb t;
	sq_error err;
	testdb_open(&t, "sqt_claim_bin", 2, 64, types);
	sq_job_spec js[3];
	sq_enqueue_result rs[3];
	memset(js, 0, sizeof(js));
	int64_t now = (int64_t)time(NULL) * 1000000;
	js[0].type = "a", js[0].key = "k-\xc3\xa9",
	js[0].params = "{\"u\": \"\xc3\xa9\", \"n\": [1, -2.5]}";
	js[0].has_priority = 1, js[0].priority = -7, js[0].run_at_us = now - 5000000;
	js[0].delay_tolerance_ms = 2500, js[0].max_attempts = 3;
	js[1].type = "a", js[1].has_priority = 1, js[1].priority = 1000000;
	js[1].delay_tolerance_ms = SQ_NO_DELAY_TOLERANCE;
	js[2].type = "a", js[2].key = "k-3", js[2].has_priority = 1, js[2].priority = -1000000;
	OKE(sq_enqueue(t.client, js, 3, rs, &err));
	sq_claim_req rq = {"a", 3, 1};
	sq_job *got;
	size_t n;
	OKE(sq_claim(t.client, "w-bin", &rq, 1, &got, &n, &err));
	ck_assert_uint_eq(n, 3);
	int running = 0;
	for (size_t i = 0; i < n; i++) {
		sq_job db;
		OKE(sq_get_job(t.client, got[i].id, &db, &err));
		ck_assert_int_eq(got[i].id, db.id);
		ck_assert_int_eq(got[i].attempt, db.attempt);
		ck_assert_int_eq(got[i].attempt, 1);
		ck_assert_int_eq(got[i].tries, db.tries);
		ck_assert_int_eq(got[i].max_attempts, db.max_attempts);
		ck_assert_int_eq(got[i].priority, db.priority);
		ck_assert_int_eq(got[i].status, db.status);
		ck_assert_int_eq(got[i].shard, db.shard);
		ck_assert_str_eq(got[i].type, db.type);
		ck_assert_str_eq(got[i].params, db.params);
		ck_assert_str_eq(got[i].worker, "w-bin");
		ck_assert_str_eq(db.worker, "w-bin");
		ck_assert(!got[i].key == !db.key);
		if (db.key)
			ck_assert_str_eq(got[i].key, db.key);
		ck_assert_int_eq(got[i].schedule_time_us, db.schedule_time_us);
		ck_assert_int_eq(got[i].delay_tolerance_time_us, db.delay_tolerance_time_us);
		ck_assert_int_eq(got[i].lease_until_us, db.lease_until_us);
		ck_assert_int_eq(got[i].created_us, db.created_us);
		/* and the values are the ones enqueued, on the Unix clock */
		ck_assert_int_gt(got[i].created_us, now - 3600 * INT64_C(1000000));
		ck_assert_int_gt(got[i].lease_until_us, got[i].created_us);
		if (got[i].priority == -7) {
			ck_assert_str_eq(got[i].key, "k-\xc3\xa9");
			ck_assert_ptr_nonnull(strstr(got[i].params, "\xc3\xa9"));
			ck_assert_int_eq(got[i].max_attempts, 3);
			ck_assert_int_eq(got[i].delay_tolerance_time_us - got[i].schedule_time_us,
					 2500000);
		} else if (got[i].priority == 1000000) {
			ck_assert_ptr_null(got[i].key);
			ck_assert_int_eq(got[i].delay_tolerance_time_us, 0);
		} else {
			ck_assert_int_eq(got[i].priority, -1000000);
		}
		running += got[i].status == SQ_RUNNING;
		ck_assert(got[i].status == SQ_RUNNING || got[i].status == SQ_STARTING);
		sq_job_clear(&db);
	}
	ck_assert_int_eq(running, 1);
	/* the documented order: highest priority first */
	ck_assert_int_eq(got[0].priority, 1000000);
	ck_assert_int_eq(got[2].priority, -1000000);
	sq_jobs_free(got, n);
	testdb_close(&t);
}
END_TEST

/* The claimers connect first, then all start claiming at once. */
static pthread_barrier_t claimers_ready;

typedef struct claimer {
	testdb *t;
	int no;
	int64_t *ids;
	size_t n, cap;
} claimer;

static void *claim_loop(void *arg)
{
	claimer *cl = arg;
	sq_client *c = testdb_client(cl->t);
	char worker[16];
	int empty = 0;
	snprintf(worker, sizeof(worker), "w%d", cl->no);
	pthread_barrier_wait(&claimers_ready);
	while (empty < 3) {
		sq_claim_req rq = {"a", 150, 0};
		sq_job *js;
		size_t n;
		sq_error err;
		ck_assert_msg(sq_claim(c, worker, &rq, 1, &js, &n, &err) == SQ_OK, "%s", err.msg);
		empty = n ? 0 : empty + 1;
		for (size_t i = 0; i < n; i++) {
			if (cl->n == cl->cap)
				cl->ids = realloc(cl->ids,
						  (cl->cap = cl->cap * 2 + 1024) * sizeof(int64_t));
			cl->ids[cl->n++] = js[i].id;
			ck_assert_str_eq(js[i].worker, worker);
		}
		sq_jobs_free(js, n);
	}
	sq_client_close(c);
	return NULL;
}

START_TEST(eight_claimers_each_job_once)
{
	enum { N = 50000, W = 8 };
	testdb t;
	pthread_t th[W];
	claimer cl[W];
	testdb_open(&t, "sqt_claim_conc", test_shard_count(), 1024, types);
	enqueue_many(t.client, "a", N, 0);
	memset(cl, 0, sizeof(cl));
	pthread_barrier_init(&claimers_ready, NULL, W);
	for (int i = 0; i < W; i++) {
		cl[i].t = &t;
		cl[i].no = i;
		pthread_create(&th[i], NULL, claim_loop, &cl[i]);
	}
	size_t total = 0;
	for (int i = 0; i < W; i++) {
		pthread_join(th[i], NULL);
		total += cl[i].n;
	}
	pthread_barrier_destroy(&claimers_ready);
	int64_t *all = malloc(total * sizeof(int64_t));
	size_t k = 0;
	for (int i = 0; i < W; i++) {
		memcpy(all + k, cl[i].ids, cl[i].n * sizeof(int64_t));
		k += cl[i].n;
		ck_assert_msg(cl[i].n > 0, "claimer %d got nothing", i);
		free(cl[i].ids);
	}
	qsort(all, total, sizeof(int64_t), test_cmp_i64);
	for (size_t i = 1; i < total; i++)
		ck_assert_msg(all[i] != all[i - 1], "job %lld claimed twice", (long long)all[i]);
	ck_assert_uint_eq(total, N);
	/* the shards agree: every job starting, first attempt, one worker */
	ck_assert_int_eq(testdb_sum(&t,
				    "SELECT count(*) FROM shardq.jobs WHERE status = 'starting' "
				    "AND attempt = 1 AND worker LIKE 'w_'"),
			 N);
	free(all);
	testdb_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("claim");
	TCase *tc = tcase_create("claim");
	tcase_set_timeout(tc, 3600);
	ADD_TEST(tc, three_types_one_statement_per_shard);
	ADD_TEST(tc, delay_tolerance_orders_and_schedule_waits);
	ADD_TEST(tc, eight_claimers_each_job_once);
	ADD_TEST(tc, claimed_jobs_read_as_stored);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
