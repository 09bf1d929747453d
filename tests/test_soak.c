/* test_soak.c - the whole queue under faults: producers (two of the library, one through shardqd), `shardq work --exec` workers killed again and again, a shard restarted, a shard crashed, a mover killed, a transaction left open, a storm of pg_terminate_backend, a shard held near max_connections. */
/*
 * Two producer threads enqueue (one with keys, which retries every job whose
 * fate it was not told; one without) while three `shardq work --exec`
 * workers of four slots run the jobs. Meanwhile the test kills a worker with
 * SIGKILL KILLS times (and starts a new one in its place), restarts the meta
 * shard (fast shutdown), starts a move and kills its mover with SIGKILL in
 * the middle of the copy, resumes the move, and crashes the other shard
 * (immediate shutdown: crash recovery on start). A third producer posts
 * keyed batches to a shardqd. A transaction is left open on the other
 * shard across the move; later every session of the library's and
 * shardqd's is killed again and again for a few seconds (a
 * pg_terminate_backend storm), and the other shard is held two sessions
 * short of max_connections by idle ones while the fleet's sessions there
 * are killed once. After each fault the test prints how long it took
 * until jobs completed again on every shard. Then it lets the queue
 * drain and checks what a user counts on:
 *
 *   - every job whose enqueue was acknowledged (an id came back) completed:
 *     it is in the shards' history as completed, and nothing is left live;
 *   - no two runs of one job overlapped: each run holds a lock on a file of
 *     its job (flock, inherited by all it starts) for as long as any process
 *     of it lives, and a run that finds the lock taken writes to `overlaps`;
 *   - no process of a job outlives its worker: after each SIGKILL, every
 *     process whose environment names that worker is gone (a stall of
 *     testdb_stall_s() fails with their list), and at the end none of the
 *     run's is left.
 *
 * $SHARDQ_SOAK_MINUTES (scripts/soak --minutes N) repeats the faults for
 * that long, the move going back and forth, instead of once.
 *
 * It runs on shards of its own ($SHARDQ_SOAK_PORTS, the shards named by
 * $SHARDQ_SOAK_SHARDS in scripts/shards' directory): scripts/test starts
 * them beside the suites' shards, which are never restarted under another
 * suite. Every wait is for progress and fails on a stall, saying what is
 * left.
 */
#define _GNU_SOURCE
#include "support.h"

#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NWORKERS 3
#define SLOTS    4
#define KILLS    16
#define MAX_JOBS 3000 /* the producers stop here if the faults last long */

static testdb t;
static char dir[512];
static char ini[600];
static char mark[32];
static char shard_id[2][16]; /* scripts/shards' names of the two shards */

typedef struct worker {
	pid_t pid;
	int gen;
	char id[96];
} worker;
static worker workers[NWORKERS];

/* Figures for the closing summary. */
static struct {
	int kills, kills_with_jobs, procs_killed, restarts, storm_killed, held_sessions;
	double worst_proc_exit_s;
} fig;

static test_daemon D;
static const char tok_producer[] = "soak-producer-token-0123456789";

/* DIR/name (kept in a small ring, so that a few can be in use at once). */
static const char *in_dir(const char *name)
{
	static char ring[8][600];
	static int next;
	char *p = ring[next++ % 8];
	return testdb_path(p, sizeof(ring[0]), name);
}

/* The last `max` bytes of a file of the run ("" if none). */
static const char *tail_of(const char *name, size_t max)
{
	static char text[8192];
	return test_tail(in_dir(name), text, max < sizeof(text) ? max + 1 : sizeof(text));
}

