/* test_exec.c - shardq work --exec via shardq-exec: nothing of a job outlives it or its worker. */
/*
 * Real worker processes: kill -9, leftovers, SIGTERM and ^C, a batch, the
 * contract through the helper, and the start-up refusals.
 *
 * Every process of a job carries SHARDQ_WORKER=<this run's worker id> in its
 * environment: the helper, the shell, the command and all it starts. The
 * tests find them in /proc/PID/environ. Waits go on while something moves
 * (a process gone, a job done) and fail after STALL_S seconds of no change,
 * saying what is left; no wait is tuned to a machine's speed. Files go to
 * the run's own directory (testdb_tmpdir, made with mkdtemp).
 */
#define _GNU_SOURCE
#include "support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STALL_S testdb_stall_s()

static testdb t;
static char dir[512]; /* this run's files */
static char ini[600]; /* the cluster's config */
static char mark[64]; /* unique to this run: the worker ids end with it */

static void path_of(char *out, size_t len, const char *name)
{
	snprintf(out, len, "%s/%s", dir, name);
}

/* DIR/name (kept in a small ring, so that a few can be in use at once). */
static const char *in_dir(const char *name)
{
	static char ring[8][512];
	static int next;
	char *p = ring[next++ % 8];
	path_of(p, sizeof(ring[0]), name);
	return p;
}

static int file_exists(const char *name)
{
	char path[512];
	path_of(path, sizeof(path), name);
	return access(path, F_OK) == 0;
}

static void setup(const char *db, const char *types)
{
	snprintf(dir, sizeof(dir), "%s", testdb_tmpdir());
	snprintf(mark, sizeof(mark), "%s", strrchr(dir, '-') + 1);
	testdb_open(&t, db, test_shard_count(), 256, types);
	path_of(ini, sizeof(ini), "shardq.ini");
	test_write_file(in_dir("shardq.ini"), 0, "%s", t.ini);
}

static void cleanup(void)
{
	testdb_close(&t);
	testdb_tmpdir_remove();
}

/* Starts `shardq work --worker ID-<mark> --types TYPES --exec 'DIR/SCRIPT'
 * EXTRA` (SCRIPT "exec NAME": --exec 'exec DIR/NAME'), its output in
 * DIR/ID.out; own_group: as the leader of a process group of its own, as a
 * shell's job would be. */
static pid_t spawn(const char *id, const char *types, const char *script, const char *extra,
		   int own_group)
{
	char wid[160], exec[600], out[600];
	int exec_word = !strncmp(script, "exec ", 5);
	snprintf(wid, sizeof(wid), "%s-%s", id, mark);
	snprintf(exec, sizeof(exec), "%s%s/%s", exec_word ? "exec " : "", dir,
		 script + (exec_word ? 5 : 0));
	snprintf(out, sizeof(out), "%s/%s.out", dir, id);
	test_worker_cmd w = {ini, wid, types, exec, extra, out, 0, own_group ? TEST_SPAWN_GROUP : 0,
			     NULL};
	return test_spawn_worker(&w);
}

static const char *worker_out(const char *id)
{
	char name[128];
	snprintf(name, sizeof(name), "%s.out", id);
	return test_file_text(in_dir(name));
}

/* Waits for the worker to exit; returns its exit code (128+N: signal N).
 * Fails if it is still there after the stall time. */
static int exited(pid_t pid, const char *id)
{
	int rc = test_wait_exit(pid, STALL_S);
	ck_assert_msg(rc >= 0, "worker %s did not exit within %.0fs; its output:\n%s", id, STALL_S,
		      worker_out(id));
	return rc;
}

/* The live processes of this run's jobs: whose environment holds
 * SHARDQ_WORKER=ID-<mark>. */
typedef testdb_proc proc;

static const char *job_env(const char *id)
{
	static char want[160];
	snprintf(want, sizeof(want), "SHARDQ_WORKER=%s-%s", id, mark);
	return want;
}

static int job_procs(const char *id, proc *v, int max)
{
	return testdb_procs(job_env(id), v, max);
}

static void describe(const proc *v, int n, char *out, size_t len)
{
	testdb_procs_describe(v, n, out, len);
}

/* Waits until no process of worker ID's jobs is left (test_wait_no_procs);
 * returns how long it took. */
