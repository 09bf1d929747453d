/* test_moves.c - online partition moves under load: producers enqueue,
 * workers claim and complete throughout, while shards are added, drained,
 * and movers are killed at every named failpoint. After each, the
 * invariants of design section 6 are checked on the shards themselves. */
#include "client.h"
#include "support.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *types = "[type m]\nhistory = true\n"
			   "[type long]\nhistory = true\nexecution_timeout = 1m\n";

static testdb t;

/* ---- load: producers and workers ---------------------------------------- */

/* The jobs acknowledged, gathered from the producers once they stop. */
typedef struct ids {
	int64_t *v;
	size_t n;
} ids;

typedef struct run {
	int64_t id;
	int attempt;
	int worker;
	double start, end;
} run;

/* The producers keep at most this many jobs outstanding (acknowledged, not
 * yet run), so that on any machine the workers keep up and the queue
 * drains when they stop. */
#define BACKLOG_CAP 300

typedef struct load {
	volatile int release_long; /* `long` jobs run until this is set */
	ids acked;
	run *runs;
	size_t nruns, cap;
	pthread_mutex_t mu;
	test_producer prod[4];
	pthread_t work[4];
	sq_worker *w[4];
	int nprod, nwork;
	int worker_no[4];
} load;

static load L;

static size_t acked_now(void)
{
	size_t n = 0;
	for (int i = 0; i < L.nprod; i++)
		n += test_producer_acked(&L.prod[i]);
	return n;
}

/* 1 while more jobs are outstanding than the cap: the producers wait. */
static int backlog_full(void *arg)
{
	(void)arg;
	long long acked = (long long)acked_now();
	pthread_mutex_lock(&L.mu);
	long long ran = (long long)L.nruns;
	pthread_mutex_unlock(&L.mu);
	return acked - ran > BACKLOG_CAP;
}

static sq_job_result handler(const sq_job *job, void *arg, char *e, size_t elen)
{
	run r = {job->id, job->attempt, *(int *)arg, test_now_s(), 0};
	(void)e;
	(void)elen;
	if (strcmp(job->type, "long"))
		usleep(2000 + (unsigned)(job->id % 8) * 1000);
	else /* held running until the test lets it go, however slow the machine */
		while (!L.release_long)
			usleep(10000);
	r.end = test_now_s();
	pthread_mutex_lock(&L.mu);
	if (L.nruns == L.cap)
		L.runs = realloc(L.runs, (L.cap = L.cap * 2 + 1024) * sizeof(run));
	L.runs[L.nruns++] = r;
	pthread_mutex_unlock(&L.mu);
	return SQ_RESULT_DONE;
}

/* nprod producers and nwork workers of `slots` slots for type m (each
 * such slot runs some 180 jobs/s of 2-9 ms) */
static void load_start(int nprod, int nwork, int slots)
{
	memset(&L, 0, sizeof(L));
	pthread_mutex_init(&L.mu, NULL);
	L.nprod = nprod;
	L.nwork = nwork;
	for (int i = 0; i < nwork; i++) {
		sq_worker_opts o;
		sq_error err;
		char id[16];
		sq_worker_opts_init(&o);
		snprintf(id, sizeof(id), "w%d", i);
		o.worker_id = id;
		o.poll_max_ms = 100;
		L.worker_no[i] = i;
		OKE(sq_worker_create(t.cfg, &o, &L.w[i], &err));
		OKE(sq_worker_add(L.w[i], "m", slots, handler, &L.worker_no[i], &err));
		OKE(sq_worker_add(L.w[i], "long", 4, handler, &L.worker_no[i], &err));
		test_worker_thread(&L.work[i], L.w[i]);
	}
	static const char *prefix[4] = {"p0", "p1", "p2", "p3"};
	for (int i = 0; i < nprod; i++) {
		L.prod[i] = (test_producer){.t = &t,
					    .type = "m",
					    .prefix = prefix[i],
					    .keyed = 1,
					    .batch = 100,
					    .pause_us = 20000,
					    .hold = backlog_full};
		test_producer_start(&L.prod[i]);
	}
}

static long long live(void)
{
	return testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE status IN "
			      "('ready','starting','running')");
}

static long long live_left(void *arg)
{
	(void)arg;
	return live();
}

/* Stops the producers, lets the workers drain the queue (for as long as
 * jobs keep completing), stops them. A stall fails the test with the live
 * rows per shard, type and status, and what each worker holds. */
/* Waits until the producers have had `more` jobs acknowledged from now:
 * the load has run on (a stall fails, with what was acknowledged). */
static void load_wait_acked(size_t more)
{
	size_t from = acked_now(), was = from;
	double since = test_now_s();
	for (size_t n; (n = acked_now()) < from + more; usleep(20000)) {
		if (n != was)
			was = n, since = test_now_s();
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "the load stalled: %zu of %zu jobs acknowledged, none for %.0fs",
			      n - from, more, testdb_stall_s());
	}
}

static void load_stop(void)
{
	long long left;
	L.release_long = 1;
	for (int i = 0; i < L.nprod; i++) {
		test_producer *p = &L.prod[i];
		test_producer_stop(p);
		ck_assert_msg(p->failed_calls == 0 && p->retried == 0,
			      "producer %d: %ld failed calls, %ld jobs sent again: %s", i,
			      p->failed_calls, p->retried, p->last_error);
		L.acked.v = realloc(L.acked.v, (L.acked.n + p->nacked) * sizeof(int64_t));
		memcpy(L.acked.v + L.acked.n, p->acked, p->nacked * sizeof(int64_t));
		L.acked.n += p->nacked;
		test_producer_free(p);
	}
	if (!wait_progress(live_left, NULL, &left)) {
		char rows[4096], ws[2048];
		size_t k = 0;
		ws[0] = '\0';
		for (int i = 0; i < L.nwork; i++) {
			sq_worker_stats st;
			sq_worker_get_stats(L.w[i], &st);
			k += (size_t)snprintf(ws + k, sizeof(ws) - k,
					      "  worker w%d: running %d buffered %d claims %llu db "
					      "errors %llu last: %s\n",
					      i, st.running, st.buffered,
					      (unsigned long long)st.claims,
					      (unsigned long long)st.db_errors, st.last_error);
			if (k >= sizeof(ws))
				break;
		}
		ck_abort_msg("the queue did not drain: %lld jobs live, none completed for %.0fs\n"
			     "live rows:\n%sworkers:\n%s",
			     left, testdb_stall_s(), testdb_live_report(&t, rows, sizeof(rows)),
			     ws);
	}
	for (int i = 0; i < L.nwork; i++) {
		sq_worker_stop(L.w[i], 0);
		pthread_join(L.work[i], NULL);
		sq_worker_destroy(L.w[i]);
	}
}

static void load_free(void)
{
	free(L.acked.v);
	free(L.runs);
}

/* ---- invariants ---------------------------------------------------------- */

static int64_t *collect(const char *sql, size_t *n)
{
	int64_t *v = NULL;
	size_t k = 0, cap = 0;
	for (int s = 0; s < t.nshards; s++) {
		PGconn *c = testdb_pg(&t, s);
		PGresult *r = PQexec(c, sql);
		ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
		for (int i = 0; i < PQntuples(r); i++) {
			if (k == cap)
				v = realloc(v, (cap = cap * 2 + 4096) * sizeof(int64_t));
			v[k++] = atoll(PQgetvalue(r, i, 0));
		}
		PQclear(r);
		PQfinish(c);
	}
	*n = k;
	return v;
}

