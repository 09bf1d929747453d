/* test_limits.c - per-type limits across the whole fleet: four in-process
 * workers, each with its own client, on four shards. max_running is checked
 * from the shards (starting + running rows, sampled all along) and from the
 * handlers (how many ran at once); the rate from the shards' history (when
 * each job finished). Nothing is lost and nothing runs twice. */
#include "config.h"
#include "support.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

static testdb t;

enum { NWORKERS = 4 };

static atomic_int in_handler, most_in_handler, handled;

static sq_job_result hold_a_while(const sq_job *job, void *arg, char *e, size_t elen)
{
	(void)job, (void)e, (void)elen;
	int now = atomic_fetch_add(&in_handler, 1) + 1;
	int most = atomic_load(&most_in_handler);
	while (now > most && !atomic_compare_exchange_weak(&most_in_handler, &most, now))
		;
	usleep((useconds_t)(intptr_t)arg);
	atomic_fetch_sub(&in_handler, 1);
	atomic_fetch_add(&handled, 1);
	return SQ_RESULT_DONE;
}

typedef struct fleet {
	sq_worker *w[NWORKERS];
	pthread_t th[NWORKERS];
} fleet;

static void fleet_start(fleet *f, const char *type, int slots, int sleep_us)
{
	sq_error err;
	for (int i = 0; i < NWORKERS; i++) {
		sq_worker_opts o;
		char id[16];
		snprintf(id, sizeof(id), "w%d", i);
		sq_worker_opts_init(&o);
		o.worker_id = id;
		o.listen = 1;
		OKE(sq_worker_create(t.cfg, &o, &f->w[i], &err));
		OKE(sq_worker_add(f->w[i], type, slots, hold_a_while, (void *)(intptr_t)sleep_us,
				  &err));
		test_worker_thread(&f->th[i], f->w[i]);
	}
}

/* What the workers saw go wrong, for a stall's message. */
static void fleet_errors(fleet *f)
{
	for (int i = 0; i < NWORKERS; i++) {
		sq_worker_stats st;
		sq_worker_get_stats(f->w[i], &st);
		if (st.db_errors)
			printf("worker %d: %llu failed ticks, the last: %s\n", i,
			       (unsigned long long)st.db_errors, st.last_error);
	}
}

static void fleet_stop(fleet *f)
{
	fleet_errors(f);
	for (int i = 0; i < NWORKERS; i++)
		sq_worker_stop(f->w[i], 0);
	for (int i = 0; i < NWORKERS; i++) {
		pthread_join(f->th[i], NULL);
		sq_worker_destroy(f->w[i]);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static long long jobs_left(void *arg)
{
	(void)arg;
	return test_all_jobs(&t);
}

/* Every job completed exactly once (the types keep history). */
static void assert_all_done_once(int n)
{
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs"), 0);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) - count(DISTINCT id) FROM "
					"shardq.jobs_history"),
			 0);
	ck_assert_int_eq(
		testdb_sum(&t,
			   "SELECT count(*) FROM shardq.jobs_history WHERE status = 'completed'"),
		n);
}

/* The shard sampler of max_running: the most starting + running rows of
 * the type it saw on each shard, and in all (each shard's count is at or
 * under its share at every instant, so their sum is at or under the
 * limit however the samples interleave). */
static struct {
	atomic_int stop;
	long long most_total, samples;
	long long most_on[16];
} samp;

static void *sampler(void *arg)
{
	(void)arg;
	PGconn *pg[16];
	for (int s = 0; s < t.nshards; s++)
		pg[s] = testdb_pg(&t, s);
	while (!atomic_load(&samp.stop)) {
		long long total = 0;
		for (int s = 0; s < t.nshards; s++) {
			PGresult *r = PQexec(pg[s], "SELECT count(*) FROM shardq.jobs WHERE "
						    "status IN ('starting', 'running')");
			ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
			long long v = atoll(PQgetvalue(r, 0, 0));
			PQclear(r);
			total += v;
			if (v > samp.most_on[s])
				samp.most_on[s] = v;
		}
		if (total > samp.most_total)
			samp.most_total = total;
		samp.samples++;
		usleep(2000);
	}
	for (int s = 0; s < t.nshards; s++)
		PQfinish(pg[s]);
	return NULL;
}

/*
 * max_running = 8 over 4 shards (2 each), with 4 workers of 6 slots (24
 * slots, 3 times the limit) and 20 ms jobs: the shards never hold more
 * than 8 jobs of the type claimed at once, the handlers never run more
 * than 8 at once, and every job completes once.
 * SHARDQ_TEST_BREAK_LIMITS=1 configures no limit, to see this fail.
 */