static double wait_no_job_procs(const char *id, const char *why)
{
	return test_wait_no_procs(job_env(id), why);
}

/* Waits until the job is no longer ready or running (its status), while
 * the worker lives; fails on a stall with the job's processes and the
 * worker's output. */
static sq_job_status wait_job_settled(int64_t id, pid_t worker, const char *wid)
{
	double since = test_now_s();
	for (;;) {
		sq_job j;
		sq_error err;
		OKE(sq_get_job(t.client, id, &j, &err));
		sq_job_status st = j.status;
		sq_job_clear(&j);
		if (st != SQ_READY && st != SQ_RUNNING && st != SQ_STARTING)
			return st;
		int status;
		ck_assert_msg(waitpid(worker, &status, WNOHANG) == 0,
			      "worker %s exited while job %lld was %s; its output:\n%s", wid,
			      (long long)id, sq_job_status_name(st), worker_out(wid));
		if (test_now_s() - since > STALL_S) {
			proc v[64];
			char list[8192];
			int n = job_procs(wid, v, 64);
			describe(v, n < 64 ? n : 64, list, sizeof(list));
			for (int i = 0; i < n && i < 64; i++)
				kill(v[i].pid, SIGKILL);
			kill(worker, SIGKILL);
			ck_assert_msg(0,
				      "job %lld still %s after %.0fs; its processes:\n%s"
				      "worker output:\n%s",
				      (long long)id, sq_job_status_name(st), STALL_S, list,
				      worker_out(wid));
		}
		usleep(20000);
	}
}

/* Waits until every one of the named files exists, while the worker
 * lives; a stall (no new file for STALL_S) fails. */
static void wait_files(const char *prefix, int n, pid_t worker, const char *wid)
{
	double since = test_now_s();
	int have = -1;
	for (;;) {
		int k = 0;
		for (int i = 1; i <= n; i++) {
			char name[128];
			snprintf(name, sizeof(name), "%s%d", prefix, i);
			k += file_exists(name);
		}
		if (k == n)
			return;
		if (k != have)
			have = k, since = test_now_s();
		int status;
		ck_assert_msg(waitpid(worker, &status, WNOHANG) == 0,
			      "worker %s exited with %d of %d %s* files there; its output:\n%s",
			      wid, k, n, prefix, worker_out(wid));
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "%d of %d %s* files after %.0fs of no change; worker output:\n%s", k,
			      n, prefix, STALL_S, worker_out(wid));
		usleep(20000);
	}
}

/* The job's last_error ("" if none). */
static const char *job_error(int64_t id)
{
	static char text[1024];
	char sql[128];
	text[0] = '\0';
	snprintf(sql, sizeof(sql), "SELECT last_error FROM shardq.jobs WHERE id = %lld",
		 (long long)id);
	for (int s = 0; s < t.nshards && !text[0]; s++) {
		PGconn *c = testdb_pg(&t, s);
		PGresult *r = PQexec(c, sql);
		if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
			snprintf(text, sizeof(text), "%s", PQgetvalue(r, 0, 0));
		PQclear(r);
		PQfinish(c);
	}
	return text;
}

/* kill -9 of the worker while its job runs a tree of processes: children,
 * an orphaned grandchild, one in a session of its own, one that ignores
 * SIGTERM/SIGINT/SIGHUP, and the script's own long sleep. None survives. */