/* Each partition is owned on exactly one shard, and the map agrees. */
static void check_ownership(void)
{
	int *owner = malloc(sizeof(int) * t.partitions);
	for (unsigned p = 0; p < t.partitions; p++)
		owner[p] = -1;
	for (int s = 0; s < t.nshards; s++) {
		PGconn *c = testdb_pg(&t, s);
		PGresult *r = PQexec(
			c, "SELECT partition FROM shardq.partition_state WHERE state = 'owned'");
		for (int i = 0; i < PQntuples(r); i++) {
			int p = atoi(PQgetvalue(r, i, 0));
			ck_assert_msg(owner[p] < 0, "partition %d owned by s%d and s%d", p,
				      owner[p] + 1, s + 1);
			owner[p] = s;
		}
		PQclear(r);
		/* nothing left half-way, and no marker of a finished move: a
		 * source forgets the partitions it gave away, so that its
		 * claims test the partitions' state once per statement */
		r = PQexec(c, "SELECT count(*), string_agg(partition || ' ' || state, ', ')"
			      " FROM shardq.partition_state WHERE state <> 'owned'");
		ck_assert_msg(!strcmp(PQgetvalue(r, 0, 0), "0"),
			      "s%d keeps %s partitions in a state other than owned after its "
			      "moves ended: %.300s",
			      s + 1, PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
		PQclear(r);
		PQfinish(c);
	}
	PGconn *m = testdb_pg(&t, 0);
	PGresult *r = PQexec(m, "SELECT partition, shard_id FROM shardq_meta.partition_map");
	ck_assert_int_eq(PQntuples(r), (int)t.partitions);
	for (int i = 0; i < PQntuples(r); i++) {
		int p = atoi(PQgetvalue(r, i, 0));
		ck_assert_msg(owner[p] >= 0, "partition %d is owned by no shard", p);
		ck_assert_msg(atoi(PQgetvalue(r, i, 1) + 1) == owner[p] + 1,
			      "partition %d: map says %s, s%d owns it", p, PQgetvalue(r, i, 1),
			      owner[p] + 1);
	}
	PQclear(r);
	PQfinish(m);
	free(owner);
}

/* c's map, once refreshed, is the meta database's, partition by partition. */
static void check_client_map(sq_client *c)
{
	sq_error err;
	OKE(sq_client_refresh_map(c, &err));
	PGconn *m = testdb_pg(&t, 0);
	PGresult *r = PQexec(m, "SELECT partition, shard_id FROM shardq_meta.partition_map");
	ck_assert_int_eq(PQntuples(r), (int)t.partitions);
	for (int i = 0; i < PQntuples(r); i++) {
		int p = atoi(PQgetvalue(r, i, 0));
		ck_assert_msg(c->map[p] == atoi(PQgetvalue(r, i, 1) + 1) - 1,
			      "partition %d: the meta map says %s, a client that followed the "
			      "moves says s%d",
			      p, PQgetvalue(r, i, 1), c->map[p] + 1);
	}
	PQclear(r);
	PQfinish(m);
}

/* Every acknowledged enqueue exists exactly once across the shards (live or
 * completed); it ran once, never on two workers at a time. */
static void check_jobs(void)
{
	size_t n;
	int64_t *all = collect("SELECT id FROM shardq.jobs UNION ALL "
			       "SELECT id FROM shardq.jobs_history",
			       &n);
	qsort(all, n, sizeof(int64_t), test_cmp_i64);
	for (size_t i = 1; i < n; i++)
		ck_assert_msg(all[i] != all[i - 1], "job %lld exists twice", (long long)all[i]);
	for (size_t i = 0; i < L.acked.n; i++)
		ck_assert_msg(bsearch(&L.acked.v[i], all, n, sizeof(int64_t), test_cmp_i64) != NULL,
			      "acknowledged job %lld is lost", (long long)L.acked.v[i]);
	/* at most one live job per (type, key) */
	size_t nk;
	int64_t *dups = collect("SELECT count(*) - count(DISTINCT (task, active_uid)) FROM "
				"shardq.jobs WHERE status IN ('ready','starting','running') "
				"AND active_uid IS NOT NULL",
				&nk);
	for (size_t i = 0; i < nk; i++)
		ck_assert_int_eq(dups[i], 0);
	free(dups);
	/* the execution log: each job ran once */
	int64_t *ran = malloc((L.nruns + 1) * sizeof(int64_t));
	for (size_t i = 0; i < L.nruns; i++)
		ran[i] = L.runs[i].id;
	qsort(ran, L.nruns, sizeof(int64_t), test_cmp_i64);
	for (size_t i = 1; i < L.nruns; i++)
		ck_assert_msg(ran[i] != ran[i - 1], "job %lld ran twice", (long long)ran[i]);
	free(ran);
	free(all);
}

/* The shard index holding job id's history row, or -1. */
static int history_shard(int64_t id)
{
	char sql[128];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs_history WHERE id = %lld",
		 (long long)id);
	for (int s = 0; s < t.nshards; s++)
		if (testdb_scalar(&t, s, sql) > 0)
			return s;
	return -1;
}

static sq_client *client_with(const double *weights, sq_config **cfg)
{
	char *ini = testdb_ini(&t, weights, NULL);
	sq_client *c;
	sq_error err;
	OKE(sq_config_parse(ini, "weights.ini", cfg, &err));
	free(ini);
	OKE(sq_client_open(*cfg, 0, &c, &err));
	return c;
}

/* Keys of type `long` whose partitions the plan moves to shard `to`. */
static void enqueue_long_on_moving(const sq_plan *p, int to, int n, int64_t *out)
{
	char key[32];
	for (int i = 0, got = 0; got < n; i++) {
		snprintf(key, sizeof(key), "long-%d", i);
		uint32_t part = sq_partition_of_key(key, strlen(key), t.partitions);
		if (p->to[part] != to || p->from[part] == to)
			continue;
		out[got++] = enqueue_one(t.client, "long", key, NULL, NULL);
	}
}

static long long longs_running(void)
{
	return testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE task = 'long' AND status = "
			      "'running'");
}

