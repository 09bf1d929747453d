/* test_worker.c - the worker runtime with real `shardq work` processes:
 * kill -9 and SIGTERM, backpressure sampled from the database, prefetch,
 * lost leases, the --exec contract, and the NOTIFY wake-up. Executions are
 * asserted from a log the job command writes, not from the code's intent. */
#include "test_common.h"

#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static testdb t;
static char ini_path[128], log_path[128], script_path[128];

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void write_file(const char *path, const char *text, int exec)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	if (exec)
		chmod(path, 0755);
}

/* The job command: logs "ID ATTEMPT WORKER start|end TIME" around a sleep
 * of $1 seconds (or params' "sleep"). */
static void make_script(const char *body)
{
	char text[2048];
	snprintf(text, sizeof(text),
		 "#!/bin/sh\n"
		 "params=$(cat)\n"
		 "log() { echo \"$SHARDQ_JOB_ID $SHARDQ_JOB_ATTEMPT $SHARDQ_WORKER $1 "
		 "$(date +%%s.%%N)\" >> %s; }\n"
		 "log start\n%s\nlog end\n",
		 log_path, body);
	write_file(script_path, text, 1);
}

static void setup_with(const char *db, const char *types)
{
	testdb_open(&t, db, test_shard_count(), 256, types);
	snprintf(ini_path, sizeof(ini_path), "/tmp/sqt-%s-%d.ini", db, (int)getpid());
	snprintf(log_path, sizeof(log_path), "/tmp/sqt-%s-%d.log", db, (int)getpid());
	snprintf(script_path, sizeof(script_path), "/tmp/sqt-%s-%d.sh", db, (int)getpid());
	write_file(ini_path, t.ini, 0);
	unlink(log_path);
}

static void cleanup(void)
{
	unlink(ini_path);
	unlink(log_path);
	unlink(script_path);
	testdb_close(&t);
}

/* Starts `shardq work` with the extra args (space separated, no quoting
 * needed); its output goes to out_path. */
static pid_t spawn_worker(const char *worker, const char *types, const char *extra,
			  const char *out_path)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd),
		 "exec %s -c %s work --worker %s --types %s --exec %s %s > %s 2>&1",
		 getenv("SHARDQ_CLI"), ini_path, worker, types, script_path, extra ? extra : "",
		 out_path);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static int wait_exit(pid_t pid, double timeout_s)
{
	double end = now_s() + timeout_s;
	int status;
	while (now_s() < end) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		usleep(20000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

static void enqueue_n(const char *type, int n, const char *params)
{
	sq_job_spec *js = calloc((size_t)n, sizeof(*js));
	sq_enqueue_result *rs = calloc((size_t)n, sizeof(*rs));
	sq_error err;
	for (int i = 0; i < n; i++)
		js[i].type = type, js[i].params = params;
	OKE(sq_enqueue(t.client, js, (size_t)n, rs, &err));
	free(js);
	free(rs);
}

static long long held(const char *worker, const char *status_list)
{
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs WHERE worker = '%s' AND status IN (%s)", worker,
		 status_list);
	return testdb_sum(&t, sql);
}

/* Jobs held by a worker across all shards, as one consistent cut: every
 * claim, start and completion takes the partition gate shared, so holding
 * every shard's gate exclusive while counting stops them all for a moment. */
static PGconn *cut_conn[16];

static long long held_cut(const char *worker)
{
	char sql[256];
	long long total = 0;
	for (int s = 0; s < t.nshards; s++) {
		if (!cut_conn[s])
			cut_conn[s] = testdb_pg(&t, s);
		PQclear(PQexec(cut_conn[s], "BEGIN"));
		PQclear(PQexec(cut_conn[s], "SELECT pg_advisory_xact_lock(1397837137, 1)"));
	}
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs WHERE worker = '%s' AND status IN "
		 "('starting','running')",
		 worker);
	for (int s = 0; s < t.nshards; s++) {
		PGresult *r = PQexec(cut_conn[s], sql);
		ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
		total += atoll(PQgetvalue(r, 0, 0));
		PQclear(r);
	}
	for (int s = 0; s < t.nshards; s++)
		PQclear(PQexec(cut_conn[s], "COMMIT"));
	return total;
}

