/* test_soak.c - the whole queue under faults: producers, `shardq work --exec` workers killed again and again, a shard restarted, a shard crashed, a mover killed. */
/*
 * Two producer threads enqueue (one with keys, which retries every job whose
 * fate it was not told; one without) while three `shardq work --exec`
 * workers of four slots run the jobs. Meanwhile the test kills a worker with
 * SIGKILL KILLS times (and starts a new one in its place), restarts the meta
 * shard (fast shutdown), starts a move and kills its mover with SIGKILL in
 * the middle of the copy, resumes the move, and crashes the other shard
 * (immediate shutdown: crash recovery on start). Then it lets the queue
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
 * It runs on shards of its own ($SHARDQ_SOAK_PORTS, the shards named by
 * $SHARDQ_SOAK_SHARDS in scripts/shards' directory): scripts/test starts
 * them beside the suites' shards, which are never restarted under another
 * suite. Every wait is for progress and fails on a stall, saying what is
 * left.
 */
#define _GNU_SOURCE
#include "support.h"

#include <errno.h>
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
	int kills, kills_with_jobs, procs_killed, restarts;
	double worst_proc_exit_s;
} fig;

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
static void shards(const char *action, int shard)
{
	char cmd[1024], out[600];
	const char *script = getenv("SHARDQ_SHARDS_SCRIPT");
	snprintf(cmd, sizeof(cmd), "%s %s --only %s >> %s 2>&1", script, action, shard_id[shard],
		 testdb_path(out, sizeof(out), "shards.out"));
	double t0 = test_now_s();
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
	test_worker_cmd c = {ini, w->id, types, exec, NULL, out, 1, TEST_SPAWN_PDEATH};
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

	for (int i = 0; i < NWORKERS; i++)
		spawn(i);
	/* one with keys, one without; MAX_JOBS between them */
	test_producer prod[2] = {{.t = &t,
				  .type = "soak",
				  .prefix = "k",
				  .keyed = 1,
				  .batch = 5,
				  .pause_us = 400000,
				  .max_jobs = MAX_JOBS / 2},
				 {.t = &t,
				  .type = "soak",
				  .batch = 5,
				  .pause_us = 800000,
				  .max_jobs = MAX_JOBS / 2}};
	for (int i = 0; i < 2; i++)
		test_producer_start(&prod[i]);

	pid_t mover = -1;
	int mover_killed_mid_move = 0;
	for (int k = 0; k < KILLS; k++) {
		kill_worker(k % NWORKERS);
		printf("soak: kill %d of %d done (%.0fs in)\n", k + 1, KILLS, test_now_s() - t0);
		usleep((useconds_t)(300000 + (k * 277) % 700 * 1000));
		if (k == 3) {
			/* the meta shard (map, moves, ids) restarted: fast shutdown */
			shards("restart", 0);
			fig.restarts++;
		} else if (k == 6) {
			/* a move held in its copy under the freeze, before the
			 * catch-up (for far longer than the test) */
			char cmd[2048];
			snprintf(cmd, sizeof(cmd),
				 "SHARDQ_FAILPOINT_SLEEP=before_copy:600000 exec %s -c %s move "
				 "--count 8 --from s1 --to s2 > %s 2>&1",
				 getenv("SHARDQ_CLI"), ini, in_dir("mover.out"));
			mover = test_spawn(cmd, TEST_SPAWN_PDEATH);
		} else if (k == 8) {
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
			mover_killed_mid_move = waitpid(mover, NULL, WNOHANG) == 0 && steps > 0;
			kill(mover, SIGKILL);
			waitpid(mover, NULL, 0);
			printf("soak: mover killed with %lld move(s) unfinished\n", steps);
		} else if (k == 10) {
			char out[3000];
			int rc = test_cli(NULL, out, sizeof(out), "-c %s moves --resume all", ini);
			ck_assert_msg(rc == 0, "moves --resume all exited %d:\n%s", rc, out);
		} else if (k == 12) {
			/* the other shard dies: immediate shutdown, crash recovery */
			shards("crash", 1);
			usleep(500000);
			shards("start", 1);
			fig.restarts++;
		}
	}
	for (int i = 0; i < 2; i++)
		test_producer_stop(&prod[i]);
	printf("soak: producers stopped (%.0fs in); draining\n", test_now_s() - t0);
	drain_or_fail();
	double drained = test_now_s() - t0;

	for (int i = 0; i < NWORKERS; i++)
		kill(workers[i].pid, SIGTERM);
	for (int i = 0; i < NWORKERS; i++)
		waitpid(workers[i].pid, NULL, 0);
	wait_no_job_procs("*", "the workers' SIGTERM at the end");

	/* the mover was killed in the middle, and its move completed */
#ifdef SHARDQ_FAILPOINTS
	ck_assert_msg(mover_killed_mid_move,
		      "the mover was not in the middle of its move when killed:\n%s",
		      tail_of("mover.out", 2000));
#endif
	ck_assert_int_eq(
		testdb_scalar(&t, 0, "SELECT count(*) FROM shardq_meta.moves WHERE step <> 'done'"),
		0);
	ck_assert_int_eq(
		testdb_scalar(&t, 0, "SELECT count(*) FROM shardq_meta.moves WHERE step = 'done'"),
		1);

	/* no two runs of one job at once */
	long overlaps = count_lines("overlaps");
	ck_assert_msg(overlaps == 0, "%ld run(s) found their job still running elsewhere:\n%s",
		      overlaps, tail_of("overlaps", 3000));

	/* every acknowledged job completed; nothing failed or is left */
	size_t ndone;
	int64_t *done = completed_ids(&ndone);
	long acked = 0, missing = 0;
	char missing_list[1024] = "";
	for (int p = 0; p < 2; p++)
		for (size_t i = 0; i < prod[p].nacked; i++) {
			acked++;
			if (!bsearch(&prod[p].acked[i], done, ndone, sizeof(*done), test_cmp_i64)) {
				size_t at = strlen(missing_list);
				if (missing++ < 20)
					snprintf(missing_list + at, sizeof(missing_list) - at,
						 " %lld", (long long)prod[p].acked[i]);
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
	printf("soak: %.0fs (drained at %.0fs); %ld jobs acknowledged (keyed %zu, keyless %zu), "
	       "all completed; %ld runs started, %ld ran to the end, %zd completed jobs in "
	       "history; %d worker kills (%d with jobs running, %d job processes killed with "
	       "their worker, the last gone %.2fs after the kill at worst); %d shard restarts; "
	       "mover killed mid-move %s; producers: %ld+%ld resent, %ld+%ld failed calls, "
	       "%ld keyless unknown; 0 overlapping runs\n",
	       test_now_s() - t0, drained, acked, prod[0].nacked, prod[1].nacked, runs, ends,
	       (ssize_t)ndone, fig.kills, fig.kills_with_jobs, fig.procs_killed,
	       fig.worst_proc_exit_s, fig.restarts, mover_killed_mid_move ? "yes" : "no",
	       prod[0].retried, prod[1].retried, prod[0].failed_calls, prod[1].failed_calls,
	       prod[1].unknown);
	if (prod[0].failed_calls + prod[1].failed_calls)
		printf("soak: a failed enqueue said: %s\n",
		       prod[0].last_error[0] ? prod[0].last_error : prod[1].last_error);
	free(done);
	test_producer_free(&prod[0]);
	test_producer_free(&prod[1]);
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