START_TEST(add_fifth_shard_under_load)
{
	double w4[] = {1, 1, 1, 1, 0}, w5[] = {1, 1, 1, 1, 1};
	sq_config *cfg5;
	sq_error err;
	sq_plan *plan;
	int64_t longs[6];
	ck_assert_msg(testdb_ports(t.ports, 16) >= 5, "this test needs five shards");
	testdb_open_w(&t, "sqt_moves_add", 5, 1024, types, w4);
	sq_client *c5 = client_with(w5, &cfg5);
	OKE(sq_rebalance_plan(c5, &plan, &err));
	/* about a fifth moves, all of it to the new shard, nothing else */
	ck_assert_int_eq(plan->before[4], 0);
	ck_assert_msg(plan->moving > 1024 / 5 * 0.8 && plan->moving < 1024 / 5 * 1.2, "moving %lld",
		      (long long)plan->moving);
	for (unsigned p = 0; p < 1024; p++)
		if (plan->from[p] != plan->to[p])
			ck_assert_int_eq(plan->to[p], 4);
	load_start(2, 2, 4);
	/* jobs that will be running while their partition moves */
	enqueue_long_on_moving(plan, 4, 6, longs);
	double end = test_now_s() + testdb_stall_s();
	while (longs_running() < 6 && test_now_s() < end)
		usleep(20000);
	ck_assert_msg(longs_running() == 6, "%lld of the 6 long jobs running", longs_running());
	sq_move_opts o;
	sq_move_opts_init(&o);
	o.set_size = 64;
	double t0 = test_now_s();
	uint64_t rows0 = t.client->map_rows_read;
	OKE(sq_rebalance(c5, &o, &err));
	printf("add a fifth shard: %lld partitions moved under load in %.2fs\n",
	       (long long)plan->moving, test_now_s() - t0);
	/* they ran throughout their partitions' moves */
	ck_assert_int_eq(longs_running(), 6);
	/* a client that was open throughout follows the map by reading only
	 * the partitions each set moved, however often it looked (it read
	 * all 1,024 rows every time before meta schema 4) */
	check_client_map(t.client);
	ck_assert_msg(t.client->map_rows_read - rows0 == (uint64_t)plan->moving,
		      "the client read %llu rows of the map to follow %lld partitions moved",
		      (unsigned long long)(t.client->map_rows_read - rows0),
		      (long long)plan->moving);
	load_wait_acked(100); /* the load goes on after the moves */
	load_stop();
	/* the producers, which enqueued into the moving partitions, read the
	 * map once whole and then each moved partition once: waiting for a
	 * freeze to end read nothing (it read all of it on every retry) */
	for (int i = 0; i < L.nprod; i++)
		ck_assert_msg(L.prod[i].map_rows_read <= t.partitions + (uint64_t)plan->moving,
			      "producer %d read %llu rows of the map; %u partitions, %lld moved", i,
			      (unsigned long long)L.prod[i].map_rows_read, t.partitions,
			      (long long)plan->moving);
	check_ownership();
	check_jobs();
	/* exactly the planned partitions are on s5 now */
	ck_assert_int_eq(testdb_scalar(&t, 4,
				       "SELECT count(*) FROM shardq.partition_state WHERE "
				       "state = 'owned'"),
			 plan->moving);
	/* the jobs that ran during their move completed on the new shard */
	for (int i = 0; i < 6; i++)
		ck_assert_msg(history_shard(longs[i]) == 4, "long job %lld completed on s%d",
			      (long long)longs[i], history_shard(longs[i]) + 1);
	printf("load: %zu jobs acknowledged and completed once each\n", L.acked.n);
	ck_assert_int_gt(L.acked.n, 100);
	sq_plan_free(plan);
	sq_client_close(c5);
	sq_config_free(cfg5);
	load_free();
	test_check_cluster(&t);
	testdb_close(&t);
}
END_TEST

START_TEST(drain_a_shard_under_load)
{
	double w[] = {1, 1, 1, 0};
	sq_config *cfg;
	sq_error err;
	testdb_open(&t, "sqt_moves_drain", 4, 512, types);
	sq_client *c = client_with(w, &cfg);
	load_start(2, 2, 4);
	load_wait_acked(200); /* the moves start under load */
	sq_move_opts o;
	sq_move_opts_init(&o);
	o.set_size = 50;
	OKE(sq_rebalance(c, &o, &err));
	load_wait_acked(100); /* and the load goes on after them */
	load_stop();
	check_ownership();
	check_jobs();
	/* the drained shard holds no live job and owns nothing */
	ck_assert_int_eq(testdb_scalar(&t, 3, "SELECT count(*) FROM shardq.jobs"), 0);
	ck_assert_int_eq(testdb_scalar(&t, 3,
				       "SELECT count(*) FROM shardq.partition_state WHERE "
				       "state = 'owned'"),
			 0);
	sq_client_close(c);
	sq_config_free(cfg);
	load_free();
	test_check_cluster(&t);
	testdb_close(&t);
}
END_TEST

static char ini_path[600];

static char cli_out[16384];

/* Runs the CLI on this cluster's config; its output is left in cli_out. */
static int cli(const char *env, const char *args)
{
	return test_cli(env, cli_out, sizeof(cli_out), "-c %s %s", ini_path, args);
}

static int64_t last_move(void)
{
	return testdb_scalar(&t, 0, "SELECT max(move_id) FROM shardq_meta.moves");
}

static void write_ini(void)
{
	testdb_path(ini_path, sizeof(ini_path), "shardq.ini");
	FILE *f = fopen(ini_path, "w");
	fputs(t.ini, f);
	fclose(f);
}

/* The mover killed at every named step, then resumed; and aborted where an
 * abort is allowed. Load runs throughout. */
START_TEST(killed_mover_resumes_or_aborts)
{
	static const char *points[] = {"after_prepare", "after_freeze", "during_drain",
				       "mid_copy",      "before_copy",  "after_copy_commit",
				       "after_switch",  "mid_cleanup"};
	char args[256], env[128];
	testdb_open(&t, "sqt_moves_kill", 4, 256, types);
	write_ini();
	/* writes during every step; a light load, as the steps are many */
	load_start(1, 1, 1);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 8; i++) {
			/* mid_copy is in the pre-copy, before_copy under the freeze */
			int abortable = i < 5;
			if (round == 1 && !abortable)
				continue;
			/* alternate the direction so every shard gives and takes */
			int from = (i + round) % 4, to = (i + round + 1) % 4;
			snprintf(env, sizeof(env), "SHARDQ_FAILPOINT=%s", points[i]);
			snprintf(args, sizeof(args), "move --count 8 --from s%d --to s%d", from + 1,
				 to + 1);
			int rc = cli(env, args);
			ck_assert_msg(rc == 99,
				      "%s: the mover exited %d, not at the failpoint:\n%s",
				      points[i], rc, cli_out);
			int64_t id = last_move();
			char step[64];
			snprintf(args, sizeof(args),
				 "SELECT count(*) FROM shardq_meta.moves WHERE move_id = %lld AND "
				 "finished_at IS NULL",
				 (long long)id);
			ck_assert_int_eq(testdb_scalar(&t, 0, args), 1);
			if (round == 0) {
				rc = cli(NULL, "moves --resume all");
				ck_assert_msg(rc == 0, "%s: resume exited %d:\n%s", points[i], rc,
					      cli_out);
				snprintf(step, sizeof(step), "done");
			} else {
				snprintf(args, sizeof(args), "moves --abort %lld", (long long)id);
				rc = cli(NULL, args);
				ck_assert_msg(rc == 0, "%s: abort exited %d:\n%s", points[i], rc,
					      cli_out);
				snprintf(step, sizeof(step), "aborted");
				/* the partitions stay with their old shard */
				snprintf(args, sizeof(args),
					 "SELECT count(*) FROM shardq_meta.partition_map m JOIN "
					 "shardq_meta.moves v ON m.partition = ANY(v.partitions) "
					 "WHERE "
					 "v.move_id = %lld AND m.shard_id <> v.from_shard",
					 (long long)id);
				ck_assert_int_eq(testdb_scalar(&t, 0, args), 0);
			}
			snprintf(args, sizeof(args),
				 "SELECT count(*) FROM shardq_meta.moves WHERE move_id = %lld AND "
				 "step = "
				 "'%s'",
				 (long long)id, step);
			ck_assert_msg(testdb_scalar(&t, 0, args) == 1, "%s: move %lld is not %s",
				      points[i], (long long)id, step);
			check_ownership();
		}
	}
	/* an abort after the copy commit is refused */
	ck_assert_int_eq(
		cli("SHARDQ_FAILPOINT=after_copy_commit", "move --count 4 --from s1 --to s2"), 99);
	snprintf(args, sizeof(args), "moves --abort %lld", (long long)last_move());
	ck_assert_int_eq(cli(NULL, args), 8);
	ck_assert_int_eq(cli(NULL, "moves --resume all"), 0);
	load_stop();
	check_ownership();
	check_jobs();
	testdb_tmpdir_remove();
	load_free();
	test_check_cluster(&t);
	testdb_close(&t);
}
END_TEST