START_TEST(kill9_kills_the_job_tree)
{
	enum { LEAVES = 8 };
	setup("sqt_exec_kill", "[type k]\nexecution_timeout = 10m\n");
	test_write_file(in_dir("tree.sh"), 1,
			"#!/bin/sh\n"
			"D=%s\n"
			"sh -c 'echo > $0/up.1; exec sleep 300' $D &\n"
			"sh -c 'echo > $0/up.2; exec sleep 301' $D &\n"
			"( sh -c 'echo > $0/up.3; exec sleep 302' $D & wait ) &\n"
			"( sh -c 'echo > $0/up.4; exec sleep 303' $D & )\n"
			"if command -v setsid > /dev/null; then\n"
			"  setsid sh -c 'echo > $0/up.5; exec sleep 304' $D &\n"
			"else\n"
			"  sh -c 'echo > $0/up.5; exec sleep 304' $D &\n"
			"fi\n"
			"sh -c 'trap \"\" TERM INT HUP; echo > $0/up.6; sleep 305; echo' $D &\n"
			"sh -c 'sh -c \"echo > \\$0/up.7; exec sleep 306\" $0 & wait' $D &\n"
			"echo > $D/up.8\n"
			"sleep 307\n",
			dir);
	int64_t job = enqueue_one(t.client, "k", NULL, NULL, NULL);
	pid_t w = spawn("k9", "k:1", "tree.sh", "--poll 100ms", 0);
	wait_files("up.", LEAVES, w, "k9");
	proc v[64];
	int before = job_procs("k9", v, 64);
	char list[8192];
	describe(v, before < 64 ? before : 64, list, sizeof(list));
	/* the helper, the shell(s) and the leaves at least: the marker works */
	ck_assert_msg(before >= LEAVES + 2, "only %d processes of job %lld found:\n%s", before,
		      (long long)job, list);
	kill(w, SIGKILL);
	waitpid(w, NULL, 0);
	double took = wait_no_job_procs("k9", "kill -9 of the worker");
	printf("kill -9: all %d processes of the job were gone %.3fs after the worker\n", before,
	       took);
	cleanup();
}
END_TEST

/* A command that exits leaving background children (one holding the job's
 * output, one holding nothing of it, one orphaned, one in its own session):
 * the job completes, and nothing of it is left by then. */
START_TEST(leftovers_die_with_the_job)
{
	setup("sqt_exec_left", "[type l]\nhistory = true\n");
	test_write_file(in_dir("left.sh"), 1,
			"#!/bin/sh\n"
			"sleep 300 &\n"
			"sleep 301 > /dev/null 2>&1 < /dev/null &\n"
			"( sleep 302 > /dev/null 2>&1 < /dev/null & )\n"
			"if command -v setsid > /dev/null; then\n"
			"  setsid sleep 303 > /dev/null 2>&1 < /dev/null &\n"
			"fi\n"
			"echo 'left some behind'\n"
			"exit 0\n");
	int64_t job = enqueue_one(t.client, "l", NULL, NULL, NULL);
	pid_t w = spawn("lf", "l:1", "left.sh", "--poll 100ms", 0);
	ck_assert_int_eq(wait_job_settled(job, w, "lf"), SQ_COMPLETED);
	/* the helper reaps everything before it exits, and the job completes
	 * only after that: nothing may be left now */
	proc v[64];
	char list[8192];
	int n = job_procs("lf", v, 64);
	describe(v, n < 64 ? n : 64, list, sizeof(list));
	for (int i = 0; i < n && i < 64; i++)
		kill(v[i].pid, SIGKILL);
	ck_assert_msg(n == 0, "%d process(es) outlived the job:\n%s", n, list);
	kill(w, SIGTERM);
	ck_assert_int_eq(exited(w, "lf"), 0);
	char want[64];
	snprintf(want, sizeof(want), "[job %lld] left some behind", (long long)job);
	ck_assert_msg(strstr(worker_out("lf"), want), "no '%s' in:\n%s", want, worker_out("lf"));
	cleanup();
}
END_TEST

/* SIGTERM to the worker, or SIGINT to its whole process group (^C in a
 * terminal): the running job goes on to its end and completes; exit 0. */
static void signal_lets_job_finish(const char *db, const char *wid, int group_sigint)
{
	setup(db, "[type s]\nhistory = true\n");
	test_write_file(in_dir("slow.sh"), 1,
			"#!/bin/sh\n"
			"echo > %s/started.1\n"
			"sleep 2\n"
			"echo \"$SHARDQ_JOB_ID\" >> %s/finished\n",
			dir, dir);
	int64_t job = enqueue_one(t.client, "s", NULL, NULL, NULL);
	pid_t w = spawn(wid, "s:1", "slow.sh", "--poll 100ms", group_sigint);
	wait_files("started.", 1, w, wid);
	if (group_sigint)
		kill(-w, SIGINT);
	else
		kill(w, SIGTERM);
	ck_assert_int_eq(exited(w, wid), 0);
	sq_job j;
	sq_error err;
	OKE(sq_get_job(t.client, job, &j, &err));
	ck_assert_msg(j.status == SQ_COMPLETED && j.attempt == 1,
		      "job %s at attempt %d (error %s); worker output:\n%s",
		      sq_job_status_name(j.status), j.attempt, job_error(job), worker_out(wid));
	sq_job_clear(&j);
	char want[32];
	snprintf(want, sizeof(want), "%lld\n", (long long)job);
	ck_assert_str_eq(test_file_text(in_dir("finished")), want);
	cleanup();
}