START_TEST(max_running_never_exceeded)
{
	enum { N = 400, LIMIT = 8 };
	const char *types = getenv("SHARDQ_TEST_BREAK_LIMITS")
				    ? "[type capped]\nhistory = true\n"
				    : "[type capped]\nhistory = true\nmax_running = 8\n";
	testdb_open(&t, "sqt_limits_running", test_shard_count(), 256, types);
	ck_assert_int_eq(t.nshards, 4);
	test_enqueue_n(t.client, "capped", N, NULL);
	pthread_t sth;
	memset(&samp, 0, sizeof(samp));
	pthread_create(&sth, NULL, sampler, NULL);
	fleet f;
	fleet_start(&f, "capped", 6, 20000);
	long long left;
	int done = wait_progress(jobs_left, NULL, &left);
	atomic_store(&samp.stop, 1);
	pthread_join(sth, NULL);
	fleet_stop(&f);
	ck_assert_msg(done, "%lld of %d jobs not completed: the workers stalled", left, N);
	printf("max_running %d: at most %lld claimed at once on the shards (%lld samples; per "
	       "shard %lld/%lld/%lld/%lld), at most %d in handlers at once\n",
	       LIMIT, samp.most_total, samp.samples, samp.most_on[0], samp.most_on[1],
	       samp.most_on[2], samp.most_on[3], atomic_load(&most_in_handler));
	ck_assert_msg(samp.most_total <= LIMIT, "the shards held %lld jobs claimed at once",
		      samp.most_total);
	for (int s = 0; s < 4; s++)
		ck_assert_msg(samp.most_on[s] <= LIMIT / 4, "shard %d held %lld at once", s,
			      samp.most_on[s]);
	ck_assert_int_le(atomic_load(&most_in_handler), LIMIT);
	/* the limit is used, not just respected: more than one shard's share ran
	 * at once */
	ck_assert_int_gt(atomic_load(&most_in_handler), LIMIT / 4);
	ck_assert_int_eq(atomic_load(&handled), N);
	assert_all_done_once(N);
	testdb_close(&t);
}
END_TEST

/*
 * rate = 50/s over 4 shards: 4 workers of 8 slots with 1 ms jobs could run
 * thousands a second, and run 50 a second. Measured from the shards'
 * history (finished_at), from the 50th job to the 500th of 600, while every
 * shard still has work (150 +- 12 each): within 10% of 50/s. The limit
 * acts on the claims and the history has the finish times: on a loaded
 * machine a finish comes up to a few tenths of a second after its claim,
 * so the window is long (9 s; 350 jobs measured 55.2/s once).
 */
START_TEST(rate_within_ten_percent)
{
	enum { N = 600, FROM = 50, TO = 500 };
	const double rate = 50;
	testdb_open(&t, "sqt_limits_rate", test_shard_count(), 256,
		    "[type rated]\nhistory = true\nrate = 50/s\n");
	ck_assert_int_eq(t.nshards, 4);
	test_enqueue_n(t.client, "rated", N, NULL);
	atomic_store(&handled, 0);
	fleet f;
	fleet_start(&f, "rated", 8, 1000);
	long long left;
	int done = wait_progress(jobs_left, NULL, &left);
	fleet_stop(&f);
	ck_assert_msg(done, "%lld of %d jobs not completed: the workers stalled", left, N);
	assert_all_done_once(N);
	/* the finish times of all shards, in order */
	double *at = calloc(N, sizeof(double));
	int n = 0;
	for (int s = 0; s < t.nshards; s++) {
		PGconn *pg = testdb_pg(&t, s);
		PGresult *r = PQexec(pg, "SELECT extract(epoch FROM finished_at) FROM "
					 "shardq.jobs_history");
		ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
		for (int i = 0; i < PQntuples(r) && n < N; i++)
			at[n++] = atof(PQgetvalue(r, i, 0));
		PQclear(r);
		PQfinish(pg);
	}
	ck_assert_int_eq(n, N);
	qsort(at, (size_t)n, sizeof(double), cmp_double);
	double got = (TO - FROM) / (at[TO] - at[FROM]);
	printf("rate %.0f/s: jobs %d-%d finished at %.1f/s (%.1f%% off); all %d in %.1f s\n", rate,
	       FROM, TO, got, 100 * (got / rate - 1), N, at[N - 1] - at[0]);
	ck_assert_msg(fabs(got / rate - 1) <= 0.10, "the rate was %.1f/s for a limit of %.0f/s",
		      got, rate);
	free(at);
	testdb_close(&t);
}
END_TEST