/* A mover that dies and is resumed (or its move aborted) only after the
 * moving jobs' leases would have run out costs no job a second run (issue
 * 43, item 7). Here m's starting lease is 2 s; the mover is killed under
 * its freeze, after its copy's commit, and under its freeze again (then
 * aborted), and each time left dead for three leases while the load runs:
 * the jobs claimed in the moving partitions wait for the move with their
 * starts and completions, and then finish, each in one run. */
START_TEST(a_mover_that_dies_costs_no_second_run)
{
	static const char *points[] = {"after_freeze", "after_copy_commit", "before_copy"};
	char args[512], env[128];
	testdb_open(&t, "sqt_moves_rerun", 2, 64,
		    "[type m]\nhistory = true\nstarting_timeout = 2s\nexecution_timeout = 4s\n"
		    "[type long]\nhistory = true\n");
	write_ini();
	load_start(1, 1, 4);
	for (int i = 0; i < 3; i++) {
		int from = i % 2, to = 1 - from, k = 0, n = 0;
		sq_error err;
		OKE(sq_client_refresh_map(t.client, &err));
		k = snprintf(args, sizeof(args), "move --partitions ");
		for (uint32_t p = 0; p < 64 && n < 12; p++)
			if (sq_client_shard_of_partition(t.client, p) == from)
				k += snprintf(args + k, sizeof(args) - (size_t)k, "%s%u",
					      n++ ? "," : "", p);
		snprintf(args + k, sizeof(args) - (size_t)k, " --to s%d", to + 1);
		load_wait_acked(300); /* jobs in flight everywhere */
		snprintf(env, sizeof(env), "SHARDQ_FAILPOINT=%s", points[i]);
		int rc = cli(env, args);
		ck_assert_msg(rc == 99, "%s: the mover exited %d, not at the failpoint:\n%s",
			      points[i], rc, cli_out);
		/* dead for three starting leases, the load going on */
		double dead = test_now_s();
		while (test_now_s() - dead < 6)
			usleep(100000);
		snprintf(args, sizeof(args), i == 2 ? "moves --abort %lld" : "moves --resume %lld",
			 (long long)last_move());
		rc = cli(NULL, args);
		ck_assert_msg(rc == 0, "%s: %s exited %d:\n%s", points[i], args, rc, cli_out);
		load_wait_acked(300);
	}
	load_stop();
	check_ownership();
	check_jobs();
	long long again =
		testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history WHERE attempt > 1");
	printf("a dead mover: %zu jobs, %lld finished at attempt 2 or later\n", L.acked.n, again);
	ck_assert_msg(again == 0, "%lld jobs ran again after a mover died", again);
	load_free();
	testdb_tmpdir_remove();
	test_check_cluster(&t);
	testdb_close(&t);
}
END_TEST

/* A router that missed the NOTIFY (its map is stale) still routes right:
 * the old shard answers "moved", the router refreshes and resends. */
START_TEST(stale_router_still_routes)
{
	sq_error err;
	testdb_open(&t, "sqt_moves_stale", 3, 64, types);
	sq_client *x = testdb_client(&t);
	/* a job claimed and started before the move, completed after it */
	int64_t before = enqueue_one(x, "m", "running-during-move", NULL, NULL);
	uint32_t part = sq_partition_of_id(before);
	int from = sq_client_shard_of_partition(x, part), to = (from + 1) % 3;
	sq_job *js;
	size_t n = claim_type(x, "wx", "m", 10, &js);
	ck_assert_uint_eq(n, 1);
	sq_job_ref ref = {js[0].id, js[0].attempt};
	sq_status st;
	OKE(sq_start(x, "wx", &ref, 1, &st, &err));
	ck_assert_int_eq(st, SQ_OK);
	sq_jobs_free(js, n);
	/* and one of the same partition claimed, not started (starting) */
	char key[32], sql[160];
	for (int i = 0;; i++) {
		snprintf(key, sizeof(key), "s%d", i);
		if (sq_partition_of_key(key, strlen(key), 64) == part)
			break;
	}
	enqueue_one(x, "m", key, NULL, NULL);
	n = claim_type(x, "wx", "m", 10, &js);
	ck_assert_uint_eq(n, 1);
	sq_job_ref ref2 = {js[0].id, js[0].attempt};
	sq_jobs_free(js, n);
	/* another client moves the partition */
	char to_id[8];
	snprintf(to_id, sizeof(to_id), "s%d", to + 1);
	OKE(sq_move(t.client, &part, 1, to_id, NULL, NULL, &err));
	/* both jobs in flight went over, and none stayed behind */
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs WHERE partition = %u "
		 "AND status IN ('starting', 'running') AND worker = 'wx'",
		 part);
	ck_assert_int_eq(testdb_scalar(&t, to, sql), 2);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs WHERE partition = %u", part);
	ck_assert_int_eq(testdb_scalar(&t, from, sql), 0);
	/* x missed it all: its map still says `from`, no NOTIFY, no poll soon */
	if (x->map_listen) {
		PQfinish(x->map_listen);
		x->map_listen = NULL;
	}
	x->map_checked_at = 1e12;
	x->map[part] = from;
	int64_t v0 = x->map_version;
	x->map_version = v0 - 1;
	ck_assert_int_eq(sq_client_shard_of_partition(x, part), from);
	OKE(sq_complete(x, "wx", &ref, 1, &st, &err));
	ck_assert_int_eq(st, SQ_OK);
	ck_assert_int_eq(history_shard(before), to);
	OKE(sq_complete(x, "wx", &ref2, 1, &st, &err));
	ck_assert_int_eq(st, SQ_OK);
	ck_assert_int_eq(history_shard(ref2.id), to);
	ck_assert_int_eq(sq_client_shard_of_partition(x, part), to);
	/* and enqueue of a key in that partition lands on the new shard */
	x->map[part] = from;
	sq_enqueue_outcome o;
	for (int i = 0;; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		if (sq_partition_of_key(key, strlen(key), 64) == part)
			break;
	}
	int64_t id = enqueue_one(x, "m", key, NULL, &o);
	ck_assert_int_eq(o, SQ_ENQ_INSERTED);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs WHERE id = %lld",
		 (long long)id);
	ck_assert_int_eq(testdb_scalar(&t, to, sql), 1);
	ck_assert_int_eq(testdb_scalar(&t, from, sql), 0);
	sq_client_close(x);
	test_check_cluster(&t);
	testdb_close(&t);
}
END_TEST

typedef struct bg_enqueue {
	sq_client *c;
	int64_t id;
	sq_enqueue_outcome outcome;
	double took;
} bg_enqueue;