static void cut_close(void)
{
	for (int s = 0; s < 16; s++)
		if (cut_conn[s]) {
			PQfinish(cut_conn[s]);
			cut_conn[s] = NULL;
		}
}

static long long live_jobs(void)
{
	return testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE status IN "
			      "('ready','starting','running')");
}

static int wait_until_drained(double timeout_s)
{
	double end = now_s() + timeout_s;
	while (now_s() < end) {
		if (live_jobs() == 0)
			return 1;
		usleep(100000);
	}
	return 0;
}

/* The execution log. */
typedef struct exe {
	long long id;
	int attempt;
	char worker[32];
	double start, end; /* end 0: never ended */
} exe;

static int read_log(exe *v, int max)
{
	FILE *f = fopen(log_path, "r");
	char w[32], what[8];
	long long id;
	int att, n = 0;
	double ts;
	if (!f)
		return 0;
	while (fscanf(f, "%lld %d %31s %7s %lf", &id, &att, w, what, &ts) == 5) {
		if (!strcmp(what, "start")) {
			ck_assert_int_lt(n, max);
			v[n].id = id, v[n].attempt = att, v[n].start = ts, v[n].end = 0;
			snprintf(v[n].worker, sizeof(v[n].worker), "%s", w);
			n++;
		} else {
			for (int i = n - 1; i >= 0; i--)
				if (v[i].id == id && v[i].attempt == att &&
				    !strcmp(v[i].worker, w)) {
					v[i].end = ts;
					break;
				}
		}
	}
	fclose(f);
	return n;
}

/* No two executions of one job overlap in time; a run that never ended
 * (its worker was killed) is taken to last until `dead_at`. */
static void assert_no_overlap(exe *v, int n, double dead_at)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			if (i == j || v[i].id != v[j].id || v[i].start > v[j].start)
				continue;
			double end_i = v[i].end ? v[i].end : dead_at;
			ck_assert_msg(v[j].start >= end_i - 0.01,
				      "job %lld ran on %s (%.3f-%.3f) and on %s from %.3f", v[i].id,
				      v[i].worker, v[i].start, end_i, v[j].worker, v[j].start);
		}
}

static long long completed_once(void)
{
	/* every completion is in history (the types keep it); none twice */
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) - count(DISTINCT id) FROM "
					"shardq.jobs_history WHERE status = 'completed'"),
			 0);
	return testdb_sum(&t,
			  "SELECT count(*) FROM shardq.jobs_history WHERE status = 'completed'");
}