/* The keys' errors name the key, the line and what to do. */
/* A worker that dies with jobs of a limited type does not hold its places
 * for ever: once their leases run out, another worker's claims take them
 * back (a job taken back holds the place it held), and then the ready
 * ones; never more than max_running claimed at once, expired or not (so
 * that a start or heartbeat that comes late cannot take the type over). */
START_TEST(max_running_is_not_held_by_a_dead_worker)
{
	sq_error err;
	testdb_open(&t, "sqt_limits_dead", 2, 64,
		    "[type m]\nmax_running = 2\nstarting_timeout = 1s\nexecution_timeout = 1s\n"
		    "max_attempts = 5\n");
	test_enqueue_n(t.client, "m", 10, NULL);
	sq_job *js;
	size_t held = claim_type(t.client, "dies", "m", 10, &js);
	ck_assert_uint_eq(held, 2); /* one place on each shard */
	sq_jobs_free(js, held);
	ck_assert_uint_eq(claim_type(t.client, "alive", "m", 10, &js), 0);
	/* "dies" never heartbeats: its leases run out in a second */
	const char *live = "SELECT count(*) FROM shardq.jobs WHERE task = 'm' AND status IN "
			   "('starting', 'running')";
	long long claimed = 0;
	double last = test_now_s();
	while (claimed < 2 && test_now_s() - last < testdb_stall_s()) {
		size_t n = claim_type(t.client, "alive", "m", 10, &js);
		for (size_t i = 0; i < n; i++)
			ck_assert_str_eq(js[i].worker ? js[i].worker : "alive", "alive");
		sq_jobs_free(js, n);
		if (n)
			claimed += (long long)n, last = test_now_s();
		ck_assert_int_le(testdb_sum(&t, live), 2);
		usleep(50000);
	}
	ck_assert_msg(claimed >= 2,
		      "the type stayed held by the dead worker's expired leases: %lld claimed in "
		      "%.0f s",
		      claimed, testdb_stall_s());
	(void)err;
	testdb_close(&t);
}
END_TEST

START_TEST(limit_keys_checked)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{"[type x]\nrate = fast\n", "rate: expected a rate such as 100/s"},
		{"[type x]\nrate = 10/d\n", "rate: expected a rate such as 100/s"},
		{"[type x]\nrate = -5/s\n", "rate: expected a rate"},
		{"[type x]\nburst = 10\n", "burst: is set but rate is not"},
		{"[type x]\nrate = 10/s\nburst = 0.5\n", "burst: 0.5 is below 1 job"},
		{"[type x]\nmax_running = 1\n", "max_running: 1 is below the 2 shards"},
		{"[type x]\nmax_running = many\n", "max_running: expected an integer"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char ini[512];
		sq_config *cfg = NULL;
		sq_error err;
		snprintf(ini, sizeof(ini),
			 "[shard a]\ndsn = host=127.0.0.1 port=1\n[shard b]\ndsn = "
			 "host=127.0.0.1 port=2\n%s",
			 cases[i].text);
		ck_assert_int_eq(sq_config_parse(ini, "t.ini", &cfg, &err), SQ_ECONFIG);
		ck_assert_msg(strstr(err.msg, cases[i].want), "%s: got '%s', want '%s'",
			      cases[i].text, err.msg, cases[i].want);
		ck_assert_msg(strstr(err.msg, "t.ini:"), "no line in '%s'", err.msg);
	}
	/* good ones: per second, minute, hour */
	static const struct {
		const char *v;
		double per_s;
	} good[] = {{"100/s", 100}, {"600/m", 10}, {"36/h", 0.01}, {"0", 0}};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		char ini[256];
		sq_config *cfg = NULL;
		sq_error err;
		snprintf(ini, sizeof(ini),
			 "[shard a]\ndsn = host=127.0.0.1 port=1\n[type x]\nrate = %s\n",
			 good[i].v);
		OKE(sq_config_parse(ini, "t.ini", &cfg, &err));
		ck_assert_double_eq_tol(sq_config_type(cfg, "x")->rate_per_s, good[i].per_s, 1e-9);
		sq_config_free(cfg);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("limits");
	ADD_CASE(s, limit_keys_checked, 60);
	ADD_CASE(s, max_running_never_exceeded, 3600);
	ADD_CASE(s, rate_within_ten_percent, 3600);
	ADD_CASE(s, max_running_is_not_held_by_a_dead_worker, 3600);
	return run_suite(s);
}