START_TEST(sigterm_lets_running_job_finish)
{
	signal_lets_job_finish("sqt_exec_term", "tm", 0);
}
END_TEST

START_TEST(group_sigint_lets_running_job_finish)
{
	signal_lets_job_finish("sqt_exec_int", "in", 1);
}
END_TEST

/* A batch on 4 slots: every job ran once and completed once. */
START_TEST(batch_completes_exactly_once)
{
	enum { N = 300 };
	setup("sqt_exec_batch", "[type b]\nhistory = true\n");
	test_write_file(in_dir("one.sh"), 1, "#!/bin/sh\necho \"$SHARDQ_JOB_ID\" >> %s/ran\n", dir);
	test_enqueue_n(t.client, "b", N, NULL);
	pid_t w = spawn("bt", "b:4", "one.sh", "--quiet --poll 100ms", 0);
	double since = test_now_s();
	long long left, last = -1;
	while ((left = test_live_jobs(&t)) > 0) {
		if (left != last)
			last = left, since = test_now_s();
		int status;
		ck_assert_msg(waitpid(w, &status, WNOHANG) == 0,
			      "worker exited with %lld jobs left; its output:\n%s", left,
			      worker_out("bt"));
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "%lld jobs left, none done in %.0fs; worker output:\n%s", left,
			      STALL_S, worker_out("bt"));
		usleep(50000);
	}
	kill(w, SIGTERM);
	ck_assert_int_eq(exited(w, "bt"), 0);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history WHERE status = "
					"'completed'"),
			 N);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(DISTINCT id) FROM shardq.jobs_history "
					"WHERE status = 'completed'"),
			 N);
	/* the commands' own log: N runs, N distinct jobs */
	char path[512], line[64];
	path_of(path, sizeof(path), "ran");
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	long long *ids = calloc(N + 1, sizeof(*ids));
	int n = 0;
	while (fgets(line, sizeof(line), f)) {
		ck_assert_msg(n < N, "more than %d runs", N);
		ids[n++] = atoll(line);
	}
	fclose(f);
	ck_assert_int_eq(n, N);
	for (int i = 0; i < n; i++)
		for (int k = i + 1; k < n; k++)
			ck_assert_msg(ids[i] != ids[k], "job %lld ran twice", ids[i]);
	free(ids);
	cleanup();
}
END_TEST

/* The contract through the helper: params on stdin (larger than a pipe),
 * the SHARDQ_ variables, none of the worker's descriptors, output with the
 * job's prefix, exit 100, death by a signal, a command the shell cannot
 * start. */