static long count_lines(const char *name)
{
	char path[600];
	testdb_path(path, sizeof(path), name);
	FILE *f = fopen(path, "r");
	long n = 0;
	int ch;
	if (!f)
		return 0;
	while ((ch = getc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

/* scripts/shards ACTION --only SHARD; fails the test if it fails. */
/* Set while the test itself holds a shard down (scripts/shards under way,
 * and from a crash to its start): a producer's stall is not counted then. */
static atomic_int shard_down;

static void shards(const char *action, int shard)
{
	char cmd[1024], out[600];
	const char *script = getenv("SHARDQ_SHARDS_SCRIPT");
	snprintf(cmd, sizeof(cmd), "%s %s --only %s >> %s 2>&1", script, action, shard_id[shard],
		 testdb_path(out, sizeof(out), "shards.out"));
	double t0 = test_now_s();
	atomic_store(&shard_down, 1);
	int rc = test_wait_exit(test_spawn(cmd, 0), 0);
	/* a start that failed (its port held for a moment by another process,
	 * say) is tried again until the stall time has passed */
	int starts = !strcmp(action, "start") || !strcmp(action, "restart");
	while (rc != 0 && starts && test_now_s() - t0 < testdb_stall_s()) {
		usleep(500000);
		snprintf(cmd, sizeof(cmd), "%s start --only %s >> %s 2>&1", script, shard_id[shard],
			 testdb_path(out, sizeof(out), "shards.out"));
		rc = test_wait_exit(test_spawn(cmd, 0), 0);
	}
	ck_assert_msg(rc == 0, "%s: exit %d:\n%s", cmd, rc, tail_of("shards.out", 2000));
	printf("soak: scripts/shards %s --only %s took %.1fs\n", action, shard_id[shard],
	       test_now_s() - t0);
	atomic_store(&shard_down, !strcmp(action, "crash")); /* down until its start */
}

static void spawn(int i)
{
	worker *w = &workers[i];
	char types[32], exec[600], out[600];
	w->gen++;
	snprintf(w->id, sizeof(w->id), "soak-%s-w%dg%d", mark, i, w->gen);
	snprintf(types, sizeof(types), "soak:%d", SLOTS);
	snprintf(exec, sizeof(exec), "%s/job.sh", dir);
	snprintf(out, sizeof(out), "%s/w%d.out", dir, i);
	/* dies with the test, should the test die first */
	test_worker_cmd c = {ini, w->id, types, exec, NULL, out, 1, TEST_SPAWN_PDEATH, NULL};
	w->pid = test_spawn_worker(&c);
}

/* The processes of the jobs of worker id (id "*": of any worker of this
 * run). */
static const char *job_env(const char *id)
{
	static char want[160];
	if (!strcmp(id, "*"))
		snprintf(want, sizeof(want), "SHARDQ_WORKER=soak-%s-*", mark);
	else
		snprintf(want, sizeof(want), "SHARDQ_WORKER=%s", id);
	return want;
}

static int job_procs(const char *id, testdb_proc *v, int max)
{
	return testdb_procs(job_env(id), v, max);
}

/* Waits until no process of worker id's jobs (id "*": of any worker of
 * this run) is left (test_wait_no_procs). */
static double wait_no_job_procs(const char *id, const char *why)
{
	return test_wait_no_procs(job_env(id), why);
}

/* SIGKILL of worker i once one of its jobs runs (or after a few seconds
 * without one: a worker may be idle), then checks that its jobs died with
 * it, and starts a new worker in its place. */
static void kill_worker(int i)
{
	worker *w = &workers[i];
	testdb_proc v[64];
	double t0 = test_now_s();
	int n;
	while ((n = job_procs(w->id, v, 64)) == 0 && test_now_s() - t0 < 5)
		usleep(20000);
	char out[32];
	snprintf(out, sizeof(out), "w%d.out", i);
	ck_assert_msg(waitpid(w->pid, NULL, WNOHANG) == 0,
		      "worker %s exited before it was killed; its output:\n%s", w->id,
		      tail_of(out, 3000));
	kill(w->pid, SIGKILL);
	waitpid(w->pid, NULL, 0);
	char why[160];
	snprintf(why, sizeof(why), "SIGKILL of worker %s (%d job process(es) before)", w->id, n);
	double took = wait_no_job_procs(w->id, why);
	fig.kills++;
	fig.kills_with_jobs += n > 0;
	fig.procs_killed += n;
	if (took > fig.worst_proc_exit_s)
		fig.worst_proc_exit_s = took;
	spawn(i);
}

/* Waits until each worker runs a job (or 5 s pass: it may be idle), so
 * that none is in its start when a fault comes: a start that meets a
 * killed session exits (its supervisor starts it again), which this test
 * would take for a worker gone. */
static void workers_started(void)
{
	testdb_proc v[4];
	for (int i = 0; i < NWORKERS; i++) {
		double t0 = test_now_s();
		while (job_procs(workers[i].id, v, 4) == 0 && test_now_s() - t0 < 5)
			usleep(20000);
	}
}

/* ---- checks ------------------------------------------------------------- */

static long long live_left(void *arg)
{
	(void)arg;
	return test_live_jobs(&t);
}

/* The ids of completed jobs in the history of both shards, sorted. */
static int64_t *completed_ids(size_t *n)
{
	size_t cap = 1024, have = 0;
	int64_t *v = malloc(cap * sizeof(*v));
	ck_assert_ptr_nonnull(v);
	for (int s = 0; s < t.nshards; s++) {
		PGconn *c = testdb_pg(&t, s);
		PGresult *r =
			PQexec(c, "SELECT id FROM shardq.jobs_history WHERE status = 'completed'");
		ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "history of shard %d: %s", s,
			      PQerrorMessage(c));
		for (int i = 0; i < PQntuples(r); i++) {
			if (have == cap) {
				cap *= 2;
				v = realloc(v, cap * sizeof(*v));
				ck_assert_ptr_nonnull(v);
			}
			v[have++] = strtoll(PQgetvalue(r, i, 0), NULL, 10);
		}
		PQclear(r);
		PQfinish(c);
	}
	qsort(v, have, sizeof(*v), test_cmp_i64);
	*n = have;
	return v;
}

static void drain_or_fail(void)
{
	long long left;
	if (wait_progress(live_left, NULL, &left))
		return;
	char report[4096], outs[6000] = "";
	testdb_live_report(&t, report, sizeof(report));
	for (int i = 0; i < NWORKERS; i++) {
		char name[32];
		snprintf(name, sizeof(name), "w%d.out", i);
		size_t at = strlen(outs);
		snprintf(outs + at, sizeof(outs) - at, "--- worker %s, last output:\n%s\n",
			 workers[i].id, tail_of(name, 1500));
	}
	ck_abort_msg("the queue did not drain: %lld jobs live, none finished for %.0fs\n%s%s", left,
		     testdb_stall_s(), report, outs);
}

/* ---- a producer through shardqd -------------------------------------------- */

/* Batches of 5 keyed jobs ("h-N") posted to shardqd, a connection each. A
 * batch not answered 200 (a 503 while a shard or the meta database is
 * away, a connection cut) is posted again, the same keys, until it is: the
 * keys dedup, and every id of a 200 is acknowledged. */
typedef struct http_producer {
	pthread_t th;
	atomic_int stop;
	long max_jobs;
	int64_t *acked;
	size_t nacked, cap;
	long resent;
	char last_error[256];
} http_producer;

static void hp_ack(http_producer *h, int64_t id)
{
	if (h->nacked == h->cap) {
		h->cap = h->cap * 2 + 256;
		h->acked = realloc(h->acked, h->cap * sizeof(*h->acked));
		ck_assert_ptr_nonnull(h->acked);
	}
	h->acked[h->nacked++] = id;
}

/* Posts body until shardqd answers 200 (the stall time at most without
 * one while the test holds no shard down: a shard the test crashed is
 * answered 503 until its start, which took over a minute on a loaded
 * machine), and acknowledges its ids. */
static void hp_post(http_producer *h, const char *body)
{
	double since = test_now_s();
	for (;;) {
		hresp r = {0};
		int fd = hc_connect(D.port);
		int got = hc_send(fd, "POST", "/v1/jobs", tok_producer, body) == 0 &&
			  hc_recv(fd, &r) == 0;
		close(fd);
		if (got && r.status == 200) {
			json_t *j = json_loads(r.body, 0, NULL),
			       *res = json_object_get(j, "results");
			size_t i;
			json_t *one;
			ck_assert_msg(json_is_array(res), "shardqd answered 200 with: %s", r.body);
			json_array_foreach(res, i, one)
			{
				json_int_t id = json_integer_value(json_object_get(one, "id"));
				ck_assert_msg(id > 0, "shardqd answered 200 without an id: %s",
					      r.body);
				hp_ack(h, (int64_t)id);
			}
			json_decref(j);
			free(r.body);
			return;
		}
		snprintf(h->last_error, sizeof(h->last_error), "%d %.200s", got ? r.status : 0,
			 got ? r.body : "(no answer)");
		free(r.body);
		h->resent++;
		if (atomic_load(&shard_down))
			since = test_now_s();
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "shardqd answered no enqueue for %.0fs; the last: %s\n%s",
			      testdb_stall_s(), h->last_error, tail_of("shardqd.out", 2000));
		usleep(200000);
	}
}

static void *http_producer_main(void *arg)
{
	http_producer *h = arg;
	for (long made = 0; !atomic_load(&h->stop) && (!h->max_jobs || made < h->max_jobs);
	     made += 5) {
		char body[512];
		snprintf(body, sizeof(body),
			 "{\"jobs\":[{\"type\":\"soak\",\"key\":\"h-%ld\"},{\"type\":\"soak\","
			 "\"key\":"
			 "\"h-%ld\"},{\"type\":\"soak\",\"key\":\"h-%ld\"},{\"type\":\"soak\","
			 "\"key\":"
			 "\"h-%ld\"},{\"type\":\"soak\",\"key\":\"h-%ld\"}]}",
			 made, made + 1, made + 2, made + 3, made + 4);
		hp_post(h, body);
		usleep(500000);
	}
	return NULL;
}

/* shardqd on the soak's cluster, with a producer token. */
static void daemon_start(void)
{
	char hash[160], path[600];
	test_hash_token(tok_producer, hash, sizeof(hash));
	test_write_file(testdb_path(path, sizeof(path), "shardqd.ini"), 0,
			"%s\n[daemon]\nlisten = 127.0.0.1:0\nthreads = 2\n\n[token p]\n%s\n"
			"scopes = producer\n",
			t.ini, hash);
	test_daemon_start(&D, path, "shardqd.out");
}

/* ---- faults and recovery ----------------------------------------------------- */

/* Jobs completed on shard s so far. */
static long long completed_on(int s)
{
	return testdb_scalar(&t, s,
			     "SELECT count(*) FROM shardq.jobs_history WHERE status = 'completed'");
}

/* Waits until jobs complete again on every shard after a fault ended (a
 * stall fails), and prints how long that took. */
static void recovered(const char *fault)
{
	long long base[2];
	double t0 = test_now_s(), at[2] = {0, 0};
	for (int s = 0; s < 2; s++)
		base[s] = completed_on(s);
	while (!at[0] || !at[1]) {
		for (int s = 0; s < 2; s++)
			if (!at[s] && completed_on(s) > base[s])
				at[s] = test_now_s();
		ck_assert_msg(test_now_s() - t0 < testdb_stall_s(),
			      "after %s, no job completed on %s for %.0fs", fault,
			      at[0] ? shard_id[1] : shard_id[0], testdb_stall_s());
		usleep(20000);
	}
	printf("soak: %s: jobs completed again on %s after %.2fs, on %s after %.2fs\n", fault,
	       shard_id[0], at[0] - t0, shard_id[1], at[1] - t0);
}

/* Every session of the library's and shardqd's (application_name shardq)
 * on shard s ended; how many. */
static long long kill_sessions(int s)
{
	return testdb_scalar(&t, s,
			     "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM "
			     "pg_stat_activity WHERE datname = current_database() AND "
			     "application_name = 'shardq' AND pid <> pg_backend_pid()");
}

/* A pg_terminate_backend storm: for 3 s, every 200 ms, on both shards. */
static void storm(void)
{
	long long killed = 0;
	double t0 = test_now_s();
	while (test_now_s() - t0 < 3) {
		for (int s = 0; s < 2; s++)
			killed += kill_sessions(s);
		usleep(200000);
	}
	fig.storm_killed += (int)killed;
	printf("soak: storm: %lld sessions of the workers, producers and shardqd killed in "
	       "%.1fs\n",
	       killed, test_now_s() - t0);
	recovered("the storm");
}

/* Shard s held two sessions short of max_connections by idle sessions,
 * while the fleet's sessions there are killed once: their reconnects meet
 * "too many clients" until the hold ends 2 s later. */
static void hold_connections(int s)
{
	long long max = testdb_scalar(&t, s,
				      "SELECT setting::int FROM pg_settings WHERE name = "
				      "'max_connections'");
	long long now = testdb_scalar(&t, s,
				      "SELECT count(*) FROM pg_stat_activity WHERE "
				      "backend_type = 'client backend'");
	int n = (int)(max - now - 3); /* the test's own query is one */
	PGconn **held = calloc((size_t)(n > 0 ? n : 1), sizeof(*held));
	ck_assert_ptr_nonnull(held);
	char dsn[256];
	snprintf(dsn, sizeof(dsn),
		 "host=127.0.0.1 port=%d dbname=%s user=postgres application_name=soak-hold",
		 t.ports[s], t.db);
	int got = 0;
	while (got < n) { /* up to a refusal: the fleet took a slot meanwhile */
		held[got] = PQconnectdb(dsn);
		if (PQstatus(held[got]) != CONNECTION_OK) {
			PQfinish(held[got]);
			break;
		}
		got++;
	}
	long long killed = kill_sessions(s);
	usleep(2000000);
	for (int i = 0; i < got; i++)
		PQfinish(held[i]);
	free(held);
	fig.held_sessions = got;
	printf("soak: %s held by %d idle sessions (max_connections %lld), %lld of the fleet's "
	       "sessions there killed\n",
	       shard_id[s], got, max, killed);
	recovered("the sessions' hold");
}

/* ---- the test ----------------------------------------------------------- */

static const char types[] = "[type soak]\n"
			    "starting_timeout = 5s\n"
			    "execution_timeout = 20s\n"
			    "max_attempts = 1000\n"
			    "backoff = constant\n"
			    "backoff_base = 100ms\n"
			    "history = true\n";

/* Parses $SHARDQ_SOAK_PORTS and $SHARDQ_SOAK_SHARDS; the suites' shards are
 * never used here. */
static void use_soak_shards(void)
{
	const char *ports = getenv("SHARDQ_SOAK_PORTS");
	const char *names = getenv("SHARDQ_SOAK_SHARDS");
	ck_assert_msg(ports && *ports && names && *names && getenv("SHARDQ_SHARDS_SCRIPT"),
		      "the soak test needs shards of its own, which it restarts and crashes: run "
		      "it through scripts/test (which sets SHARDQ_SOAK_PORTS, SHARDQ_SOAK_SHARDS "
		      "and SHARDQ_SHARDS_SCRIPT)");
	ck_assert_msg(sscanf(names, "%15[^,],%15s", shard_id[0], shard_id[1]) == 2,
		      "SHARDQ_SOAK_SHARDS must name two shards (\"s6,s7\"), not '%s'", names);
	setenv("SHARDQ_TEST_PORTS", ports, 1);
}

START_TEST(soak_kills_restarts_and_a_killed_mover)
{
	use_soak_shards();
	snprintf(dir, sizeof(dir), "%s", testdb_tmpdir());
	snprintf(mark, sizeof(mark), "%s", strrchr(dir, '-') + 1);
	testdb_open(&t, "sqt_soak", 2, 64, types);
	testdb_path(ini, sizeof(ini), "shardq.ini");
	test_write_file(in_dir("shardq.ini"), 1, "%s", t.ini);
	char locks[600];
	ck_assert_int_eq(mkdir(testdb_path(locks, sizeof(locks), "locks"), 0755), 0);
	/* A run: holds its job's lock while any process of it lives; one in 40
	 * runs 12 s (a heartbeat extends its lease), the rest 0.1-0.4 s, in a
	 * child of the shell. */
	test_write_file(
		in_dir("job.sh"), 1,
		"#!/bin/sh\n"
		"d='%s'\n"
		"exec 9>>\"$d/locks/$SHARDQ_JOB_ID\"\n"
		"if ! flock -n 9; then\n"
		"  echo \"$SHARDQ_JOB_ID $SHARDQ_JOB_ATTEMPT $SHARDQ_WORKER\" >> \"$d/overlaps\"\n"
		"fi\n"
		"echo \"$SHARDQ_JOB_ID $SHARDQ_JOB_ATTEMPT $SHARDQ_WORKER\" >> \"$d/starts\"\n"
		"n=$((SHARDQ_JOB_ID %% 40))\n"
		"if [ \"$n\" = 0 ]; then s=12; else s=0.$((n %% 4 + 1)); fi\n"
		"sleep \"$s\" &\n"
		"wait\n"
		"echo \"$SHARDQ_JOB_ID\" >> \"$d/ends\"\n",
		dir);
	double t0 = test_now_s();
	/* $SHARDQ_SOAK_MINUTES: the faults again and again for that long */
	const char *mins = getenv("SHARDQ_SOAK_MINUTES");
	double minutes = mins && *mins ? atof(mins) : 0;
	long max_jobs = minutes > 0 ? 0 : MAX_JOBS / 2;

	for (int i = 0; i < NWORKERS; i++)
		spawn(i);
	daemon_start();
	/* one with keys, one without, one through shardqd */
	test_producer prod[2] = {
		{.t = &t,
		 .type = "soak",
		 .prefix = "k",
		 .keyed = 1,
		 .batch = 5,
		 .pause_us = 400000,
		 .max_jobs = max_jobs},
		{.t = &t, .type = "soak", .batch = 5, .pause_us = 800000, .max_jobs = max_jobs}};
	for (int i = 0; i < 2; i++)
		test_producer_start(&prod[i]);
	static http_producer hprod;
	hprod.max_jobs = max_jobs / 2;
	ck_assert_int_eq(pthread_create(&hprod.th, NULL, http_producer_main, &hprod), 0);

	pid_t mover = -1;
	int cycles = 0, killed_mid_move = 0;
	PGconn *open_txn = NULL;
	long long open_txn_done = 0;
	double open_txn_at = 0;
	/* whole rounds of the faults: a round ends with its move done and its
	 * transaction ended */
	for (int k = 0;
	     k < KILLS || (minutes > 0 && (k % KILLS || test_now_s() - t0 < minutes * 60)); k++) {
		int step = k % KILLS, from = (k / KILLS) % 2, to = 1 - from;
		kill_worker(k % NWORKERS);
		printf("soak: kill %d done (%.0fs in)\n", k + 1, test_now_s() - t0);
		usleep((useconds_t)(300000 + (k * 277) % 700 * 1000));
		if (step == 1) {
			/* a transaction left open on the second shard, across the
			 * move (seed 002): it holds the xmin horizon back */
			open_txn = testdb_pg(&t, 1);
			PGresult *r = PQexec(open_txn, "BEGIN ISOLATION LEVEL REPEATABLE READ; "
						       "SELECT count(*) FROM shardq.jobs");
			ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
			PQclear(r);
			open_txn_done = completed_on(1);
			open_txn_at = test_now_s();
		} else if (step == 3) {
			/* the meta shard (map, moves, ids) restarted: fast shutdown */
			shards("restart", 0);
			fig.restarts++;
			recovered("the meta shard's restart");
		} else if (step == 6) {
			/* a move held in its copy under the freeze, before the
			 * catch-up (for far longer than the test) */
			char cmd[2048];
			snprintf(cmd, sizeof(cmd),
				 "SHARDQ_FAILPOINT_SLEEP=before_copy:600000 exec %s -c %s move "
				 "--count 8 --from %s --to %s > %s 2>&1",
				 getenv("SHARDQ_CLI"), ini, from ? "s2" : "s1", to ? "s2" : "s1",
				 in_dir("mover.out"));
			mover = test_spawn(cmd, TEST_SPAWN_PDEATH);
		} else if (step == 8) {
			/* killed in its copy: the move is left half done. First the
			 * mover must have got there (it is slow to start on a loaded
			 * machine): its move drained, the mover still alive. */
			long long steps;
			double since = test_now_s();
#ifdef SHARDQ_FAILPOINTS
			while (testdb_scalar(&t, 0,
					     "SELECT count(*) FROM shardq_meta.moves "
					     "WHERE step = 'drained'") == 0) {
				ck_assert_msg(waitpid(mover, NULL, WNOHANG) == 0,
					      "the mover exited before its copy:\n%s",
					      tail_of("mover.out", 2000));
				ck_assert_msg(test_now_s() - since < testdb_stall_s(),
					      "the mover did not reach its copy in %.0fs:\n%s",
					      testdb_stall_s(), tail_of("mover.out", 2000));
				usleep(50000);
			}
#endif
			(void)since;
			steps = testdb_scalar(
				&t, 0,
				"SELECT count(*) FROM shardq_meta.moves WHERE step <> 'done'");
			killed_mid_move += waitpid(mover, NULL, WNOHANG) == 0 && steps > 0;
			kill(mover, SIGKILL);
			waitpid(mover, NULL, 0);
			printf("soak: mover killed with %lld move(s) unfinished\n", steps);
		} else if (step == 9) {
			PQfinish(open_txn); /* its end: the transaction rolls back */
			printf("soak: a transaction open %.1fs on %s meanwhile; %lld jobs "
			       "completed "
			       "there\n",
			       test_now_s() - open_txn_at, shard_id[1],
			       completed_on(1) - open_txn_done);
			ck_assert_int_gt(completed_on(1), open_txn_done);
		} else if (step == 10) {
			char out[3000];
			int rc = test_cli(NULL, out, sizeof(out), "-c %s moves --resume all", ini);
			ck_assert_msg(rc == 0, "moves --resume all exited %d:\n%s", rc, out);
			cycles++;
		} else if (step == 12) {
			/* the other shard dies: immediate shutdown, crash recovery */
			shards("crash", 1);
			usleep(500000);
			shards("start", 1);
			fig.restarts++;
			recovered("the crash");
		} else if (step == 13) {
			workers_started();
			storm();
		} else if (step == 14) {
			workers_started();
			hold_connections(1);
		}
	}
	for (int i = 0; i < 2; i++)
		test_producer_stop(&prod[i]);
	atomic_store(&hprod.stop, 1);
	pthread_join(hprod.th, NULL);
	printf("soak: producers stopped (%.0fs in); draining\n", test_now_s() - t0);
	drain_or_fail();
	double drained = test_now_s() - t0;

	for (int i = 0; i < NWORKERS; i++)
		kill(workers[i].pid, SIGTERM);
	for (int i = 0; i < NWORKERS; i++)
		waitpid(workers[i].pid, NULL, 0);
	wait_no_job_procs("*", "the workers' SIGTERM at the end");
	test_daemon_stop(&D, SIGTERM);

	/* the mover was killed in the middle each time, and its moves completed */
#ifdef SHARDQ_FAILPOINTS
	ck_assert_msg(killed_mid_move == cycles,
		      "the mover was in the middle of its move at %d of %d kills:\n%s",
		      killed_mid_move, cycles, tail_of("mover.out", 2000));
#endif
	ck_assert_int_eq(
		testdb_scalar(&t, 0, "SELECT count(*) FROM shardq_meta.moves WHERE step <> 'done'"),
		0);
	ck_assert_int_eq(
		testdb_scalar(&t, 0, "SELECT count(*) FROM shardq_meta.moves WHERE step = 'done'"),
		cycles);

	/* no two runs of one job at once */
	long overlaps = count_lines("overlaps");
	ck_assert_msg(overlaps == 0, "%ld run(s) found their job still running elsewhere:\n%s",
		      overlaps, tail_of("overlaps", 3000));

	/* every acknowledged job completed; nothing failed or is left */
	size_t ndone;
	int64_t *done = completed_ids(&ndone);
	long acked = 0, missing = 0;
	char missing_list[1024] = "";
	for (int p = 0; p < 3; p++) {
		const int64_t *ids = p < 2 ? prod[p].acked : hprod.acked;
		size_t nids = p < 2 ? prod[p].nacked : hprod.nacked;
		for (size_t i = 0; i < nids; i++) {
			acked++;
			if (!bsearch(&ids[i], done, ndone, sizeof(*done), test_cmp_i64)) {
				size_t at = strlen(missing_list);
				if (missing++ < 20)
					snprintf(missing_list + at, sizeof(missing_list) - at,
						 " %lld", (long long)ids[i]);
			}
		}
	}
	ck_assert_msg(missing == 0, "%ld of %ld acknowledged jobs never completed:%s", missing,
		      acked, missing_list);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs"), 0);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history WHERE status <> "
					"'completed'"),
			 0);
	ck_assert_msg(fig.kills_with_jobs >= KILLS / 2,
		      "only %d of %d kills found a job running: the test did not test much",
		      fig.kills_with_jobs, fig.kills);

	long runs = count_lines("starts"), ends = count_lines("ends");
	printf("soak: %.0fs (drained at %.0fs); %ld jobs acknowledged (keyed %zu, keyless %zu, "
	       "through shardqd %zu), all completed; %ld runs started, %ld ran to the end, %zd "
	       "completed jobs in history; %d worker kills (%d with jobs running, %d job "
	       "processes killed with their worker, the last gone %.2fs after the kill at "
	       "worst); %d shard restarts; mover killed mid-move %d of %d times; %d sessions "
	       "killed by the storms; %d idle sessions held; producers: %ld+%ld+%ld resent, "
	       "%ld+%ld failed calls, %ld keyless unknown; 0 overlapping runs\n",
	       test_now_s() - t0, drained, acked, prod[0].nacked, prod[1].nacked, hprod.nacked,
	       runs, ends, (ssize_t)ndone, fig.kills, fig.kills_with_jobs, fig.procs_killed,
	       fig.worst_proc_exit_s, fig.restarts, killed_mid_move, cycles, fig.storm_killed,
	       fig.held_sessions, prod[0].retried, prod[1].retried, hprod.resent,
	       prod[0].failed_calls, prod[1].failed_calls, prod[1].unknown);
	if (prod[0].failed_calls + prod[1].failed_calls)
		printf("soak: a failed enqueue said: %s\n",
		       prod[0].last_error[0] ? prod[0].last_error : prod[1].last_error);
	if (hprod.resent)
		printf("soak: a batch shardqd did not take said: %s\n", hprod.last_error);
	free(done);
	test_producer_free(&prod[0]);
	test_producer_free(&prod[1]);
	free(hprod.acked);
	test_check_cluster(&t);
	testdb_close(&t);
	testdb_tmpdir_remove();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("soak");
	ADD_CASE(s, soak_kills_restarts_and_a_killed_mover, 3600);
	return run_suite(s);
}