static void *enqueue_during(void *arg)
{
	bg_enqueue *b = arg;
	double t0 = test_now_s();
	b->id = enqueue_one(b->c, "m", "the-key", "{\"during\":true}", &b->outcome);
	b->took = test_now_s() - t0;
	return NULL;
}

/* The same dedup key enqueued before, during and after a move: one job. */
/* A job that finished before its partition moved is still found by id,
 * with its last error: its history row stays on the shard where it ran
 * (docs/moves.md), which the map no longer names. */
START_TEST(a_finished_job_is_found_after_its_partition_moved)
{
	sq_error err;
	sq_status st;
	testdb_open(&t, "sqt_moves_found", 2, 64,
		    "[type h]\nhistory = true\nmax_attempts = 3\nbackoff = constant\n"
		    "backoff_base = 0s\n");
	int64_t id = enqueue_one(t.client, "h", "the-key", NULL, NULL);
	/* a first run fails, the second completes */
	for (int r = 0; r < 2; r++) {
		sq_job *js;
		size_t n = 0;
		double end = test_now_s() + testdb_stall_s();
		while (!(n = claim_type(t.client, "w", "h", 1, &js)) && test_now_s() < end)
			usleep(10000);
		ck_assert_msg(n == 1, "run %d: the job was never claimed", r + 1);
		sq_job_ref ref = {js[0].id, js[0].attempt};
		sq_jobs_free(js, n);
		OKE(sq_start(t.client, "w", &ref, 1, &st, &err));
		sq_fail_req fr = {ref, "the first run failed", 0};
		if (r == 0)
			OKE(sq_fail(t.client, "w", &fr, 1, &st, &err));
		else
			OKE(sq_complete(t.client, "w", &ref, 1, &st, &err));
		ck_assert_int_eq(st, SQ_OK);
	}
	uint32_t part = sq_partition_of_id(id);
	int from = sq_client_shard_of_partition(t.client, part);
	char to_id[8];
	snprintf(to_id, sizeof(to_id), "s%d", 2 - from);
	OKE(sq_move(t.client, &part, 1, to_id, NULL, NULL, &err));
	ck_assert_int_eq(sq_client_shard_of_partition(t.client, part), 1 - from);
	sq_job j;
	OKE(sq_get_job(t.client, id, &j, &err));
	ck_assert_int_eq(j.status, SQ_COMPLETED);
	ck_assert_int_eq(j.shard, from);
	ck_assert_int_eq(j.max_attempts, 3); /* the type's: history keeps none */
	sq_job_clear(&j);
	char *e = NULL;
	OKE(sq_get_job_error(t.client, id, &e, &err));
	ck_assert_msg(e && !strcmp(e, "the first run failed"), "last error: %s", e ? e : "(none)");
	free(e);
	ck_assert_int_eq(sq_get_job(t.client, id + 65536 * 1000, &j, &err), SQ_ENOTFOUND);
	testdb_close(&t);
}
END_TEST

START_TEST(same_key_before_during_after_move)
{
	sq_enqueue_outcome o;
	testdb_open(&t, "sqt_moves_key", 3, 64, types);
	write_ini();
	int64_t id = enqueue_one(t.client, "m", "the-key", NULL, &o);
	ck_assert_int_eq(o, SQ_ENQ_INSERTED);
	uint32_t part = sq_partition_of_id(id);
	int from = sq_client_shard_of_partition(t.client, part), to = (from + 1) % 3;
	/* a mover that pauses half a second after the freeze */
	char args[128];
	snprintf(args, sizeof(args), "move --partitions %u --to s%d", part, to + 1);
	pid_t pid = fork();
	if (pid == 0) {
		char cmd[512];
		snprintf(cmd, sizeof(cmd), "SHARDQ_FAILPOINT_SLEEP=after_freeze:700 %s -c %s %s",
			 getenv("SHARDQ_CLI"), ini_path, args);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	/* wait for the freeze, then enqueue the key while the move is on */
	double end = test_now_s() + testdb_stall_s();
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.partition_state WHERE partition = %u AND state = "
		 "'moving_out'",
		 part);
	while (testdb_scalar(&t, from, sql) == 0 && test_now_s() < end)
		usleep(5000);
	ck_assert_int_eq(testdb_scalar(&t, from, sql), 1);
	bg_enqueue b = {testdb_client(&t), 0, 0, 0};
	pthread_t th;
	pthread_create(&th, NULL, enqueue_during, &b);
	pthread_join(th, NULL);
	int status;
	waitpid(pid, &status, 0);
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	printf("an enqueue during the move waited %.3fs, then found the job\n", b.took);
	ck_assert_int_eq(b.outcome, SQ_ENQ_DUPLICATE);
	ck_assert_int_eq(b.id, id);
	int64_t after = enqueue_one(t.client, "m", "the-key", NULL, &o);
	ck_assert_int_eq(o, SQ_ENQ_DUPLICATE);
	ck_assert_int_eq(after, id);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE active_uid = "
					"'the-key' AND status IN ('ready','starting','running')"),
			 1);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs WHERE id = %lld",
		 (long long)id);
	ck_assert_int_eq(testdb_scalar(&t, to, sql), 1);
	sq_client_close(b.c);
	testdb_tmpdir_remove();
	test_check_cluster(&t);
	testdb_close(&t);
}
END_TEST

/* Keys of type m: `n` whose partition is `part` (want 1) or another
 * partition of shard `shard` (want 0), named PREFIX0, PREFIX1, ... */
static void keys_on(const sq_client *c, char (*out)[16], int n, const char *prefix, uint32_t part,
		    int shard, int want)
{
	for (int i = 0, got = 0; got < n; i++) {
		char key[16];
		snprintf(key, sizeof(key), "%s%d", prefix, i);
		uint32_t p = sq_partition_of_key(key, strlen(key), 64);
		if ((p == part) == want && sq_client_shard_of_partition(c, p) == shard)
			snprintf(out[got++], 16, "%s", key);
	}
}

typedef struct held_call {
	sq_job_spec js[21];
	sq_enqueue_result res[21];
	sq_status st;
} held_call;

static void enqueue_held_call(void *arg)
{
	held_call *h = arg;
	sq_error err;
	sq_client *c = testdb_client(&t);
	h->st = sq_enqueue(c, h->js, 21, h->res, &err);
	sq_client_close(c);
}

static long long part_state(int shard, uint32_t part, const char *state)
{
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.partition_state WHERE partition = %u AND state = "
		 "'%s'",
		 part, state);
	return testdb_scalar(&t, shard, sql);
}

/* Runs statement sql on shard s; it must change exactly `rows` rows. */
static void exec_rows(int s, const char *sql, const char *rows)
{
	PGconn *pg = testdb_pg(&t, s);
	PGresult *r = PQexec(pg, sql);
	ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK && !strcmp(PQcmdTuples(r), rows),
		      "%s: %s (%s rows)", sql, PQerrorMessage(pg), PQcmdTuples(r));
	PQclear(r);
	PQfinish(pg);
}

/* The error and DETAIL of shardq.check_owned(parts) on shard s ("" for
 * none), as "SQLSTATE|DETAIL" (malloc'd). */