START_TEST(kill9_jobs_come_back)
{
	enum { N = 24 };
	setup_with("sqt_work_kill", "[type k]\nstarting_timeout = 1s\nexecution_timeout = 2s\n"
				    "history = true\n");
	make_script("sleep 0.5");
	enqueue_n("k", N, NULL);
	pid_t a = spawn_worker("wA", "k:3", "--prefetch 3 --poll 200ms --quiet", "/tmp/sqt-wA.out");
	/* wait until A holds jobs both buffered and running */
	double deadline = now_s() + 20;
	while ((held("wA", "'starting'") == 0 || held("wA", "'running'") == 0) &&
	       now_s() < deadline)
		usleep(20000);
	long long st = held("wA", "'starting'"), ru = held("wA", "'running'");
	ck_assert_msg(st > 0 && ru > 0, "A holds starting %lld running %lld", st, ru);
	kill(a, SIGKILL);
	/* what A held when it died */
	long long ids[64];
	int nids = 0;
	for (int s = 0; s < t.nshards; s++) {
		PGconn *c = testdb_pg(&t, s);
		PGresult *r =
			PQexec(c, "SELECT id FROM shardq.jobs WHERE worker = 'wA' AND status IN "
				  "('starting','running')");
		for (int i = 0; i < PQntuples(r) && nids < 64; i++)
			ids[nids++] = atoll(PQgetvalue(r, i, 0));
		PQclear(r);
		PQfinish(c);
	}
	double t_kill = now_s();
	waitpid(a, NULL, 0);
	pid_t b = spawn_worker("wB", "k:3", "--poll 200ms --quiet", "/tmp/sqt-wB.out");
	ck_assert_msg(wait_until_drained(60), "jobs left after kill -9: %lld", live_jobs());
	kill(b, SIGTERM);
	ck_assert_int_eq(wait_exit(b, 20), 0);
	ck_assert_int_eq(completed_once(), N);

	exe v[4 * N];
	int n = read_log(v, 4 * N);
	assert_no_overlap(v, n, t_kill);
	/* every job A held completed on B, within its lease (2s running, which
	 * a heartbeat may have pushed 1s further; 1s starting) + one poll + the
	 * job itself; and B started one that A was running only after A's lease */
	double worst = 0;
	ck_assert_int_ge(nids, 2);
	for (int k = 0; k < nids; k++) {
		int a_run = -1, b_run = -1;
		for (int i = 0; i < n; i++) {
			if (v[i].id != ids[k])
				continue;
			if (!strcmp(v[i].worker, "wA"))
				a_run = i;
			else if (v[i].end)
				b_run = i;
		}
		ck_assert_msg(b_run >= 0, "job %lld of the killed worker never completed", ids[k]);
		if (a_run >= 0)
			ck_assert_msg(v[b_run].start >= v[a_run].start + 2.0 - 0.3,
				      "job %lld: B started it %.2fs after A did, inside A's lease",
				      ids[k], v[b_run].start - v[a_run].start);
		worst = fmax(worst, v[b_run].end - t_kill);
	}
	printf("kill -9: the killed worker's jobs completed on another worker within %.2fs\n",
	       worst);
	ck_assert_msg(worst < 2.0 + 1.0 + 0.2 + 0.5 + 2.0, "took %.2fs", worst);
	cleanup();
}
END_TEST