START_TEST(contract_through_the_helper)
{
	enum { BLOB = 200000 };
	setup("sqt_exec_contract", "[type c]\nmax_attempts = 1\nhistory = true\n");
	test_write_file(
		in_dir("c.sh"), 1,
		"#!/bin/sh\n"
		"D=%s\n"
		"case \"$SHARDQ_JOB_KEY\" in\n"
		"ok)\n"
		"  cat > $D/params\n"
		"  env | grep -E '^SHARDQ_(JOB_|WORKER=)' | sort > $D/env\n"
		"  ls -l /proc/$$/fd\n"
		"  echo 'hello from ok'\n"
		"  echo 'a note on stderr' >&2 ;;\n"
		"perm) echo 'first line' >&2; echo 'bad input: cannot go on' >&2; exit 100 ;;\n"
		"sig) echo 'about to die' >&2; kill -KILL $$ ;;\n"
		"gone) exec /nonexistent/prog ;;\n"
		"esac\n",
		dir);
	char *params = malloc(BLOB + 32);
	strcpy(params, "{\"blob\": \"");
	memset(params + strlen(params), 'x', BLOB);
	strcpy(params + 10 + BLOB, "\"}");
	int64_t ok = enqueue_one(t.client, "c", "ok", params, NULL);
	int64_t perm = enqueue_one(t.client, "c", "perm", NULL, NULL);
	int64_t sig = enqueue_one(t.client, "c", "sig", NULL, NULL);
	int64_t gone = enqueue_one(t.client, "c", "gone", NULL, NULL);
	/* exec: the script is the helper's child, so its death by a signal is
	 * what the helper sees (a shell in between would print "Killed" and
	 * exit 137) */
	pid_t w = spawn("ct", "c:2", "exec c.sh", "--poll 100ms", 0);
	struct {
		int64_t id;
		sq_job_status want;
		const char *error; /* prefix of last_error */
	} cases[] = {
		{ok, SQ_COMPLETED, NULL},
		{perm, SQ_FAILED, "bad input: cannot go on"},
		{sig, SQ_FAILED, "killed by signal 9: about to die"},
		{gone, SQ_FAILED, "the command could not be started (exit 127)"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_int_eq(wait_job_settled(cases[i].id, w, "ct"), cases[i].want);
		const char *e = job_error(cases[i].id);
		if (cases[i].error)
			ck_assert_msg(!strncmp(e, cases[i].error, strlen(cases[i].error)),
				      "job %lld: error '%s', not '%s...'", (long long)cases[i].id,
				      e, cases[i].error);
	}
	kill(w, SIGTERM);
	ck_assert_int_eq(exited(w, "ct"), 0);

	char path[600];
	path_of(path, sizeof(path), "params");
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	char *got = calloc(1, 2 * BLOB);
	size_t n = fread(got, 1, 2 * BLOB - 1, f);
	fclose(f);
	ck_assert_msg(strstr(got, params + 10) != NULL, "params on stdin: %zu bytes, not the %d", n,
		      BLOB);
	free(got);
	free(params);
	char want[256];
	const char *env = test_file_text(in_dir("env"));
	snprintf(want, sizeof(want),
		 "SHARDQ_JOB_ATTEMPT=1\nSHARDQ_JOB_ID=%lld\nSHARDQ_JOB_KEY=ok\n"
		 "SHARDQ_JOB_MAX_ATTEMPTS=1\nSHARDQ_JOB_TYPE=c\nSHARDQ_WORKER=ct-%s\n",
		 (long long)ok, mark);
	ck_assert_msg(strstr(env, want) != NULL, "environment:\n%s\nwanted:\n%s", env, want);
	/* the shell's descriptors beyond 0-2 (listed on its stdout: a redirect
	 * would make the shell keep a copy of its stdout): its script, nothing
	 * of the worker's */
	char fds[16384], prefix[64];
	int listed = 0;
	snprintf(fds, sizeof(fds), "%s", worker_out("ct"));
	snprintf(prefix, sizeof(prefix), "[job %lld] ", (long long)ok);
	for (char *save = NULL, *line = strtok_r(fds, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *arrow = strstr(line, " -> ");
		if (strncmp(line, prefix, strlen(prefix)) || !arrow)
			continue;
		listed++;
		char *num = arrow;
		while (num > line && num[-1] != ' ')
			num--;
		ck_assert_msg(atoi(num) <= 2 ||
				      (!strstr(arrow, "socket:") && !strstr(arrow, "pipe:")),
			      "the job holds a descriptor of the worker: %s", line);
	}
	ck_assert_msg(listed >= 3, "no list of the job's descriptors in:\n%s", worker_out("ct"));
	const char *out = worker_out("ct");
	snprintf(want, sizeof(want), "[job %lld] hello from ok", (long long)ok);
	ck_assert_msg(strstr(out, want) != NULL, "no '%s' in:\n%s", want, out);
	snprintf(want, sizeof(want), "[job %lld] a note on stderr", (long long)ok);
	ck_assert_msg(strstr(out, want) != NULL, "no '%s' in:\n%s", want, out);
	cleanup();
}
END_TEST

/* Runs `shardq ARGS` (with the env prefix, the CLI at cli), which must
 * exit at once (it refuses to start): returns its exit code, its output in
 * out. One that runs on (it started working) is killed after a stall, and
 * fails. */
static int refused(const char *env, const char *cli, const char *args, char *out, size_t len)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "exec env %s %s -c %s %s > %s 2>&1", env, cli, ini, args,
		 in_dir("cli.out"));
	int rc = test_wait_exit(test_spawn(cmd, 0), STALL_S);
	ck_assert_msg(rc >= 0,
		      "shardq %s did not refuse to start: still running after %.0fs; its "
		      "output:\n%s",
		      args, STALL_S, test_file_text(in_dir("cli.out")));
	snprintf(out, len, "%s", test_file_text(in_dir("cli.out")));
	return rc;
}