static char *check_owned_says(int s, const char *parts)
{
	char sql[160];
	snprintf(sql, sizeof(sql), "SELECT shardq.check_owned('%s')", parts);
	PGconn *pg = testdb_pg(&t, s);
	PGresult *r = PQexec(pg, sql);
	const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	const char *dt = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
	char out[256];
	snprintf(out, sizeof(out), "%s|%s", st ? st : "", dt ? dt : "");
	PQclear(r);
	PQfinish(pg);
	return strdup(out);
}

/* A shard's refusal names every moving partition of a write (SQM01,
 * "moving: P,..."), and says "moved" (SQM02) when one is gone, whatever
 * else is moving: the client holds only the named partitions' jobs. */
START_TEST(a_refused_write_names_its_moving_partitions)
{
	testdb_open(&t, "sqt_moves_names", 2, 64, types);
	uint32_t p[4];
	int np = 0;
	for (uint32_t i = 0; i < 64 && np < 4; i++)
		if (sq_client_shard_of_partition(t.client, i) == 0)
			p[np++] = i;
	char sql[200];
	snprintf(sql, sizeof(sql),
		 "UPDATE shardq.partition_state SET state = (CASE partition WHEN %u THEN "
		 "'moving_out' WHEN %u THEN 'importing' ELSE 'gone' END)::shardq.part_state "
		 "WHERE partition IN (%u, %u, %u)",
		 p[0], p[1], p[0], p[1], p[2]);
	exec_rows(0, sql, "3");
	char want[4][64], parts4[4][64];
	/* moving and owned: the moving ones, in order */
	snprintf(parts4[0], 64, "{%u,%u,%u}", p[3], p[0], p[1]);
	snprintf(want[0], 64, "SQM01|moving: %u,%u", p[0], p[1]);
	/* owned only */
	snprintf(parts4[1], 64, "{%u}", p[3]);
	snprintf(want[1], 64, "|");
	/* gone wins over moving, and over owned */
	snprintf(parts4[2], 64, "{%u,%u}", p[0], p[2]);
	snprintf(want[2], 64, "SQM02|%u", p[2]);
	snprintf(parts4[3], 64, "{%u,%u}", p[3], p[2]);
	snprintf(want[3], 64, "SQM02|%u", p[2]);
	for (int k = 0; k < 4; k++) {
		char *got = check_owned_says(0, parts4[k]);
		ck_assert_msg(!strcmp(got, want[k]), "check_owned('%s') said %s, not %s", parts4[k],
			      got, want[k]);
		free(got);
	}
	/* no shardq check: the markers above are made up, and it would
	 * rightly find them */
	testdb_close(&t);
}
END_TEST

/* A partition frozen for a move holds only its own jobs: a batch's other
 * jobs on the same shard are written while it is frozen, and the call
 * returns once the move has put the held one on its new shard. */
START_TEST(a_frozen_partition_holds_only_its_own_jobs)
{
	char frozen[1][16], other[20][16], args[1536];
	testdb_open(&t, "sqt_moves_held", 2, 64, types);
	write_ini();
	uint32_t part = sq_partition_of_key("h0", 2, 64);
	int from = sq_client_shard_of_partition(t.client, part), to = 1 - from;
	keys_on(t.client, frozen, 1, "h", part, from, 1);
	keys_on(t.client, other, 20, "o", part, from, 0);
	/* a mover held right after it froze the partition */
	snprintf(args, sizeof(args), "%s exec %s -c %s move --partitions %u --to s%d",
		 testdb_failpoint_hold("after_freeze"), getenv("SHARDQ_CLI"), ini_path, part,
		 to + 1);
	pid_t pid = fork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", args, (char *)NULL);
		_exit(127);
	}
	testdb_failpoint_await("the mover");
	ck_assert_int_eq(part_state(from, part, "moving_out"), 1);

	/* sq_enqueue: one job of the frozen partition and 20 others there */
	held_call h;
	memset(&h, 0, sizeof(h));
	for (int i = 0; i < 21; i++) {
		h.js[i].type = "m";
		h.js[i].key = i ? other[i - 1] : frozen[0];
	}
	testdb_call call;
	testdb_call_start(&call, enqueue_held_call, &h);
	double since = test_now_s();
	while (testdb_scalar(&t, from, "SELECT count(*) FROM shardq.jobs") < 20) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "the 20 jobs of owned partitions were not written in %.0fs while one "
			      "partition of their shard was frozen",
			      testdb_stall_s());
		usleep(5000);
	}
	ck_assert_msg(!atomic_load(&call.done), "sq_enqueue returned before its frozen job");
	ck_assert_int_eq(testdb_scalar(&t, from, "SELECT count(*) FROM shardq.jobs"), 20);

	printf("while partition %u was frozen: 20 of 21 jobs of a batch were written\n", part);

	/* the move goes on: the held jobs are written on the destination */
	testdb_failpoint_go();
	int status;
	waitpid(pid, &status, 0);
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	testdb_call_wait(&call, "sq_enqueue of the held job");
	ck_assert_int_eq(h.st, SQ_OK);
	for (int i = 0; i < 21; i++)
		ck_assert_int_eq(h.res[i].outcome, SQ_ENQ_INSERTED);
	char sql[200];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs WHERE partition = %u AND active_uid = '%s'",
		 part, frozen[0]);
	ck_assert_int_eq(testdb_scalar(&t, to, sql), 1);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(DISTINCT active_uid) FROM shardq.jobs"), 21);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs"), 21);
	check_ownership();
	testdb_tmpdir_remove();
	test_check_cluster(&t);
	testdb_close(&t);
}
END_TEST

/* The rows of partitions `lit` on shard s as "id:status:attempt:priority"
 * by id (malloc'd). */
static char *rows_of(int s, const char *lit)
{
	char sql[400];
	snprintf(sql, sizeof(sql),
		 "SELECT coalesce(string_agg(id || ':' || status || ':' || attempt || ':' || "
		 "priority, ',' ORDER BY id), '') FROM shardq.jobs WHERE partition = ANY('%s')",
		 lit);
	PGconn *pg = testdb_pg(&t, s);
	PGresult *r = PQexec(pg, sql);
	ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(pg));
	char *out = strdup(PQgetvalue(r, 0, 0));
	PQclear(r);
	PQfinish(pg);
	return out;
}

/* A move copies its partitions' rows before it freezes them, and under the
 * freeze catches up with what was written meanwhile, on the source (jobs
 * enqueued, claimed, completed) and on the destination (a row changed
 * there): the destination ends with exactly the source's rows. */