START_TEST(sigterm_releases_buffer_and_finishes)
{
	setup_with("sqt_work_term", "[type s]\nstarting_timeout = 30s\nhistory = true\n");
	make_script("sleep 1.5");
	enqueue_n("s", 10, NULL);
	pid_t a = spawn_worker("wA", "s:2", "--prefetch 4 --buffer 4 --quiet", "/tmp/sqt-wA2.out");
	double deadline = now_s() + 20;
	while ((held("wA", "'running'") < 2 || held("wA", "'starting'") < 1) && now_s() < deadline)
		usleep(20000);
	long long buffered = held("wA", "'starting'");
	ck_assert_int_ge(buffered, 1);
	ck_assert_int_eq(held("wA", "'running'"), 2);
	kill(a, SIGTERM);
	double t0 = now_s(), back = -1;
	while (now_s() - t0 < 5) {
		if (held("wA", "'starting'") == 0) {
			back = now_s() - t0;
			break;
		}
		usleep(20000);
	}
	printf("SIGTERM: %lld buffered jobs back to ready in %.3fs\n", buffered, back);
	ck_assert_msg(back >= 0 && back < 1.0, "buffered jobs took %.3fs to come back", back);
	/* running jobs go on to the end, then A exits 0 */
	ck_assert_int_eq(held("wA", "'running'"), 2);
	pid_t b = spawn_worker("wB", "s:4", "--poll 100ms --quiet", "/tmp/sqt-wB2.out");
	ck_assert_int_eq(wait_exit(a, 20), 0);
	ck_assert(wait_until_drained(60));
	kill(b, SIGTERM);
	ck_assert_int_eq(wait_exit(b, 20), 0);
	ck_assert_int_eq(completed_once(), 10);
	exe v[40];
	int n = read_log(v, 40), by_a = 0, by_b = 0;
	for (int i = 0; i < n; i++) {
		ck_assert_msg(v[i].end > 0, "job %lld never finished on %s", v[i].id, v[i].worker);
		by_a += !strcmp(v[i].worker, "wA");
		by_b += !strcmp(v[i].worker, "wB");
	}
	ck_assert_int_eq(by_a, 2); /* only what A was running */
	ck_assert_int_eq(by_b, 8); /* the rest, released ones included */
	ck_assert_int_eq(n, 10);   /* each job ran once */
	/* released jobs counted no attempt */
	ck_assert_int_eq(
		testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history WHERE attempt <> 1"), 0);
	cleanup();
}
END_TEST

/* A second signal exits at once; the lease brings the running job back. */
START_TEST(second_signal_exits_at_once)
{
	setup_with("sqt_work_twice", "[type x]\nexecution_timeout = 2s\nhistory = true\n");
	make_script("[ \"$SHARDQ_JOB_ATTEMPT\" = 1 ] && sleep 30; true");
	enqueue_n("x", 1, NULL);
	pid_t a = spawn_worker("wA", "x:1", "--quiet", "/tmp/sqt-wA8.out");
	double deadline = now_s() + 20;
	while (held("wA", "'running'") == 0 && now_s() < deadline)
		usleep(10000);
	ck_assert_int_eq(held("wA", "'running'"), 1);
	kill(a, SIGTERM);
	usleep(100000);
	double t0 = now_s();
	kill(a, SIGTERM);
	int rc = wait_exit(a, 10);
	printf("second signal: exited %.3fs later with %d\n", now_s() - t0, rc);
	ck_assert_int_eq(rc, 1);
	ck_assert(now_s() - t0 < 1.0);
	/* the job comes back after its lease, and runs again to the end */
	pid_t b = spawn_worker("wB", "x:1", "--poll 100ms --quiet", "/tmp/sqt-wB8.out");
	ck_assert(wait_until_drained(30));
	kill(b, SIGTERM);
	ck_assert_int_eq(wait_exit(b, 20), 0);
	ck_assert_int_eq(completed_once(), 1);
	cleanup();
}
END_TEST

START_TEST(backpressure_and_long_jobs_never_prefetched)
{
	setup_with("sqt_work_bp", "[type slow]\nhistory = true\n[type long]\nhistory = true\n");
	make_script("sleep \"$(echo \"$params\" | sed 's/.*\"sleep\": *\\([0-9.]*\\).*/\\1/')\"");
	enqueue_n("slow", 30, "{\"sleep\": 0.2}");
	/* capacity 3 slots + 2 buffered; 0.2s jobs with --prefetch 2 */
	pid_t a =
		spawn_worker("wA", "slow:3", "--buffer 2 --prefetch 2 --quiet", "/tmp/sqt-wA3.out");
	long long most = 0, samples = 0;
	while (live_jobs() > 0 && samples < 2000) {
		long long h = held_cut("wA");
		most = h > most ? h : most;
		samples++;
		usleep(20000);
	}
	printf("backpressure: at most %lld jobs held (capacity 5) over %lld samples\n", most,
	       samples);
	ck_assert_int_le(most, 5);
	ck_assert_int_ge(most, 4); /* the buffer was used */
	ck_assert(wait_until_drained(30));

	kill(a, SIGTERM);
	ck_assert_int_eq(wait_exit(a, 30), 0);

	/* 2 s jobs: never claimed beyond free slots, though the buffer has room */
	enqueue_n("long", 8, "{\"sleep\": 2}");
	pid_t b = spawn_worker("wB", "long:2", "--buffer 6 --quiet", "/tmp/sqt-wB3.out");
	most = 0;
	while (live_jobs() > 0) {
		long long h = held_cut("wB");
		most = h > most ? h : most;
		usleep(20000);
	}
	printf("long jobs: at most %lld held with 2 slots\n", most);
	ck_assert_int_le(most, 2);
	kill(b, SIGTERM);
	ck_assert_int_eq(wait_exit(b, 30), 0);
	cut_close();
	cleanup();
}
END_TEST

START_TEST(fast_jobs_keep_slots_busy)
{
	enum { N = 1500 };
	char out[8192];
	setup_with("sqt_work_fast", "[type f]\n");
	make_script("sleep 0.005");
	enqueue_n("f", N, NULL);
	pid_t a = spawn_worker("wA", "f:4", "--quiet -v", "/tmp/sqt-wA4.out");
	ck_assert(wait_until_drained(120));
	kill(a, SIGTERM);
	ck_assert_int_eq(wait_exit(a, 30), 0);
	FILE *f = fopen("/tmp/sqt-wA4.out", "r");
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	fclose(f);
	out[n] = '\0';
	/* the last report: idle share; the prefetch predicted while the queue
	 * had work (the highest of the reports: once drained it may fall) */
	char *last = NULL;
	int prefetch = 0;
	for (char *p = strstr(out, "idle slots"); p; p = strstr(p + 1, "idle slots"))
		last = p;
	for (char *p = strstr(out, "prefetch "); p; p = strstr(p + 1, "prefetch "))
		if (atoi(p + strlen("prefetch ")) > prefetch)
			prefetch = atoi(p + strlen("prefetch "));
	ck_assert_ptr_nonnull(last);
	double idle = atof(last + strlen("idle slots "));
	printf("5ms jobs: slots idle %.1f%% of the time work was there; prefetch %d\n", idle,
	       prefetch);
	ck_assert_int_gt(prefetch, 0);
	ck_assert_msg(idle < 50.0, "slots idle %.1f%%", idle);
	ck_assert_ptr_nonnull(strstr(last, "done 1500"));
	cleanup();
}
END_TEST

START_TEST(expired_lease_result_discarded)
{
	setup_with("sqt_work_lost", "[type l]\nexecution_timeout = 1s\nstarting_timeout = 1s\n"
				    "history = true\n");
	make_script("sleep 1.5");
	enqueue_n("l", 1, NULL);
	pid_t a = spawn_worker("wA", "l:1", "--quiet", "/tmp/sqt-wA5.out");
	double deadline = now_s() + 20;
	while (held("wA", "'running'") == 0 && now_s() < deadline)
		usleep(10000);
	/* freeze A (a long pause): its lease runs out and B takes the job */
	kill(a, SIGSTOP);
	pid_t b = spawn_worker("wB", "l:1", "--poll 100ms --quiet", "/tmp/sqt-wB5.out");
	ck_assert(wait_until_drained(30));
	kill(a, SIGCONT);
	usleep(500000);
	kill(a, SIGTERM);
	kill(b, SIGTERM);
	ck_assert_int_eq(wait_exit(a, 20), 0);
	ck_assert_int_eq(wait_exit(b, 20), 0);
	ck_assert_int_eq(completed_once(), 1);
	ck_assert_int_eq(testdb_sum(&t,
				    "SELECT count(*) FROM shardq.jobs_history WHERE worker = 'wB' "
				    "AND attempt = 2"),
			 1);
	char out[8192];
	FILE *f = fopen("/tmp/sqt-wA5.out", "r");
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	fclose(f);
	out[n] = '\0';
	ck_assert_msg(strstr(out, "lost 1") != NULL, "worker A did not report the lost job:\n%s",
		      out);
	ck_assert_ptr_nonnull(strstr(out, "done 0"));
	cleanup();
}
END_TEST

START_TEST(exec_contract)
{
	setup_with("sqt_work_exec", "[type e]\nbackoff = constant\nbackoff_base = 0\n"
				    "max_attempts = 3\nhistory = true\n");
	make_script("case \"$params\" in\n"
		    "  *ok*) ;;\n"
		    "  *flaky*) [ \"$SHARDQ_JOB_ATTEMPT\" -ge 2 ] || { echo \"not yet\" >&2; exit "
		    "1; } ;;\n"
		    "  *perm*) echo \"bad input: cannot go on\" >&2; exit 100 ;;\n"
		    "esac");
	int64_t ok = enqueue_one(t.client, "e", "ok", "{\"ok\":1}", NULL);
	int64_t flaky = enqueue_one(t.client, "e", "flaky", "{\"flaky\":1}", NULL);
	int64_t perm = enqueue_one(t.client, "e", "perm", "{\"perm\":1}", NULL);
	pid_t a = spawn_worker("wA", "e:2", "--poll 100ms", "/tmp/sqt-wA6.out");
	ck_assert(wait_until_drained(30));
	kill(a, SIGTERM);
	ck_assert_int_eq(wait_exit(a, 20), 0);
	sq_job j;
	sq_error err;
	OKE(sq_get_job(t.client, ok, &j, &err));
	ck_assert_int_eq(j.status, SQ_COMPLETED);
	ck_assert_int_eq(j.attempt, 1);
	sq_job_clear(&j);
	OKE(sq_get_job(t.client, flaky, &j, &err));
	ck_assert_int_eq(j.status, SQ_COMPLETED);
	ck_assert_int_eq(j.attempt, 2);
	sq_job_clear(&j);
	OKE(sq_get_job(t.client, perm, &j, &err));
	ck_assert_int_eq(j.status, SQ_FAILED);
	ck_assert_int_eq(j.attempt, 1);
	sq_job_clear(&j);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE status = 'failed' "
					"AND last_error = 'bad input: cannot go on'"),
			 1);
	/* the command's output is kept, prefixed by the job */
	char out[16384], want[64];
	FILE *f = fopen("/tmp/sqt-wA6.out", "r");
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	fclose(f);
	out[n] = '\0';
	snprintf(want, sizeof(want), "[job %lld] not yet", (long long)flaky);
	ck_assert_ptr_nonnull(strstr(out, want));

	/* a command that cannot be started: refused before anything is claimed */
	enqueue_one(t.client, "e", "later", "{\"ok\":1}", NULL);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "%s -c %s work --types e --exec /nonexistent/prog 2>&1",
		 getenv("SHARDQ_CLI"), ini_path);
	FILE *p = popen(cmd, "r");
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	int rc = pclose(p);
	ck_assert_int_eq(WEXITSTATUS(rc), 5);
	ck_assert_ptr_nonnull(strstr(out, "cannot run '/nonexistent/prog'"));
	ck_assert_int_eq(live_jobs(), 1);
	ck_assert_int_eq(held("wA", "'starting','running'"), 0);
	/* one that the shell cannot start at run time: the job fails with why */
	write_file(script_path, "#!/bin/sh\nexec /nonexistent/prog\n", 1);
	a = spawn_worker("wC", "e:1", "--poll 100ms --quiet", "/tmp/sqt-wC6.out");
	double deadline = now_s() + 20;
	while (testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE last_error LIKE "
			      "'the command could not be started%'") == 0 &&
	       now_s() < deadline)
		usleep(50000);
	kill(a, SIGTERM);
	ck_assert_int_eq(wait_exit(a, 20), 0);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE last_error LIKE "
					"'the command could not be started (exit 127)%'"),
			 1);
	cleanup();
}
END_TEST