/* Bad counts exit 2 naming the option and the range; a missing helper
 * exits 1 before anything is claimed. */
START_TEST(startup_refusals)
{
	setup("sqt_exec_refuse", "[type r]\n");
	test_write_file(in_dir("r.sh"), 1, "#!/bin/sh\ntrue\n");
	enqueue_one(t.client, "r", NULL, NULL, NULL);
	const char *cli = getenv("SHARDQ_CLI");
	char args[1024], out[8192];
	static const struct {
		const char *args, *want;
	} bad[] = {
		{"--types r --concurrency 4x", "--concurrency must be a whole number of 1..1024"},
		{"--types r --concurrency 0", "--concurrency must be a whole number of 1..1024"},
		{"--types r --concurrency 99999999999999999999", "--concurrency"},
		{"--types r --buffer -1", "--buffer must be a whole number of 0..100000"},
		{"--types r --buffer ''", "--buffer must be"},
		{"--types r --prefetch 2.5", "--prefetch must be a whole number of 0..100000"},
		{"--types r:0",
		 "the count of type 'r' in --types must be a whole number of 1..1024"},
		{"--types r:3junk", "type 'r'"},
		{"--types r:", "type 'r'"},
		{"--types q:2,r:x", "type 'r'"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(args, sizeof(args), "work %s --exec %s/r.sh", bad[i].args, dir);
		int rc = refused("", cli, args, out, sizeof(out));
		ck_assert_msg(rc == 2 && strstr(out, bad[i].want),
			      "shardq %s: exit %d, output:\n%s\nwanted exit 2 and '%s'", args, rc,
			      out, bad[i].want);
	}
	/* the helper named by the variable is not there */
	snprintf(args, sizeof(args), "work --types r --exec %s/r.sh", dir);
	int rc =
		refused("SHARDQ_EXEC_HELPER=/nonexistent/shardq-exec", cli, args, out, sizeof(out));
	ck_assert_msg(rc == 1 && strstr(out, "SHARDQ_EXEC_HELPER=/nonexistent/shardq-exec") &&
			      strstr(out, "nothing was claimed"),
		      "exit %d:\n%s", rc, out);
	/* a copy of shardq without the helper next to it */
	char copy[512], cmd[2048];
	path_of(copy, sizeof(copy), "shardq");
	snprintf(cmd, sizeof(cmd), "cp %s %s", cli, copy);
	ck_assert_int_eq(system(cmd), 0);
	rc = refused("", copy, args, out, sizeof(out));
	char want[600];
	snprintf(want, sizeof(want), "cannot find shardq-exec next to %s", copy);
	ck_assert_msg(rc == 1 && strstr(out, want) && strstr(out, "reinstall"),
		      "exit %d:\n%s\nwanted '%s'", rc, out, want);
	ck_assert_int_eq(test_live_jobs(&t), 1);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE status = 'ready'"),
			 1);
	cleanup();
}
END_TEST

/* The job script of the lease tests: each run holds a lock on its job's
 * file for as long as any process of it lives; a run that finds the lock
 * taken (another run of the job still alive) notes it in `overlaps`. Runs
 * of attempt 1 (or every attempt, with `every`) write up.1 and wait long;
 * others end at once. */
static void write_lease_job(int every)
{
	test_write_file(
		in_dir("job.sh"), 1,
		"#!/bin/sh\n"
		"d=%s\n"
		"exec 9>>\"$d/lock.$SHARDQ_JOB_ID\"\n"
		"flock -n 9 || echo \"$SHARDQ_JOB_ATTEMPT $SHARDQ_WORKER\" >> \"$d/overlaps\"\n"
		"echo \"$SHARDQ_JOB_ATTEMPT $SHARDQ_WORKER\" >> \"$d/starts\"\n"
		"if [ %d = 1 ] || [ \"$SHARDQ_JOB_ATTEMPT\" = 1 ]; then\n"
		"  echo > \"$d/up.1\"\n"
		"  sleep 300 &\n"
		"  wait\n"
		"fi\n",
		dir, every);
}