START_TEST(a_move_copies_before_its_freeze_and_catches_up)
{
	char lit[64], cmd[1536], key[16];
	uint32_t parts[4];
	int np = 0;
	testdb_open(&t, "sqt_moves_catch", 2, 64, types);
	write_ini();
	for (uint32_t p = 0; p < 64 && np < 4; p++)
		if (sq_client_shard_of_partition(t.client, p) == 0)
			parts[np++] = p;
	ck_assert_int_eq(np, 4);
	snprintf(lit, sizeof(lit), "{%u,%u,%u,%u}", parts[0], parts[1], parts[2], parts[3]);
	/* 120 jobs in the four partitions, 30 of them claimed */
	for (int i = 0, made = 0; made < 120; i++) {
		snprintf(key, sizeof(key), "c%d", i);
		uint32_t p = sq_partition_of_key(key, strlen(key), 64);
		if (p == parts[0] || p == parts[1] || p == parts[2] || p == parts[3]) {
			enqueue_one(t.client, "m", key, NULL, NULL);
			made++;
		}
	}
	sq_job *claimed;
	size_t nclaimed = claim_type(t.client, "w1", "m", 30, &claimed);
	ck_assert_int_eq(nclaimed, 30);

	snprintf(cmd, sizeof(cmd), "%s exec %s -c %s move --partitions %u,%u,%u,%u --to s2",
		 testdb_failpoint_hold("after_precopy"), getenv("SHARDQ_CLI"), ini_path, parts[0],
		 parts[1], parts[2], parts[3]);
	pid_t pid = fork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	testdb_failpoint_await("the mover");
	/* copied, not frozen: the source still takes writes */
	char sql[200];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs WHERE partition = ANY('%s')",
		 lit);
	ck_assert_int_eq(testdb_scalar(&t, 1, sql), 120);
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.partition_state WHERE partition = ANY('%s') AND "
		 "state = 'owned'",
		 lit);
	ck_assert_int_eq(testdb_scalar(&t, 0, sql), 4);

	/* meanwhile: 10 completed, 20 more claimed, 30 enqueued; and a row
	 * the source leaves alone (the last ready one: claims take the first)
	 * changed on the destination, which the move must not keep */
	sq_job_ref refs[10];
	sq_status out[10];
	sq_error err;
	for (int i = 0; i < 10; i++)
		refs[i] = (sq_job_ref){claimed[i].id, claimed[i].attempt};
	OKE(sq_complete(t.client, "w1", refs, 10, out, &err));
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(out[i], SQ_OK);
	sq_job *more;
	ck_assert_int_eq(claim_type(t.client, "w2", "m", 20, &more), 20);
	for (int i = 0, k = 0; k < 30; i++) {
		snprintf(key, sizeof(key), "n%d", i);
		uint32_t p = sq_partition_of_key(key, strlen(key), 64);
		if (p == parts[0] || p == parts[1] || p == parts[2] || p == parts[3]) {
			enqueue_one(t.client, "m", key, NULL, NULL);
			k++;
		}
	}
	snprintf(sql, sizeof(sql),
		 "UPDATE shardq.jobs SET priority = 99 WHERE id = (SELECT max(id) FROM "
		 "shardq.jobs WHERE partition = ANY('%s') AND status = 'ready')",
		 lit);
	exec_rows(1, sql, "1");
	char *want = rows_of(0, lit);

	testdb_failpoint_go();
	int status;
	waitpid(pid, &status, 0);
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	char *got = rows_of(1, lit), *left = rows_of(0, lit);
	ck_assert_msg(!strcmp(got, want), "the destination holds\n%s\nbut the source held\n%s", got,
		      want);
	ck_assert_str_eq(left, "");
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs"), 140);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE status = "
					"'starting'"),
			 40);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE priority = 99"), 0);
	check_ownership();
	free(want);
	free(got);
	free(left);
	sq_jobs_free(claimed, nclaimed);
	sq_jobs_free(more, 20);
	testdb_tmpdir_remove();
	test_check_cluster(&t);
	testdb_close(&t);
}
END_TEST

/* Only one driver per move: an abort (or a second mover) while a mover is
 * still working on the move is refused. The mover is held in the copy
 * (for far longer than the test needs), then killed; the move is resumed
 * and completes. */
/* `shardq moves --resume all` carries the one move there is to its end:
 * done, each partition owned by one shard, and `jobs` jobs in all. */
static void resume_to_done(long long jobs)
{
	int rc = cli(NULL, "moves --resume all");
	ck_assert_msg(rc == 0, "resume exited %d:\n%s", rc, cli_out);
	ck_assert_int_eq(testdb_scalar(&t, 0,
				       "SELECT count(*) FROM shardq_meta.moves WHERE step = "
				       "'done'"),
			 1);
	check_ownership();
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs"), jobs);
}

START_TEST(abort_refused_while_mover_runs)
{
	testdb_open(&t, "sqt_moves_race", 2, 64, types);
	write_ini();
	for (int i = 0; i < 50; i++) {
		char key[16];
		snprintf(key, sizeof(key), "r%d", i);
		enqueue_one(t.client, "m", key, NULL, NULL);
	}
	pid_t pid = fork();
	if (pid == 0) {
		char cmd[1024], out[600];
		snprintf(cmd, sizeof(cmd),
			 "SHARDQ_FAILPOINT_SLEEP=before_copy:600000 exec %s -c %s move --count 8 "
			 "--from s1 --to s2 > %s 2>&1",
			 getenv("SHARDQ_CLI"), ini_path,
			 testdb_path(out, sizeof(out), "mover.out"));
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	/* before_copy is under the freeze, past the pre-copy: the move is at
	 * its drained step there (mid_copy comes first in the pre-copy) */
	static const char drained[] =
		"SELECT count(*) FROM shardq_meta.moves WHERE step = 'drained'";
	double end = test_now_s() + testdb_stall_s();
	while (testdb_scalar(&t, 0, drained) == 0) {
		ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0,
			      "the mover exited before its drained step (see mover.out)");
		ck_assert_msg(test_now_s() < end,
			      "the mover did not reach its drained step within %.0fs (see "
			      "mover.out)",
			      testdb_stall_s());
		usleep(10000);
	}
	ck_assert_int_eq(testdb_scalar(&t, 0, drained), 1);
	ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0, "the mover exited early");
	char args[64];
	snprintf(args, sizeof(args), "moves --abort %lld", (long long)last_move());
	int rc = cli(NULL, args);
	ck_assert_msg(rc == 8, "abort while the mover runs exited %d:\n%s", rc, cli_out);
	rc = cli(NULL, "moves --resume all");
	ck_assert_msg(rc == 8, "resume while the mover runs exited %d:\n%s", rc, cli_out);
	/* a dry run of the same move is refused as the move itself is, and
	 * changes nothing; the refused move names no move to resume */
	long long moves_before = testdb_scalar(&t, 0, "SELECT count(*) FROM shardq_meta.moves");
	rc = cli(NULL, "move --count 8 --from s1 --to s2 --dry-run");
	ck_assert_msg(rc != 0 && strstr(cli_out, "unfinished move") &&
			      strstr(cli_out, "nothing was changed") &&
			      !strstr(cli_out, "would move"),
		      "a dry run of partitions in a move exited %d:\n%s", rc, cli_out);
	rc = cli(NULL, "move --count 8 --from s1 --to s2");
	ck_assert_msg(rc != 0 && strstr(cli_out, "unfinished move") && !strstr(cli_out, "--resume"),
		      "a move of partitions in a move exited %d:\n%s", rc, cli_out);
	ck_assert_int_eq(testdb_scalar(&t, 0, "SELECT count(*) FROM shardq_meta.moves"),
			 moves_before);
	/* partitions of two shards: refused by the dry run as by the move */
	char both[64];
	snprintf(both, sizeof(both), "move --partitions %u,%u --to s2 --dry-run",
		 (unsigned)testdb_scalar(&t, 0,
					 "SELECT min(partition) FROM shardq_meta.partition_map "
					 "WHERE shard_id = 's1'"),
		 (unsigned)testdb_scalar(&t, 0,
					 "SELECT min(partition) FROM shardq_meta.partition_map "
					 "WHERE shard_id = 's2'"));
	rc = cli(NULL, both);
	ck_assert_msg(rc != 0 && strstr(cli_out, "different shards"), "%s exited %d:\n%s", both, rc,
		      cli_out);
	/* an id that names no move: resume and abort say so alike */
	rc = cli(NULL, "moves --resume 987654");
	int rc2 = cli(NULL, "moves --abort 987654");
	ck_assert_msg(rc != 0 && rc == rc2 && strstr(cli_out, "no move with id 987654"),
		      "resume of no move exited %d, abort %d:\n%s", rc, rc2, cli_out);
	/* the mover is still there, held in its copy */
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	resume_to_done(50);
	snprintf(args, sizeof(args), "moves --resume %lld", (long long)last_move());
	rc = cli(NULL, args);
	ck_assert_msg(rc == 0 && strstr(cli_out, "is done; nothing to do"),
		      "resume of a finished move exited %d:\n%s", rc, cli_out);
	testdb_tmpdir_remove();
	test_check_cluster(&t);
	testdb_close(&t);
}
END_TEST