START_TEST(notify_wakes_idle_worker)
{
	setup_with("sqt_work_notify", "[type n]\nhistory = true\n");
	make_script("true");
	pid_t a = spawn_worker("wA", "n:1", "--poll 5s --quiet", "/tmp/sqt-wA7.out");
	sleep(2); /* idle: the poll backs off toward 5s */
	double best = 1e9, worst = 0;
	for (int i = 0; i < 5; i++) {
		unlink(log_path);
		double t0 = now_s();
		enqueue_one(t.client, "n", NULL, NULL, NULL);
		exe v[4];
		int n = 0;
		while ((n = read_log(v, 4)) == 0 && now_s() - t0 < 10)
			usleep(2000);
		ck_assert_int_eq(n, 1);
		double lat = (v[0].start - t0) * 1000;
		best = fmin(best, lat);
		worst = fmax(worst, lat);
		usleep(300000);
	}
	printf("NOTIFY: an idle worker started new jobs %.1f-%.1f ms after the enqueue (poll 5s)\n",
	       best, worst);
	/* far below the poll interval: the wake-up, not the poll, started them */
	ck_assert_msg(worst < 2500, "worst start latency %.1f ms", worst);
	kill(a, SIGTERM);
	ck_assert_int_eq(wait_exit(a, 20), 0);
	cleanup();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("worker");
	TCase *tc = tcase_create("worker");
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, kill9_jobs_come_back);
	tcase_add_test(tc, sigterm_releases_buffer_and_finishes);
	tcase_add_test(tc, second_signal_exits_at_once);
	tcase_add_test(tc, backpressure_and_long_jobs_never_prefetched);
	tcase_add_test(tc, fast_jobs_keep_slots_busy);
	tcase_add_test(tc, expired_lease_result_discarded);
	tcase_add_test(tc, exec_contract);
	tcase_add_test(tc, notify_wakes_idle_worker);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