/* A worker whose lease writes cannot get through (its loop held where it
 * would send the start, as a shard that cannot be reached would hold it)
 * stops its run before the lease runs out; the job comes back to another
 * worker after the lease, and the two runs never overlap. */
START_TEST(a_run_whose_lease_ran_out_is_stopped)
{
#ifdef SHARDQ_FAILPOINTS
	setup("sqt_exec_lease", "[type l]\nstarting_timeout = 5s\nexecution_timeout = 5s\n"
				"history = true\n");
	write_lease_job(0);
	int64_t job = enqueue_one(t.client, "l", NULL, NULL, NULL);
	setenv("SHARDQ_FAILPOINT_SLEEP", "worker_lease_write:900000", 1);
	pid_t a = spawn("a", "l:1", "job.sh", "--poll 100ms", 0);
	unsetenv("SHARDQ_FAILPOINT_SLEEP");
	wait_files("up.", 1, a, "a");
	pid_t b = spawn("b", "l:1", "job.sh", "--poll 100ms", 0);
	/* a's run stops by itself: a's loop is held and cannot tell it */
	double took = wait_no_job_procs("a", "worker a's run, whose lease ran out");
	sq_job_status st = wait_job_settled(job, b, "b");
	char starts[4096];
	snprintf(starts, sizeof(starts), "%s", test_file_text(in_dir("starts")));
	kill(a, SIGKILL);
	waitpid(a, NULL, 0);
	kill(b, SIGTERM);
	ck_assert_int_eq(exited(b, "b"), 0);
	ck_assert_msg(!file_exists("overlaps"), "runs overlapped:\n%s\nall runs:\n%s",
		      test_file_text(in_dir("overlaps")), starts);
	char want[256];
	snprintf(want, sizeof(want), "1 a-%s\n2 b-%s\n", mark, mark);
	ck_assert_msg(!strcmp(starts, want), "runs:\n%swanted:\n%s", starts, want);
	ck_assert_msg(st == SQ_COMPLETED, "job %lld is %s: %s", (long long)job,
		      sq_job_status_name(st), job_error(job));
	printf("lease: worker a's run stopped %.2fs after worker b started; b ran attempt 2 "
	       "to completion; no overlap\n",
	       took);
	cleanup();
#endif
}
END_TEST

/* A running job that is cancelled stops at its worker's next heartbeat or start
 * (answered lost); the worker goes on. */
START_TEST(a_cancelled_run_is_stopped)
{
	setup("sqt_exec_cancel",
	      "[type c]\nstarting_timeout = 2s\nexecution_timeout = 4s\nhistory = true\n");
	write_lease_job(1);
	int64_t job = enqueue_one(t.client, "c", NULL, NULL, NULL);
	pid_t a = spawn("a", "c:1", "job.sh", "--poll 100ms", 0);
	wait_files("up.", 1, a, "a");
	sq_status out;
	sq_error err;
	OKE(sq_cancel(t.client, &job, 1, &out, &err));
	ck_assert_int_eq(out, SQ_OK);
	double took = wait_no_job_procs("a", "a cancelled job's run");
	int status;
	ck_assert_msg(waitpid(a, &status, WNOHANG) == 0, "worker a exited:\n%s", worker_out("a"));
	kill(a, SIGTERM);
	ck_assert_int_eq(exited(a, "a"), 0);
	sq_job j;
	OKE(sq_get_job(t.client, job, &j, &err));
	ck_assert_str_eq(sq_job_status_name(j.status), "cancelled");
	sq_job_clear(&j);
	printf("cancel: the running job's processes were gone %.2fs after the cancel\n", took);
	cleanup();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("exec");
	ADD_CASE(s, kill9_kills_the_job_tree, 3600);
	ADD_CASE(s, leftovers_die_with_the_job, 3600);
	ADD_CASE(s, sigterm_lets_running_job_finish, 3600);
	ADD_CASE(s, group_sigint_lets_running_job_finish, 3600);
	ADD_CASE(s, batch_completes_exactly_once, 3600);
	ADD_CASE(s, contract_through_the_helper, 3600);
	ADD_CASE(s, startup_refusals, 3600);
	ADD_CASE(s, a_run_whose_lease_ran_out_is_stopped, 3600);
	ADD_CASE(s, a_cancelled_run_is_stopped, 3600);
	return run_suite(s);
}