/*
 * A move sends its statements and its COPY to both shards and waits for
 * each answer. A destination whose host was cut off without a reset, or
 * is stuck, keeps the connections open and never answers, and `shardq
 * move` waited for good. Now it gives up once the statement's own timeout
 * and connect_timeout have passed (for the copy here: move_statement_timeout
 * 3s + connect_timeout 1s; statement_timeout 2s for the rest), names the
 * shard that did not answer, and the move is resumed once that shard
 * answers again: every job is there once. The destination freezes at the
 * failpoint `point`: before the copy starts (the source's side of the copy
 * is watched too, and its wait runs out at the same moment: the message
 * must still name the destination), once the rows are sent, or in the
 * drain, before an ordinary statement (its wait is 3s: the bulk wait the
 * destination took in the move's first transaction ended with it). And
 * the source may stop answering instead (before the copy: the message
 * must name the source, though the destination's wait runs out with it).
 * In a cluster of `nshards`, a move from shard `from` to `to` (numbers
 * from 1); shard `frozen` freezes at failpoint `point`; `want` is what the
 * message must say.
 */
static void frozen_in_move(const char *db, int nshards, int from, int to, int frozen,
			   const char *point, const char *want)
{
	testdb_proxy px;
	char path[600], out[600], cmd[2048];
	testdb_open(&t, db, nshards, 64, types);
	write_ini();
	for (int i = 0; i < 50; i++) {
		char key[16];
		snprintf(key, sizeof(key), "f%d", i);
		enqueue_one(t.client, "m", key, NULL, NULL);
	}
	testdb_proxy_start(&px, t.ports[frozen - 1]);
	char *direct = testdb_ini(&t, NULL,
				  "\n[connection]\nconnect_timeout = 1s\nstatement_timeout = 2s\n"
				  "move_statement_timeout = 3s\n");
	char *ini = testdb_ini_via(direct, t.ports[frozen - 1], px.port);
	free(direct);
	FILE *f = fopen(testdb_path(path, sizeof(path), "frozen.ini"), "w");
	fputs(ini, f);
	fclose(f);
	free(ini);
	testdb_path(out, sizeof(out), "mover.out");
	snprintf(cmd, sizeof(cmd), "%s exec %s -c %s move --count 8 --from s%d --to s%d > %s 2>&1",
		 testdb_failpoint_hold(point), getenv("SHARDQ_CLI"), path, from, to, out);
	pid_t pid = fork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	testdb_failpoint_await("the mover");
	testdb_proxy_freeze(&px, 1);
	testdb_failpoint_go();
	int status = 0;
	double since = test_now_s();
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (test_now_s() - since > testdb_stall_s()) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			ck_abort_msg("shardq move has waited %.0fs for the answer of s%d (frozen "
				     "at %s; move_statement_timeout 3s)",
				     testdb_stall_s(), frozen, point);
		}
		usleep(20000);
	}
	char said[1024] = "";
	f = fopen(out, "r");
	if (f) {
		size_t n = fread(said, 1, sizeof(said) - 1, f);
		said[n] = '\0';
		fclose(f);
	}
	printf("%s: shardq move ended %.2fs after s%d froze, exit %d:\n%s", point,
	       test_now_s() - since, frozen, WIFEXITED(status) ? WEXITSTATUS(status) : -1, said);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) != 0 && strstr(said, want),
		      "the move should fail with \"%s\":\n%s", want, said);
	ck_assert_int_eq(testdb_scalar(&t, 0,
				       "SELECT count(*) FROM shardq_meta.moves WHERE finished_at "
				       "IS NULL"),
			 1);
	/* the shard answers again: the move is resumed (directly, not through
	 * the proxy) and every job is there once */
	testdb_proxy_freeze(&px, 0);
	testdb_proxy_stop(&px);
	resume_to_done(50);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(DISTINCT active_uid) FROM shardq.jobs"), 50);
	testdb_tmpdir_remove();
	test_check_cluster(&t);
	testdb_close(&t);
}

START_TEST(a_move_whose_destination_stops_answering_in_its_copy_resumes)
{
	frozen_in_move("sqt_moves_frozen_mid", 2, 1, 2, 2, "mid_copy",
		       "shard s2 (destination): no answer within 4.0s");
}
END_TEST

START_TEST(a_move_whose_destination_stops_answering_before_its_copy_resumes)
{
	frozen_in_move("sqt_moves_frozen_before", 2, 1, 2, 2, "before_copy",
		       "shard s2 (destination): no answer within 4.0s");
}
END_TEST

START_TEST(a_move_whose_destination_stops_answering_in_its_drain_resumes)
{
	frozen_in_move("sqt_moves_frozen_drain", 2, 1, 2, 2, "during_drain",
		       "shard s2 (destination): no answer within 3.0s");
}
END_TEST

START_TEST(a_move_whose_source_stops_answering_before_its_copy_resumes)
{
	/* s1 holds the meta database: the source is s2 */
	frozen_in_move("sqt_moves_frozen_source", 3, 2, 3, 2, "before_copy",
		       "shard s2 (source): no answer within 4.0s");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("moves");
	ADD_CASE(s, stale_router_still_routes, 3600);
	ADD_CASE(s, same_key_before_during_after_move, 3600);
	ADD_CASE(s, a_finished_job_is_found_after_its_partition_moved, 3600);
	ADD_CASE(s, a_refused_write_names_its_moving_partitions, 3600);
	ADD_CASE(s, a_frozen_partition_holds_only_its_own_jobs, 3600);
	ADD_CASE(s, a_move_copies_before_its_freeze_and_catches_up, 3600);
	ADD_CASE(s, abort_refused_while_mover_runs, 3600);
	ADD_CASE(s, a_move_whose_destination_stops_answering_in_its_copy_resumes, 3600);
	ADD_CASE(s, a_move_whose_destination_stops_answering_before_its_copy_resumes, 3600);
	ADD_CASE(s, a_move_whose_destination_stops_answering_in_its_drain_resumes, 3600);
	ADD_CASE(s, a_move_whose_source_stops_answering_before_its_copy_resumes, 3600);
	ADD_CASE(s, add_fifth_shard_under_load, 3600);
	ADD_CASE(s, drain_a_shard_under_load, 3600);
	ADD_CASE(s, killed_mover_resumes_or_aborts, 3600);
	ADD_CASE(s, a_mover_that_dies_costs_no_second_run, 3600);
	return run_suite(s);
}
