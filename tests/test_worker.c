/* test_worker.c - the worker runtime with real `shardq work` processes:
 * kill -9 and SIGTERM, backpressure sampled from the database, prefetch,
 * lost leases, the --exec contract, and the NOTIFY wake-up. Executions are
 * asserted from a log the job command writes, not from the code's intent. */
#include "support.h"
#include "client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static testdb t;
static char ini_path[600], log_path[600], script_path[600], gate_path[600];

/* A file of this run's directory (its name is kept in a small ring, so a
 * few can be in use at once). */
static const char *tmp(const char *name)
{
	static char ring[8][600];
	static int next;
	char *p = ring[next++ % 8];
	return testdb_path(p, sizeof(ring[0]), name);
}

/* The shell that waits for the gate file: a job held running until the
 * test lets it go, however slow the machine. */
#define GATE "while [ ! -e \"$SQ_GATE\" ]; do sleep 0.05; done"

/* The job command: logs "ID ATTEMPT WORKER start|end TIME" around a sleep
 * of $1 seconds (or params' "sleep"). */
static void make_script(const char *body)
{
	char text[2048];
	snprintf(text, sizeof(text),
		 "#!/bin/sh\n"
		 "SQ_GATE=%s\n"
		 "params=$(cat)\n"
		 "log() { echo \"$SHARDQ_JOB_ID $SHARDQ_JOB_ATTEMPT $SHARDQ_WORKER $1 "
		 "$(date +%%s.%%N)\" >> %s; }\n"
		 "log start\n%s\nlog end\n",
		 gate_path, log_path, body);
	test_write_file(script_path, 1, "%s", text);
}

static void setup_with(const char *db, const char *types)
{
	testdb_open(&t, db, test_shard_count(), 256, types);
	testdb_path(ini_path, sizeof(ini_path), "shardq.ini");
	testdb_path(log_path, sizeof(log_path), "exec.log");
	testdb_path(script_path, sizeof(script_path), "job.sh");
	testdb_path(gate_path, sizeof(gate_path), "gate");
	test_write_file(ini_path, 0, "%s", t.ini);
	unlink(log_path);
	unlink(gate_path);
}

static void open_gate(void)
{
	test_write_file(gate_path, 0, "%s", "");
}

static void cleanup(void)
{
	testdb_close(&t);
	testdb_tmpdir_remove();
}

/* Starts `shardq work` on the job command with the extra args (space
 * separated, no quoting needed); its output goes to out_path. */
static pid_t spawn(const char *worker, const char *types, const char *extra, const char *out_path)
{
	test_worker_cmd w = {ini_path, worker, types, script_path, extra, out_path, 0, 0, NULL};
	return test_spawn_worker(&w);
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

static long long held_cut(const char *worker, long long *starting)
{
	char sql[320];
	long long total = 0;
	for (int s = 0; s < t.nshards; s++) {
		if (!cut_conn[s])
			cut_conn[s] = testdb_pg(&t, s);
		PQclear(PQexec(cut_conn[s], "BEGIN"));
		PQclear(PQexec(cut_conn[s], "SELECT pg_advisory_xact_lock(1397837137, 1)"));
	}
	snprintf(sql, sizeof(sql),
		 "SELECT count(*), count(*) FILTER (WHERE status = 'starting') FROM shardq.jobs "
		 "WHERE worker = '%s' AND status IN ('starting','running')",
		 worker);
	*starting = 0;
	for (int s = 0; s < t.nshards; s++) {
		PGresult *r = PQexec(cut_conn[s], sql);
		ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
		total += atoll(PQgetvalue(r, 0, 0));
		*starting += atoll(PQgetvalue(r, 0, 1));
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

static long long live_left(void *arg)
{
	(void)arg;
	return test_live_jobs(&t);
}

/* Waits until no job is live, for as long as jobs keep completing; on a
 * stall fails with the live rows and the tail of the workers' output. */
static void drain_or_fail(const char *what, const char *out1, const char *out2)
{
	long long left;
	if (wait_progress(live_left, NULL, &left))
		return;
	char rows[4096], o1[1500], o2[1500];
	ck_abort_msg("%s: %lld jobs still live, none completed for %.0fs:\n%s"
		     "worker output (%s):\n%s\nworker output (%s):\n%s",
		     what, left, testdb_stall_s(), testdb_live_report(&t, rows, sizeof(rows)),
		     out1 ? out1 : "-", out1 ? test_tail(out1, o1, sizeof(o1)) : "",
		     out2 ? out2 : "-", out2 ? test_tail(out2, o2, sizeof(o2)) : "");
}

/* Waits until cond() holds; fails with `what` if it has not after the stall
 * time (a state the worker reaches in a moment on any machine). */
static int wait_cond(int (*cond)(void))
{
	double end = test_now_s() + testdb_stall_s();
	while (!cond()) {
		if (test_now_s() > end)
			return 0;
		usleep(20000);
	}
	return 1;
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

static int a_buffered_and_running(void)
{
	return held("wA", "'starting'") > 0 && held("wA", "'running'") > 0;
}

START_TEST(kill9_jobs_come_back)
{
	enum { N = 24 };
	setup_with("sqt_work_kill", "[type k]\nstarting_timeout = 1s\nexecution_timeout = 2s\n"
				    "history = true\n");
	make_script("sleep 0.5");
	test_enqueue_n(t.client, "k", N, NULL);
	const char *out_a = tmp("wA.out"), *out_b = tmp("wB.out");
	pid_t a = spawn("wA", "k:3", "--prefetch 3 --poll 200ms --quiet", out_a);
	/* wait until A holds jobs both buffered and running */
	ck_assert_msg(wait_cond(a_buffered_and_running), "A holds starting %lld running %lld",
		      held("wA", "'starting'"), held("wA", "'running'"));
	kill(a, SIGKILL);
	double t_kill = test_wall_s(); /* set beside the job log's times */
	waitpid(a, NULL, 0);
	/* what A held when it died, and until when its leases ran */
	long long ids[64];
	double lease[64];
	int nids = 0;
	for (int s = 0; s < t.nshards; s++) {
		PGconn *c = testdb_pg(&t, s);
		PGresult *r =
			PQexec(c, "SELECT id, extract(epoch FROM expected_status_change_time) "
				  "FROM shardq.jobs WHERE worker = 'wA' AND status IN "
				  "('starting','running')");
		for (int i = 0; i < PQntuples(r) && nids < 64; i++) {
			ids[nids] = atoll(PQgetvalue(r, i, 0));
			lease[nids++] = atof(PQgetvalue(r, i, 1));
		}
		PQclear(r);
		PQfinish(c);
	}
	pid_t b = spawn("wB", "k:3", "--poll 200ms --quiet", out_b);
	drain_or_fail("after kill -9 of worker A", out_a, out_b);
	kill(b, SIGTERM);
	ck_assert_int_eq(test_wait_exit(b, testdb_stall_s()), 0);
	ck_assert_int_eq(completed_once(), N);

	exe v[4 * N];
	int n = read_log(v, 4 * N);
	assert_no_overlap(v, n, t_kill);
	/* every job A held completed on B, which took it only once A's lease
	 * (as the shard had it when A died; a heartbeat can only extend it) had
	 * run out */
	double worst = 0;
	ck_assert_int_ge(nids, 2);
	for (int k = 0; k < nids; k++) {
		int b_run = -1;
		for (int i = 0; i < n; i++)
			if (v[i].id == ids[k] && strcmp(v[i].worker, "wA") && v[i].end)
				b_run = i;
		ck_assert_msg(b_run >= 0, "job %lld of the killed worker never completed", ids[k]);
		ck_assert_msg(v[b_run].start >= lease[k] - 0.05,
			      "job %lld: %s started it %.2fs before A's lease ran out", ids[k],
			      v[b_run].worker, lease[k] - v[b_run].start);
		worst = fmax(worst, v[b_run].end - t_kill);
	}
	printf("kill -9: the killed worker's jobs completed on another worker within %.2fs\n",
	       worst);
	cleanup();
}
END_TEST

static int a_runs_two_buffers_one(void)
{
	return held("wA", "'running'") >= 2 && held("wA", "'starting'") >= 1;
}

static int a_buffer_empty(void)
{
	return held("wA", "'starting'") == 0;
}

START_TEST(sigterm_releases_buffer_and_finishes)
{
	setup_with("sqt_work_term", "[type s]\nstarting_timeout = 30s\nhistory = true\n");
	/* jobs run until the gate opens: A is surely still running its two
	 * when its buffer comes back */
	make_script(GATE);
	test_enqueue_n(t.client, "s", 10, NULL);
	const char *out_a = tmp("wA.out"), *out_b = tmp("wB.out");
	pid_t a = spawn("wA", "s:2", "--prefetch 4 --buffer 4 --quiet", out_a);
	ck_assert_msg(wait_cond(a_runs_two_buffers_one), "A holds running %lld starting %lld",
		      held("wA", "'running'"), held("wA", "'starting'"));
	long long buffered = held("wA", "'starting'");
	ck_assert_int_eq(held("wA", "'running'"), 2);
	kill(a, SIGTERM);
	double t0 = test_now_s();
	/* the buffer comes back at once: without waiting for the running jobs,
	 * which cannot end before the gate opens */
	ck_assert_msg(wait_cond(a_buffer_empty), "A still holds %lld buffered jobs after SIGTERM",
		      held("wA", "'starting'"));
	printf("SIGTERM: %lld buffered jobs back to ready in %.3fs\n", buffered, test_now_s() - t0);
	ck_assert_int_eq(held("wA", "'running'"), 2);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE status = 'ready'"),
			 8);
	/* running jobs go on to the end, then A exits 0 */
	open_gate();
	pid_t b = spawn("wB", "s:4", "--poll 100ms --quiet", out_b);
	ck_assert_int_eq(test_wait_exit(a, testdb_stall_s()), 0);
	drain_or_fail("after SIGTERM", out_a, out_b);
	kill(b, SIGTERM);
	ck_assert_int_eq(test_wait_exit(b, testdb_stall_s()), 0);
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

static int a_running_one(void)
{
	return held("wA", "'running'") == 1;
}

/* The job command has begun (its "start" line is in the log): signals sent
 * now find it running, not still being spawned. */
static int a_command_started(void)
{
	exe v[4];
	return held("wA", "'running'") == 1 && read_log(v, 4) >= 1;
}

/* A second signal exits at once; the lease brings the running job back. */
START_TEST(second_signal_exits_at_once)
{
	setup_with("sqt_work_twice",
		   "[type x]\nexecution_timeout = 2s\nstarting_timeout = 2s\nhistory = true\n");
	/* the first attempt never ends by itself */
	make_script("[ \"$SHARDQ_JOB_ATTEMPT\" = 1 ] && " GATE "; true");
	test_enqueue_n(t.client, "x", 1, NULL);
	const char *out_a = tmp("wA.out"), *out_b = tmp("wB.out");
	pid_t a = spawn("wA", "x:1", "--quiet", out_a);
	ck_assert_msg(wait_cond(a_command_started), "A never started the job's command");
	kill(a, SIGTERM);
	usleep(100000);
	double t0 = test_now_s();
	kill(a, SIGTERM);
	int rc = test_wait_exit(a, testdb_stall_s());
	printf("second signal: exited %.3fs later with %d\n", test_now_s() - t0, rc);
	/* exit 1 with its job unfinished: it did not wait for the job */
	ck_assert_int_eq(rc, 1);
	exe v[4];
	ck_assert_int_eq(read_log(v, 4), 1);
	ck_assert_msg(v[0].end == 0, "the first run ended");
	/* the job comes back after its lease, and runs again to the end */
	pid_t b = spawn("wB", "x:1", "--poll 100ms --quiet", out_b);
	drain_or_fail("after the second signal", out_a, out_b);
	kill(b, SIGTERM);
	ck_assert_int_eq(test_wait_exit(b, testdb_stall_s()), 0);
	ck_assert_int_eq(completed_once(), 1);
	cleanup();
}
END_TEST

/* The most jobs `worker` held at once, and the most of them in `starting`
 * (*most_starting), sampled until the queue drains (or stalls: then the
 * test fails with what is left). */
static long long sample_held(const char *worker, const char *out, long long *most_starting)
{
	long long most = 0, best = test_live_jobs(&t);
	double moved = test_now_s();
	*most_starting = 0;
	for (long long left = best; left > 0; left = test_live_jobs(&t)) {
		long long st, h = held_cut(worker, &st);
		most = h > most ? h : most;
		*most_starting = st > *most_starting ? st : *most_starting;
		if (left < best) {
			best = left;
			moved = test_now_s();
		} else if (test_now_s() - moved > testdb_stall_s()) {
			drain_or_fail(worker, out, NULL);
		}
		usleep(20000);
	}
	return most;
}

/* The worker's reports (-v) in out: how many, and the most "running N of
 * M slots" went over M. */
static int reports_over(const char *out, int *over)
{
	int n = 0, run, slots;
	char *text = access(out, R_OK) == 0 ? test_read_file(out) : NULL;
	*over = 0;
	for (const char *p = text; p && (p = strstr(p, "running ")) != NULL; p++)
		if (sscanf(p, "running %d of %d slots", &run, &slots) == 2) {
			n++;
			if (run - slots > *over)
				*over = run - slots;
		}
	free(text);
	return n;
}

static const char *slots_out;
static int three_reports(void)
{
	int over;
	return reports_over(slots_out, &over) >= 3;
}

/* A worker with a prefetch never takes more jobs to run than it has slots:
 * the slots that its claims out will fill with jobs they start at once are
 * not given to buffered jobs meanwhile. (They were: with a claim out on
 * each of three shards, a buffered job took a slot that a claim then
 * filled too, and a job claimed `running` waited for a slot with its
 * lease held, and was charged a try when the worker stopped.) */
START_TEST(claims_out_keep_their_slots_from_buffered_jobs)
{
	setup_with("sqt_work_slots", "[type r]\nhistory = true\n");
	make_script("sleep 2");
	/* keyed: spread over every shard, so that claims are out on several */
	for (int i = 0; i < 30; i++) {
		char key[16];
		snprintf(key, sizeof(key), "k%d", i);
		enqueue_one(t.client, "r", key, NULL, NULL);
	}
	slots_out = tmp("wA.out");
	pid_t a = spawn("wA", "r:2", "--prefetch 4 -v", slots_out);
	ck_assert_msg(wait_cond(three_reports), "wA gave no three reports:\n%s",
		      test_file_text(slots_out));
	kill(a, SIGTERM);
	ck_assert_int_eq(test_wait_exit(a, testdb_stall_s()), 0);
	int over, n = reports_over(slots_out, &over);
	printf("slots: %d reports, at most %d running over the 2 slots\n", n, over);
	ck_assert_msg(over == 0, "the worker ran %d more jobs than its 2 slots:\n%s", over,
		      test_file_text(slots_out));
	/* what it had not begun went back with no try counted */
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE status IN "
					"('starting', 'running')"),
			 0);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE status = 'ready' "
					"AND attempt - attempt_base > 0"),
			 0);
	cleanup();
}
END_TEST

START_TEST(backpressure_and_long_jobs_never_prefetched)
{
	setup_with("sqt_work_bp", "[type slow]\nhistory = true\n[type long]\nhistory = true\n");
	make_script("sleep \"$(echo \"$params\" | sed 's/.*\"sleep\": *\\([0-9.]*\\).*/\\1/')\"");
	test_enqueue_n(t.client, "slow", 30, "{\"sleep\": 0.2}");
	/* capacity 3 slots + 2 buffered; 0.2s jobs with --prefetch 2 */
	const char *out_a = tmp("wA.out"), *out_b = tmp("wB.out");
	pid_t a = spawn("wA", "slow:3", "--buffer 2 --prefetch 2 --quiet", out_a);
	long long starting, most = sample_held("wA", out_a, &starting);
	printf("backpressure: at most %lld jobs held (capacity 5)\n", most);
	ck_assert_int_le(most, 5);
	ck_assert_int_ge(most, 4); /* the buffer was used */

	kill(a, SIGTERM);
	ck_assert_int_eq(test_wait_exit(a, testdb_stall_s()), 0);

	/* 2 s jobs: never claimed beyond free slots, though the buffer has room:
	 * a claim for a free slot turns its jobs `running` at once, so none of
	 * them is ever seen `starting` (buffered). (The rows held may be one
	 * more than the slots for a moment: a claim for a slot that freed
	 * commits on one shard before the finished job's completion, sent in
	 * the same round, commits on another.) */
	test_enqueue_n(t.client, "long", 8, "{\"sleep\": 2}");
	pid_t b = spawn("wB", "long:2", "--buffer 6 --quiet -v", out_b);
	most = sample_held("wB", out_b, &starting);
	/* "Long" is ten claim round trips: on a machine so loaded that a claim
	 * takes 200 ms, 2 s jobs are short, and are rightly prefetched. The
	 * worker's reports (-v, every 2 s) give its claim round trip. */
	double rtt = 0, r;
	ck_assert_msg(access(out_b, R_OK) == 0, "cannot open %s", out_b);
	char *text = test_read_file(out_b);
	for (const char *p = text; (p = strstr(p, "claim rtt ")) != NULL; p++)
		if (sscanf(p, "claim rtt %lfms", &r) == 1 && r > rtt)
			rtt = r;
	free(text);
	printf("long jobs: at most %lld held with 2 slots, at most %lld of them starting; claim "
	       "round trip at most %.1f ms\n",
	       most, starting, rtt);
	if (rtt < 100)
		ck_assert_msg(starting == 0,
			      "%lld long jobs were held in the buffer (claim round trip at most "
			      "%.1f ms: 2 s jobs are long)",
			      starting, rtt);
	else
		printf("long jobs: not checked: a claim round trip of %.1f ms makes 2 s jobs "
		       "short\n",
		       rtt);
	ck_assert_int_le(most, 2 + 6);
	kill(b, SIGTERM);
	ck_assert_int_eq(test_wait_exit(b, testdb_stall_s()), 0);
	cut_close();
	cleanup();
}
END_TEST

START_TEST(fast_jobs_keep_slots_busy)
{
	enum { N = 200 };
	setup_with("sqt_work_fast", "[type f]\n");
	make_script("sleep 0.005");
	test_enqueue_n(t.client, "f", N, NULL);
	const char *out_a = tmp("wA.out");
	pid_t a = spawn("wA", "f:4", "--quiet -v", out_a);
	drain_or_fail("5ms jobs", out_a, NULL);
	kill(a, SIGTERM);
	ck_assert_int_eq(test_wait_exit(a, testdb_stall_s()), 0);
	ck_assert_msg(access(out_a, R_OK) == 0, "cannot open %s", out_a);
	char *out = test_read_file(out_a);
	/* the last report; the prefetch predicted while the queue had work (the
	 * highest of the reports: once drained it may fall). How busy the slots
	 * were is printed, not asserted: that is a speed, which shardq-bench
	 * measures (bench/scenarios/small-worker). */
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
	/* the prefetch predicted is printed, not asserted: a job that takes
	 * over 10 claim round trips (a loaded machine) rightly gets none */
	char done[32];
	snprintf(done, sizeof(done), "done %d ", N);
	ck_assert_msg(strstr(last, done) != NULL, "last report: %s", last);
	ck_assert_int_eq(test_live_jobs(&t), 0);
	free(out);
	cleanup();
}
END_TEST

START_TEST(expired_lease_result_discarded)
{
	setup_with("sqt_work_lost", "[type l]\nexecution_timeout = 1s\nstarting_timeout = 1s\n"
				    "history = true\n");
	make_script("sleep 1.5");
	test_enqueue_n(t.client, "l", 1, NULL);
	const char *out_a = tmp("wA.out"), *out_b = tmp("wB.out");
	pid_t a = spawn("wA", "l:1", "--quiet", out_a);
	ck_assert_msg(wait_cond(a_running_one), "A never ran the job");
	/* freeze A (a long pause): its lease runs out and B takes the job */
	kill(a, SIGSTOP);
	pid_t b = spawn("wB", "l:1", "--poll 100ms --quiet", out_b);
	drain_or_fail("while A is frozen", out_a, out_b);
	kill(a, SIGCONT);
	usleep(500000);
	kill(a, SIGTERM);
	kill(b, SIGTERM);
	ck_assert_int_eq(test_wait_exit(a, testdb_stall_s()), 0);
	ck_assert_int_eq(test_wait_exit(b, testdb_stall_s()), 0);
	ck_assert_int_eq(completed_once(), 1);
	ck_assert_int_eq(testdb_sum(&t,
				    "SELECT count(*) FROM shardq.jobs_history WHERE worker = 'wB' "
				    "AND attempt = 2"),
			 1);
	char out[8192];
	FILE *f = fopen(out_a, "r");
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	fclose(f);
	out[n] = '\0';
	ck_assert_msg(strstr(out, "lost 1") != NULL, "worker A did not report the lost job:\n%s",
		      out);
	ck_assert_ptr_nonnull(strstr(out, "done 0"));
	cleanup();
}
END_TEST

static int not_started_recorded(void)
{
	return testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE last_error LIKE "
			      "'the command could not be started%'") > 0;
}

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
	const char *out_a = tmp("wA.out"), *out_c = tmp("wC.out");
	pid_t a = spawn("wA", "e:2", "--poll 100ms", out_a);
	drain_or_fail("exec contract", out_a, NULL);
	kill(a, SIGTERM);
	ck_assert_int_eq(test_wait_exit(a, testdb_stall_s()), 0);
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
	FILE *f = fopen(out_a, "r");
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
	ck_assert_int_eq(test_live_jobs(&t), 1);
	ck_assert_int_eq(held("wA", "'starting','running'"), 0);
	/* one that the shell cannot start at run time: the job fails with why */
	test_write_file(script_path, 1, "#!/bin/sh\nexec /nonexistent/prog\n");
	a = spawn("wC", "e:1", "--poll 100ms --quiet", out_c);
	ck_assert_msg(wait_cond(not_started_recorded), "no job failed for the missing program");
	kill(a, SIGTERM);
	ck_assert_int_eq(test_wait_exit(a, testdb_stall_s()), 0);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE last_error LIKE "
					"'the command could not be started (exit 127)%'"),
			 1);
	cleanup();
}
END_TEST

/* --exec runs its command under /bin/sh -c: one that begins with a reserved
 * word or an assignment is the shell's, and each runs its job (once refused
 * as "not found in PATH"). */
START_TEST(exec_takes_what_the_shell_takes)
{
	setup_with("sqt_work_sh", "[type e]\nhistory = true\n");
	const char *mark = tmp("ran");
	char cmds[3][600];
	snprintf(cmds[0], sizeof(cmds[0]), "case $SHARDQ_JOB_ID in *) echo case >> %s;; esac",
		 mark);
	snprintf(cmds[1], sizeof(cmds[1]), "if true; then echo if >> %s; fi", mark);
	snprintf(cmds[2], sizeof(cmds[2]), "MARK=assignment printenv MARK >> %s", mark);
	for (int i = 0; i < 3; i++) {
		char key[16], out[600];
		snprintf(key, sizeof(key), "sh-%d", i);
		snprintf(out, sizeof(out), "%s", tmp("w.out"));
		int64_t id = enqueue_one(t.client, "e", key, NULL, NULL);
		test_worker_cmd w = {ini_path, "wsh", "e:1", cmds[i], "--poll 100ms",
				     out,      1,     0,     NULL};
		pid_t pid = test_spawn_worker(&w);
		double last = test_now_s();
		sq_job j;
		sq_error err;
		for (;;) {
			memset(&j, 0, sizeof(j));
			OKE(sq_get_job(t.client, id, &j, &err));
			int done = j.status == SQ_COMPLETED;
			sq_job_clear(&j);
			if (done)
				break;
			ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0,
				      "the worker of --exec '%s' exited:\n%s", cmds[i],
				      test_file_text(out));
			ck_assert_msg(test_now_s() - last < testdb_stall_s(),
				      "the job of --exec '%s' did not complete in %.0fs:\n%s",
				      cmds[i], testdb_stall_s(), test_file_text(out));
			usleep(50000);
		}
		kill(pid, SIGTERM);
		ck_assert_int_eq(test_wait_exit(pid, testdb_stall_s()), 0);
	}
	ck_assert_str_eq(test_file_text(mark), "case\nif\nassignment\n");
	cleanup();
}
END_TEST

/* The in-process worker of the NOTIFY test: when each job started. */
static struct {
	pthread_mutex_t mu;
	double started[16];
	int n;
} woke = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static sq_job_result note_start(const sq_job *job, void *arg, char *e, size_t elen)
{
	(void)job, (void)arg, (void)e, (void)elen;
	pthread_mutex_lock(&woke.mu);
	if (woke.n < 16)
		woke.started[woke.n] = test_now_s();
	woke.n++;
	pthread_mutex_unlock(&woke.mu);
	return SQ_RESULT_DONE;
}

static int woke_count(void)
{
	pthread_mutex_lock(&woke.mu);
	int n = woke.n;
	pthread_mutex_unlock(&woke.mu);
	return n;
}

/* A worker of type n (one slot, note_start) that listens, with its poll
 * at poll_s from the first empty claim on (poll_min = poll_max), running
 * on *th; returned once it is idle (its first claim made). */
static sq_worker *idle_listening_worker_of(const char *id, const char *type, double poll_s,
					   pthread_t *th)
{
	sq_worker_opts o;
	sq_worker *w;
	sq_error err;
	sq_worker_opts_init(&o);
	o.worker_id = id;
	o.listen = 1;
	o.poll_min_ms = o.poll_max_ms = (int64_t)(poll_s * 1000);
	OKE(sq_worker_create(t.cfg, &o, &w, &err));
	OKE(sq_worker_add(w, type, 1, note_start, NULL, &err));
	test_worker_thread(th, w);
	sq_worker_stats st;
	double since = test_now_s();
	do {
		usleep(20000);
		sq_worker_get_stats(w, &st);
	} while (st.claims == 0 && test_now_s() - since < testdb_stall_s());
	ck_assert_msg(st.claims > 0, "the worker made no claim in %.0fs", testdb_stall_s());
	return w;
}

static sq_worker *idle_listening_worker(const char *id, double poll_s, pthread_t *th)
{
	return idle_listening_worker_of(id, "n", poll_s, th);
}

/*
 * An idle worker whose poll never comes within the test (10 minutes, from
 * the first empty claim on: poll_min = poll_max) starts each new job at
 * once: only the NOTIFY of the enqueue can wake it. Checked on every
 * enqueue. SHARDQ_TEST_BREAK_NOTIFY=1 enqueues with `notify = false`, to
 * see this test fail.
 */
START_TEST(notify_wakes_idle_worker)
{
	enum { ROUNDS = 5 };
	const double poll_s = 600, limit_s = 30;
	sq_error err;
	setup_with("sqt_work_notify", "[type n]\nhistory = true\n");
	sq_client *producer = t.client;
	sq_config *quiet_cfg = NULL;
	if (getenv("SHARDQ_TEST_BREAK_NOTIFY")) {
		char *ini = testdb_ini(&t, NULL, "notify = false");
		OKE(sq_config_parse(ini, "no-notify.ini", &quiet_cfg, &err));
		free(ini);
		OKE(sq_client_open(quiet_cfg, 0, &producer, &err));
	}
	pthread_t th;
	sq_worker *w = idle_listening_worker("wN", poll_s, &th);
	usleep(300000);
	double best = 1e9, worst = 0;
	for (int i = 0; i < ROUNDS; i++) {
		double t0 = test_now_s();
		enqueue_one(producer, "n", NULL, NULL, NULL);
		while (woke_count() <= i && test_now_s() - t0 < limit_s)
			usleep(2000);
		ck_assert_msg(woke_count() > i,
			      "enqueue %d: the idle worker did not start the job within %.0fs "
			      "(its poll is %.0fs away: was it woken by NOTIFY?)",
			      i + 1, limit_s, poll_s);
		double lat = (woke.started[i] - t0) * 1000;
		best = fmin(best, lat);
		worst = fmax(worst, lat);
		usleep(300000); /* idle again: the claim after the job found nothing */
	}
	printf("NOTIFY: an idle worker started new jobs %.1f-%.1f ms after the enqueue "
	       "(poll %.0fs)\n",
	       best, worst, poll_s);
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	sq_worker_destroy(w);
	ck_assert_int_eq(completed_once(), ROUNDS);
	if (quiet_cfg) {
		sq_client_close(producer);
		sq_config_free(quiet_cfg);
	}
	cleanup();
}
END_TEST

/* A worker's LISTEN connections, by their application_name (their last
 * query is a registration, not the LISTEN; the map's end in
 * "-map-listen"). */
#define JOB_LISTENERS \
	"application_name LIKE '%-listen' AND application_name NOT LIKE '%-map-listen'"

/* The LISTEN connections of an idle worker are cut (as a shard's restart
 * cuts them): it listens again on every shard once the shard answers, and
 * a NOTIFY wakes it as before (its poll is 10 minutes away). */
START_TEST(listens_again_after_its_connections_are_cut)
{
	const double poll_s = 600, limit_s = 30;
	setup_with("sqt_work_relisten", "[type n]\nhistory = true\n");
	pthread_t th;
	sq_worker *w = idle_listening_worker("wR", poll_s, &th);
	sq_worker_stats st;
	/* cut each shard's LISTEN connection, noting when */
	char cut_at[16][64];
	ck_assert_int_le(t.nshards, 16);
	for (int s = 0; s < t.nshards; s++) {
		PGconn *pg = testdb_pg(&t, s);
		PGresult *r =
			PQexec(pg, "SELECT now()::text, (SELECT count(pg_terminate_backend(pid))"
				   " FROM pg_stat_activity WHERE " JOB_LISTENERS
				   " AND datname = current_database()"
				   " AND pid <> pg_backend_pid())");
		ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "s%d: %s", s + 1,
			      PQerrorMessage(pg));
		snprintf(cut_at[s], sizeof(cut_at[s]), "%s", PQgetvalue(r, 0, 0));
		ck_assert_msg(atoi(PQgetvalue(r, 0, 1)) == 1,
			      "s%d: %s LISTEN connections of the worker, not 1", s + 1,
			      PQgetvalue(r, 0, 1));
		PQclear(r);
		PQfinish(pg);
	}
	/* it listens again: a new LISTEN connection on every shard */
	double since = test_now_s();
	for (;;) {
		int back = 0;
		for (int s = 0; s < t.nshards; s++) {
			char sql[512];
			snprintf(sql, sizeof(sql),
				 "SELECT count(*) FROM pg_stat_activity WHERE %s"
				 " AND datname = current_database() AND backend_start > '%s'",
				 JOB_LISTENERS, cut_at[s]);
			back += testdb_scalar(&t, s, sql) == 1;
		}
		if (back == t.nshards)
			break;
		sq_worker_get_stats(w, &st);
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "the worker listens again on only %d of %d shards %.0fs after its "
			      "LISTEN connections were cut (last error: %s)",
			      back, t.nshards, test_now_s() - since, st.last_error);
		usleep(50000);
	}
	usleep(300000); /* idle again: the claim after listening found nothing */
	double t0 = test_now_s();
	enqueue_one(t.client, "n", NULL, NULL, NULL);
	while (woke_count() < 1 && test_now_s() - t0 < limit_s)
		usleep(2000);
	ck_assert_msg(woke_count() == 1,
		      "the idle worker did not start the job within %.0fs of its enqueue (its "
		      "poll is %.0fs away: did NOTIFY wake it after it listened again?)",
		      limit_s, poll_s);
	printf("LISTEN: the worker listened again on all %d shards %.2fs after the cut; it "
	       "started the next job %.1f ms after its enqueue\n",
	       t.nshards, t0 - since, (woke.started[0] - t0) * 1000);
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	sq_worker_destroy(w);
	ck_assert_int_eq(completed_once(), 1);
	cleanup();
}
END_TEST

/* Waits until every shard lists `want` registered listeners, and then
 * until each of them has registered again since (so every worker's own
 * list names all of them). */
static void wait_registered(int want)
{
	char all_at[64] = "";
	double since = test_now_s();
	for (;;) {
		int ready = 0;
		for (int s = 0; s < t.nshards; s++) {
			char sql[512];
			snprintf(sql, sizeof(sql),
				 "SELECT count(*) FROM shardq.listeners WHERE seen > %s%s%s",
				 all_at[0] ? "'" : "now() - interval '15 seconds'", all_at,
				 all_at[0] ? "'" : "");
			ready += testdb_scalar(&t, s, sql) == want;
		}
		if (ready == t.nshards && all_at[0])
			return;
		if (ready == t.nshards) {
			PGconn *pg = testdb_pg(&t, 0);
			PGresult *r = PQexec(pg, "SELECT now()::text");
			snprintf(all_at, sizeof(all_at), "%s", PQgetvalue(r, 0, 0));
			PQclear(r);
			PQfinish(pg);
			continue;
		}
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "%d of %d shards list the %d workers' LISTEN connections%s after "
			      "%.0fs",
			      ready, t.nshards, want,
			      all_at[0] ? " registered again since all were there" : "",
			      test_now_s() - since);
		usleep(50000);
	}
}

/* Stops the n workers (named prefix0, prefix1, ...), each of which must
 * have met no database error. */
static void stop_error_free(sq_worker **w, pthread_t *th, int n, const char *prefix)
{
	for (int i = 0; i < n; i++) {
		sq_worker_stats st;
		sq_worker_get_stats(w[i], &st);
		ck_assert_msg(st.db_errors == 0, "worker %s%d: %s", prefix, i, st.last_error);
		sq_worker_stop(w[i], 0);
		pthread_join(th[i], NULL);
		sq_worker_destroy(w[i]);
	}
}

static uint64_t claims_of(sq_worker **w, int n)
{
	uint64_t sum = 0;
	sq_worker_stats st;
	for (int i = 0; i < n; i++) {
		sq_worker_get_stats(w[i], &st);
		sum += st.claims;
	}
	return sum;
}

/* Enqueues `n` jobs of `type` in one batch and waits until the workers
 * have started `total` jobs in all (their polls are 10 minutes away:
 * only NOTIFYs and their own full answers make them claim). */
static void enqueue_and_wait(const char *type, int n, int total)
{
	sq_job_spec js[64];
	sq_enqueue_result res[64];
	sq_error err;
	ck_assert_int_le(n, 64);
	for (int i = 0; i < n; i++)
		js[i] = (sq_job_spec){.type = type};
	OKE(sq_enqueue(t.client, js, (size_t)n, res, &err));
	double t0 = test_now_s();
	while (woke_count() < total && test_now_s() - t0 < testdb_stall_s())
		usleep(2000);
	ck_assert_msg(woke_count() >= total,
		      "%d of %d jobs started %.0fs after a batch of %d '%s' jobs (the polls are "
		      "10 minutes away: did its NOTIFY wake too few workers?)",
		      woke_count(), total, test_now_s() - t0, n, type);
	usleep(200000); /* the claims it woke are done */
}

/*
 * Six idle workers listen to every shard, their polls 10 minutes away:
 * four run type n, two run type m, one slot each. Each registers in
 * shardq.listeners, and a NOTIFY wakes, per type in its batch, the few
 * workers its jobs need (client.c, wake_is_ours), not all six. Asserted:
 * every job starts (a job alone, m's too, and a batch of 40 that needs
 * every n worker), each exactly once, and at most SQ_WAKE_MIN + 2 claims
 * for each lone job (the woken ones, and room for a claim again after a
 * full answer): 37 for 16 jobs here, against 102 with every worker woken
 * by every NOTIFY.
 */
START_TEST(a_notify_wakes_the_workers_its_batch_needs)
{
	enum { W = 6, ALONE = 12, ALONE_M = 4, BATCH = 40 };
	const double poll_s = 600;
	setup_with("sqt_work_few", "[type n]\nhistory = true\n[type m]\nhistory = true\n");
	pthread_t th[W];
	sq_worker *w[W];
	for (int i = 0; i < W; i++) {
		char id[16];
		snprintf(id, sizeof(id), "wF%d", i);
		w[i] = idle_listening_worker_of(id, i < 4 ? "n" : "m", poll_s, &th[i]);
	}
	wait_registered(W);
	usleep(300000); /* the claims after listening are done */
	uint64_t claims0 = claims_of(w, W);
	int started = 0;
	for (int i = 0; i < ALONE; i++)
		enqueue_and_wait("n", 1, ++started);
	for (int i = 0; i < ALONE_M; i++)
		enqueue_and_wait("m", 1, ++started);
	uint64_t alone = claims_of(w, W) - claims0;
	printf("NOTIFY to %d listening workers: %llu claims for %d jobs enqueued one by one\n", W,
	       (unsigned long long)alone, ALONE + ALONE_M);
	ck_assert_msg(alone <= (uint64_t)(SQ_WAKE_MIN + 2) * (ALONE + ALONE_M),
		      "%llu claims for %d jobs enqueued one by one, more than %d a job: did "
		      "each NOTIFY wake more of the %d workers than the %d a lone job needs?",
		      (unsigned long long)alone, ALONE + ALONE_M, SQ_WAKE_MIN + 2, W, SQ_WAKE_MIN);
	/* payloads that sq_enqueue never sends (anyone may NOTIFY): a count
	 * past every integer, text that is no payload; the workers go on */
	char forged[256];
	snprintf(forged, sizeof(forged),
		 "SELECT pg_notify('shardq_jobs', '0 %08x:99999999999999999999999'),"
		 " pg_notify('shardq_jobs', 'x y:z'), pg_notify('shardq_jobs', ' ')",
		 sq_wake_type_hash("n"));
	for (int s = 0; s < t.nshards; s++)
		testdb_scalar(&t, s, forged);
	started += BATCH;
	enqueue_and_wait("n", BATCH, started);
	stop_error_free(w, th, W, "wF");
	ck_assert_int_eq(completed_once(), started);
	cleanup();
}
END_TEST

/* A shard at schema 7 has no shardq.listeners: its listening workers are
 * woken by every NOTIFY, as before, and say nothing about it (the LISTEN
 * is not taken for refused, nor made again). */
START_TEST(without_the_listeners_table_every_worker_is_woken)
{
	enum { W = 2, ROUNDS = 4 };
	setup_with("sqt_work_few7", "[type n]\nhistory = true\n");
	for (int s = 0; s < t.nshards; s++)
		testdb_scalar(&t, s,
			      "DROP TABLE shardq.listeners; DELETE FROM shardq.schema_version "
			      "WHERE version = 8; SELECT 1");
	pthread_t th[W];
	sq_worker *w[W];
	for (int i = 0; i < W; i++) {
		char id[16];
		snprintf(id, sizeof(id), "wS%d", i);
		w[i] = idle_listening_worker(id, 600, &th[i]);
	}
	/* each has tried to register on every shard */
	double since = test_now_s();
	while (testdb_sum(&t, "SELECT count(*) FROM pg_stat_activity WHERE " JOB_LISTENERS
			      " AND datname = current_database()"
			      " AND query <> 'LISTEN shardq_jobs'") < W * t.nshards) {
		sq_worker_stats st;
		sq_worker_get_stats(w[0], &st);
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "the workers' LISTEN connections have not all tried to register and "
			      "stayed after %.0fs (wS0's last error: %s)",
			      test_now_s() - since, st.last_error);
		usleep(50000);
	}
	usleep(300000);
	for (int i = 0; i < ROUNDS; i++)
		enqueue_and_wait("n", 1, i + 1);
	stop_error_free(w, th, W, "wS");
	ck_assert_int_eq(completed_once(), ROUNDS);
	cleanup();
}
END_TEST

static atomic_int hole_runs, hole_lost;

/* Runs 10 s (or *(double *)arg s), and notes whether its lease was ever
 * lost meanwhile. */
static sq_job_result run_10s(const sq_job *job, void *arg, char *e, size_t elen)
{
	(void)e, (void)elen;
	double until = test_now_s() + (arg ? *(const double *)arg : 10);
	atomic_fetch_add(&hole_runs, 1);
	while (test_now_s() < until) {
		if (sq_job_lease_lost(job)) {
			atomic_fetch_add(&hole_lost, 1);
			break;
		}
		usleep(20000);
	}
	return SQ_RESULT_DONE;
}

/* Enqueues keyed jobs of type h through c until n of them are off s2 (and,
 * with need_on_s2, one is on s2); returns how many are off s2, and the
 * count on s2 in *on_s2 (may be NULL). */
static int enqueue_off_s2(sq_client *c, const char *prefix, int n, int need_on_s2, int *on_s2)
{
	sq_error err;
	int others = 0, here = 0;
	for (int i = 0; others < n || (need_on_s2 && !here); i++) {
		char key[32];
		sq_job_spec j;
		sq_enqueue_result r;
		snprintf(key, sizeof(key), "%s-%d", prefix, i);
		memset(&j, 0, sizeof(j));
		j.type = "h";
		j.key = key;
		OKE(sq_enqueue(c, &j, 1, &r, &err));
		if (r.shard == 1)
			here++;
		else
			others++;
		ck_assert_int_lt(i, 1000);
	}
	if (on_s2)
		*on_s2 = here;
	return others;
}

/* After a worker (its stats st) ran the `others` jobs off s2 while `what`:
 * every run kept its lease to the end, and each job was completed once,
 * on its first run. */
static void assert_runs_kept(const sq_worker_stats *st, int others, const char *what)
{
	printf("%s: %d runs off s2, %d lost their lease; the worker's last error: %s\n", what,
	       atomic_load(&hole_runs), atomic_load(&hole_lost), st->last_error);
	ck_assert_msg(atomic_load(&hole_lost) == 0 && st->types[0].lost == 0,
		      "%d of %d runs off s2 lost their lease (%llu writes answered lost) while "
		      "%s: the worker's loop was held up (last error: %s)",
		      atomic_load(&hole_lost), atomic_load(&hole_runs),
		      (unsigned long long)st->types[0].lost, what, st->last_error);
	ck_assert_msg(atomic_load(&hole_runs) == others,
		      "%d runs for the %d jobs off s2 (%s): a job ran twice, or s2's ran",
		      atomic_load(&hole_runs), others, what);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(DISTINCT id) FROM shardq.jobs_history WHERE "
					"status = 'completed' AND task = 'h' AND attempt = 1"),
			 others);
}

/* Runs a worker of `slots` slots for type h on cfg until `others` jobs
 * (those off s2) are completed, failing on a stall; asserts that every run
 * kept its lease to the end and that each of those jobs was completed once,
 * on its first run; returns its stats (last_error: for the caller). */
static sq_worker_stats run_off_s2(const sq_config *cfg, const char *id, int slots, int others,
				  const char *what)
{
	sq_error err;
	sq_worker_opts o;
	sq_worker *w;
	sq_worker_opts_init(&o);
	o.worker_id = id;
	o.poll_min_ms = o.poll_max_ms = 100;
	OKE(sq_worker_create(cfg, &o, &w, &err)); /* s2 is tried once here: 8 s */
	OKE(sq_worker_add(w, "h", slots, run_10s, NULL, &err));
	pthread_t th;
	test_worker_thread(&th, w);
	const char *done_sql = "SELECT count(*) FROM shardq.jobs_history WHERE status = "
			       "'completed' AND task = 'h'";
	long long done = 0, last = -1;
	int runs = 0;
	double since = test_now_s();
	sq_worker_stats st;
	while ((done = testdb_sum(&t, done_sql)) < others) {
		if (done != last || atomic_load(&hole_runs) != runs) {
			last = done;
			runs = atomic_load(&hole_runs);
			since = test_now_s();
		}
		sq_worker_get_stats(w, &st);
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "%lld of %d jobs off s2 completed, %d runs begun (%d of them lost "
			      "their lease), and nothing moved for %.0fs; the worker's last error: "
			      "%s",
			      done, others, runs, atomic_load(&hole_lost), testdb_stall_s(),
			      st.last_error);
		usleep(50000);
	}
	sq_worker_get_stats(w, &st);
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	assert_runs_kept(&st, others, what);
	sq_worker_destroy(w);
	return st;
}

/*
 * A worker with one shard that does not answer (s2 points at a black
 * hole; connect_timeout 8 s) runs the other shards' jobs through: its
 * loop tries s2 again after the backoff, and a try holds a tick up for
 * 50 ms at most, not 8 s. The lease is 8 s: a run's stop-by is 6 s after
 * the write that set its lease, and its heartbeat is due after 4 s, so a
 * blocking connect of 8 s anywhere in a run makes the heartbeat late, and
 * the run is stopped and its result discarded. Asserted: every run kept
 * its lease to the end, each job was completed once, on its first run,
 * and the worker's error names s2.
 */
START_TEST(a_shard_that_does_not_answer_holds_no_run_up)
{
	enum { N = 4 };
	sq_error err;
	setup_with("sqt_work_hole",
		   "[type h]\nhistory = true\nstarting_timeout = 8s\nexecution_timeout = 8s\n");
	/* N jobs on the other shards (keys whose partition they hold); any on
	 * s2 stay there */
	enqueue_off_s2(t.client, "hole", N, 0, NULL);
	int port, hole = testdb_black_hole(1, &port);
	char *direct = testdb_ini(&t, NULL, "\n[connection]\nconnect_timeout = 8s\n");
	char *ini = testdb_ini_via(direct, t.ports[1], port);
	free(direct);
	sq_config *cfg;
	OKE(sq_config_parse(ini, "hole.ini", &cfg, &err));
	free(ini);

	sq_worker_stats st = run_off_s2(cfg, "wH", N, N, "s2 did not answer");
	ck_assert_msg(strstr(st.last_error, "s2") != NULL,
		      "the worker's last error does not name s2: %s", st.last_error);
	sq_config_free(cfg);
	close(hole);
	cleanup();
}
END_TEST

/* config text `ini` (malloc'd) whose shard at `port` is named by host
 * name: localhost instead of 127.0.0.1 */
static char *ini_by_name(const char *ini, int port)
{
	char from[64], to[64];
	snprintf(from, sizeof(from), "host=127.0.0.1 port=%d ", port);
	snprintf(to, sizeof(to), "host=localhost port=%d ", port);
	return testdb_ini_sub(ini, from, to);
}

/*
 * A shard named by a host name whose name server does not answer: s2 is
 * `localhost`, and the failpoint `lookup` holds every lookup for 60 s
 * (connect_timeout 8 s). The lookup runs on a thread of its own, so the
 * worker's loop keeps the other shards' 10 s runs within their 8 s leases,
 * as with a host that does not answer (above). Before that, with the
 * lookup answering, a client reaches s2 through it: the addresses it
 * finds are the ones connected to. Asserted: every run kept its lease,
 * each job was completed once, on its first run, and the worker's error
 * says s2's name lookup did not answer.
 */
START_TEST(a_slow_name_lookup_holds_no_run_up)
{
	enum { N = 4 };
	sq_error err;
	setup_with("sqt_work_lookup",
		   "[type h]\nhistory = true\nstarting_timeout = 8s\nexecution_timeout = 8s\n");
	char *direct = testdb_ini(&t, NULL, "\n[connection]\nconnect_timeout = 8s\n");
	char *ini = ini_by_name(direct, t.ports[1]);
	free(direct);
	sq_config *cfg;
	OKE(sq_config_parse(ini, "lookup.ini", &cfg, &err));
	free(ini);

	/* through the lookup: N jobs on the other shards, and one on s2 */
	sq_client *c;
	OKE(sq_client_open(cfg, 0, &c, &err));
	int on_s2, others = enqueue_off_s2(c, "lookup", N, 1, &on_s2);
	sq_client_close(c);
	ck_assert_int_le(others, 64);
	ck_assert_int_eq(testdb_scalar(&t, 1, "SELECT count(*) FROM shardq.jobs WHERE task = 'h'"),
			 on_s2);

	setenv("SHARDQ_FAILPOINT_SLEEP", "lookup:60000", 1);
	sq_worker_stats st = run_off_s2(cfg, "wL", 64, others, "s2's name lookup did not answer");
	ck_assert_msg(strstr(st.last_error, "shard s2 (localhost:") &&
			      (strstr(st.last_error, "looking up its host name") ||
			       strstr(st.last_error, "no answer from the name lookup")),
		      "the worker's last error does not say s2's lookup is slow: %s",
		      st.last_error);
	/* s2's job is still there, not started */
	ck_assert_int_eq(testdb_scalar(&t, 1,
				       "SELECT count(*) FROM shardq.jobs WHERE task = 'h' "
				       "AND status = 'ready'"),
			 on_s2);
	sq_config_free(cfg);
	cleanup();
}
END_TEST

/* A test database whose shards other than s2 keep n jobs of type h (8 s
 * leases) and s2 none: only the other shards' runs are watched. Returns
 * how many there are (at least n). */
static int setup_off_s2(const char *db, const char *prefix, int n)
{
	setup_with(db, "[type h]\nhistory = true\nstarting_timeout = 8s\nexecution_timeout = 8s\n");
	int others = enqueue_off_s2(t.client, prefix, n, 0, NULL);
	testdb_scalar(&t, 1,
		      "WITH d AS (DELETE FROM shardq.jobs RETURNING 1) SELECT count(*) FROM d");
	return others;
}

/* s2's LISTEN connections (a worker's, not the map's) */
static const char *const s2_listening =
	"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
	"application_name LIKE '%-listen' AND application_name NOT LIKE '%-map-listen'";

/* Starts a listening worker (polling every 100 ms) of `slots` slots for
 * type h on cfg, each run taking *run_s, on its thread *th; returns once
 * `runs` runs have begun and s2 is listened to. */
static sq_worker *start_listening(const sq_config *cfg, const char *id, int slots, double *run_s,
				  int runs, pthread_t *th)
{
	sq_error err;
	sq_worker_opts o;
	sq_worker *w;
	sq_worker_opts_init(&o);
	o.worker_id = id;
	o.listen = 1;
	o.poll_min_ms = o.poll_max_ms = 100;
	OKE(sq_worker_create(cfg, &o, &w, &err));
	OKE(sq_worker_add(w, "h", slots, run_10s, run_s, &err));
	test_worker_thread(th, w);
	double since = test_now_s();
	while (atomic_load(&hole_runs) < runs || testdb_scalar(&t, 1, s2_listening) < 1) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "%d of %d runs begun, %lld LISTEN connections on s2, after %.0fs",
			      atomic_load(&hole_runs), runs, testdb_scalar(&t, 1, s2_listening),
			      testdb_stall_s());
		usleep(50000);
	}
	return w;
}

/* Waits until the worker w (on thread th) has completed `others` jobs of
 * type h (and, with relisten, listens to s2 again), failing on a stall;
 * stops it and asserts that every run kept its lease (assert_runs_kept). */
static void finish_off_s2(sq_worker *w, pthread_t th, int others, int relisten, const char *what)
{
	const char *done_sql = "SELECT count(*) FROM shardq.jobs_history WHERE status = "
			       "'completed' AND task = 'h'";
	double since = test_now_s();
	long long done = 0, last = -1, relistened = !relisten;
	sq_worker_stats st;
	while ((done = testdb_sum(&t, done_sql)) < others || !relistened) {
		if (!relistened)
			relistened = testdb_scalar(&t, 1, s2_listening);
		if (done != last) {
			last = done;
			since = test_now_s();
		}
		sq_worker_get_stats(w, &st);
		ck_assert_msg(test_now_s() - since < testdb_stall_s() + 20,
			      "%lld of %d jobs completed%s, nothing moved for %.0fs; the worker's "
			      "last error: %s",
			      done, others,
			      relisten ? (relistened ? ", s2 is listened to again"
						     : ", s2 is not listened to again")
				       : "",
			      testdb_stall_s() + 20, st.last_error);
		usleep(50000);
	}
	sq_worker_get_stats(w, &st);
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	assert_runs_kept(&st, others, what);
}

/*
 * A shard named by a host name, its connections cut while the other
 * shards' jobs run, and a name server that takes 7 s to answer (the
 * failpoint `lookup`; connect_timeout 12 s): the shard's connection is
 * made again through a lookup off the loop, and so is its LISTEN
 * connection (sq_listener). 20 s runs under 8 s leases on the other shards: a
 * 7 s stop of the loop anywhere in them makes a heartbeat late, and the
 * run is stopped. Asserted: s2 is listened to again, no run lost its
 * lease, each job completed once on its first run.
 */
START_TEST(a_slow_name_lookup_holds_no_relisten_up)
{
	enum { N = 4 };
	sq_error err;
	int others = setup_off_s2("sqt_work_relisten", "relisten", N);
	char *direct = testdb_ini(&t, NULL, "\n[connection]\nconnect_timeout = 12s\n");
	char *ini = ini_by_name(direct, t.ports[1]);
	free(direct);
	sq_config *cfg;
	OKE(sq_config_parse(ini, "relisten.ini", &cfg, &err));
	free(ini);

	setenv("SHARDQ_FAILPOINT_SLEEP", "lookup:7000", 1);
	static double run_s = 20;
	pthread_t th;
	/* s2 looked up once at the start: 7 s */
	sq_worker *w = start_listening(cfg, "wR", N, &run_s, N, &th);
	/* the runs are under way: s2's connections are cut */
	long long cut = testdb_scalar(
		&t, 1,
		"SELECT count(pg_terminate_backend(pid, 30000)) FROM pg_stat_activity "
		"WHERE datname = current_database() AND pid <> pg_backend_pid()");
	ck_assert_int_ge(cut, 2);
	finish_off_s2(w, th, others, 1,
		      "s2 was connected and listened to again after a slow lookup");
	sq_worker_destroy(w);
	sq_config_free(cfg);
	cleanup();
}
END_TEST

/*
 * A shard whose host vanishes while the worker listens to it: s2 is
 * reached through a proxy that turns into a hole (its connections are cut,
 * new ones wait unanswered; connect_timeout 8 s). The worker sees its
 * LISTEN connection cut at once, while its own connection to s2 still
 * looks up (nothing was sent on it yet), and connects a LISTEN connection
 * again. That connect must not hold the loop up: the other shards' 20 s
 * runs keep their 8 s leases (a blocking connect of 8 s makes their
 * heartbeats late). Asserted: every run kept its lease, each job was
 * completed once, on its first run.
 */
START_TEST(a_shard_that_vanishes_holds_no_relisten_up)
{
	enum { N = 4 };
	sq_error err;
	testdb_proxy px;
	int others = setup_off_s2("sqt_work_vanish", "vanish", N);
	testdb_proxy_start(&px, t.ports[1]);
	char *direct = testdb_ini(&t, NULL, "\n[connection]\nconnect_timeout = 8s\n");
	char *ini = testdb_ini_via(direct, t.ports[1], px.port);
	free(direct);
	sq_config *cfg;
	OKE(sq_config_parse(ini, "vanish.ini", &cfg, &err));
	free(ini);

	static double run_s = 20;
	pthread_t th;
	sq_worker *w = start_listening(cfg, "wV", N, &run_s, N, &th);
	/* the runs are under way: s2's host vanishes */
	testdb_proxy_hole(&px, 1);
	finish_off_s2(w, th, others, 0, "s2's host vanished while the worker listened to it");
	sq_worker_destroy(w);
	testdb_proxy_hole(&px, 0);
	testdb_proxy_stop(&px);
	sq_config_free(cfg);
	cleanup();
}
END_TEST

/* Every job of type h in history completed once, on its first try. */
static void h_jobs_ran_once(void)
{
	ck_assert_int_eq(
		testdb_sum(&t, "SELECT count(DISTINCT id) FROM shardq.jobs_history WHERE "
			       "status = 'completed' AND task = 'h' AND attempt = 1"),
		testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history WHERE task = 'h'"));
}

/* Enqueues one job of type h on s2 (keys prefix-0, prefix-1, ... until
 * one lands there). */
static void enqueue_on_s2(const char *prefix)
{
	enqueue_off_s2(t.client, prefix, 0, 1, NULL);
}

/* An idle listening worker for type h on cfg (8 slots, enough for every
 * shard to be asked: a claim shares them among the shards by their recent
 * yield; 50 ms runs) whose polls are 10 minutes apart, so only a wake-up
 * starts a job soon, on its thread *th; returns once s2 is listened to and
 * its claims at the start are answered. */
static sq_worker *start_idle_listener(const sq_config *cfg, const char *id, pthread_t *th)
{
	sq_error err;
	sq_worker_opts o;
	sq_worker *w;
	static double run_s = 0.05;
	sq_worker_opts_init(&o);
	o.worker_id = id;
	o.listen = 1;
	o.poll_min_ms = o.poll_max_ms = 600000;
	OKE(sq_worker_create(cfg, &o, &w, &err));
	OKE(sq_worker_add(w, "h", 8, run_10s, &run_s, &err));
	test_worker_thread(th, w);
	double since = test_now_s();
	while (testdb_scalar(&t, 1, s2_listening) < 1) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "the worker does not listen to s2 after %.0fs", testdb_stall_s());
		usleep(50000);
	}
	usleep(300000);
	return w;
}

/* Waits until s2 has a completed job of type h, failing on a stall (`what`
 * says which job); prints how long it took; returns w's stats. */
static sq_worker_stats await_s2_job(sq_worker *w, const char *what)
{
	const char *done_sql = "SELECT count(*) FROM shardq.jobs_history WHERE status = "
			       "'completed' AND task = 'h'";
	double since = test_now_s();
	sq_worker_stats st;
	while (testdb_scalar(&t, 1, done_sql) < 1) {
		sq_worker_get_stats(w, &st);
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "s2's job %s was not run within %.0fs of its enqueue (the next poll "
			      "is 10 minutes away); the worker's last error: %s",
			      what, testdb_stall_s(), st.last_error);
		usleep(50000);
	}
	sq_worker_get_stats(w, &st);
	printf("s2's job %s ran %.2fs after its enqueue; the worker's last error: %s\n", what,
	       test_now_s() - since, st.last_error);
	return st;
}

/*
 * A shard that stops answering on connections that stay open (a host cut
 * off by the network without a reset, or stuck): s2 is reached through a
 * proxy that freezes while the worker claims from it every 100 ms (one of
 * its 5 slots is free), and so does the meta database, which the worker
 * asks for the map's version every second (map_poll). Their statements
 * then get no answer, ever. The worker
 * drops that connection after an eighth of its shortest lease (1 s here)
 * and goes on: the other shards' 20 s runs keep their 8 s leases (a tick
 * that waits for s2 sends none of their heartbeats). Asserted: every run
 * kept its lease, each job was completed once on its first run, and once
 * s2 answers again a job enqueued there is run.
 */
START_TEST(a_shard_that_stops_answering_holds_no_heartbeat_up)
{
	enum { N = 4 };
	sq_error err;
	testdb_proxy px, meta;
	int others = setup_off_s2("sqt_work_freeze", "freeze", N);
	testdb_proxy_start(&px, t.ports[1]);
	/* the meta database (s1's) through a proxy of its own, frozen too */
	testdb_proxy_start(&meta, t.ports[0]);
	char extra[256];
	snprintf(extra, sizeof(extra),
		 "meta_dsn = host=127.0.0.1 port=%d dbname=%s user=postgres\n"
		 "\n[connection]\nconnect_timeout = 8s\n",
		 meta.port, t.db);
	char *direct = testdb_ini(&t, NULL, extra);
	char *ini = testdb_ini_via(direct, t.ports[1], px.port);
	free(direct);
	sq_config *cfg;
	OKE(sq_config_parse(ini, "freeze.ini", &cfg, &err));
	free(ini);

	static double run_s = 20;
	pthread_t th;
	sq_worker *w = start_listening(cfg, "wF", N + 1, &run_s, N, &th);
	/* a claim on s2 at every tick (the free slot's), a look at the map's
	 * version on the meta database every second (map_poll) */
	testdb_proxy_freeze(&px, 1);
	testdb_proxy_freeze(&meta, 1);
	const char *done_sql = "SELECT count(*) FROM shardq.jobs_history WHERE status = "
			       "'completed' AND task = 'h'";
	double since = test_now_s();
	long long done = 0, last = -1;
	sq_worker_stats st;
	while ((done = testdb_sum(&t, done_sql)) < others) {
		if (done != last) {
			last = done;
			since = test_now_s();
		}
		sq_worker_get_stats(w, &st);
		ck_assert_msg(test_now_s() - since < testdb_stall_s() + 20,
			      "%lld of %d jobs completed with s2 frozen, nothing moved for %.0fs; "
			      "the worker's last error: %s",
			      done, others, testdb_stall_s() + 20, st.last_error);
		usleep(50000);
	}
	sq_worker_get_stats(w, &st);
	assert_runs_kept(&st, others, "s2 stopped answering");

	/* s2 answers again: a job enqueued there is run (1 s) */
	testdb_proxy_freeze(&px, 0);
	testdb_proxy_freeze(&meta, 0);
	run_s = 1;
	enqueue_on_s2("back");
	since = test_now_s();
	while (testdb_scalar(&t, 1, done_sql) < 1) {
		sq_worker_get_stats(w, &st);
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "s2 answers again, but its job was not run within %.0fs; the "
			      "worker's last error: %s",
			      testdb_stall_s(), st.last_error);
		usleep(50000);
	}
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	sq_worker_destroy(w);
	h_jobs_ran_once();
	testdb_proxy_stop(&px);
	testdb_proxy_stop(&meta);
	sq_config_free(cfg);
	cleanup();
}
END_TEST

/* Rounds each shard's answer ended, from the worker's on_tick hook. */
static atomic_int rounds_ended[SQ_MAX_SHARDS];

static void count_round(const sq_worker_tick *tk, void *arg)
{
	(void)arg;
	atomic_fetch_add(&rounds_ended[tk->shard], 1);
}

/* The other shards' rounds, summed (all but s2). */
static int rounds_off_s2(void)
{
	int n = 0;
	for (int s = 0; s < SQ_MAX_SHARDS; s++)
		n += s == 1 ? 0 : atomic_load(&rounds_ended[s]);
	return n;
}

/*
 * A shard whose answers are held delays no other shard's jobs: s2 is
 * reached through a proxy that freezes while the worker polls it every
 * 50 ms, so that s2's round (its claim) is out and stays out; the answer
 * timeout and the leases are an hour, so the worker waits 450 s for that
 * answer (an eighth of the lease) before it gives the connection up. Jobs enqueued on the
 * other shards meanwhile are claimed and completed by those shards' own
 * rounds. Asserted: each of them completed once, on its first run, while
 * s2's round was still out (no round of s2 ended from the freeze until
 * the last of them was done); a loop that waited for every shard's
 * answer before the next claim stalls here, which the test reports. Once
 * s2 answers again, a job enqueued there is run too.
 */
START_TEST(a_held_shard_delays_no_other_shards_jobs)
{
	enum { N = 40 };
	sq_error err;
	testdb_proxy px;
	setup_with("sqt_work_held", "[type h]\nhistory = true\nstarting_timeout = 1h\n"
				    "execution_timeout = 1h\n");
	testdb_proxy_start(&px, t.ports[1]);
	char *direct = testdb_ini(&t, NULL, "\n[connection]\nanswer_timeout = 1h\n");
	char *ini = testdb_ini_via(direct, t.ports[1], px.port);
	free(direct);
	sq_config *cfg;
	OKE(sq_config_parse(ini, "held.ini", &cfg, &err));
	free(ini);

	static double run_s = 0.01;
	sq_worker_opts o;
	sq_worker *w;
	pthread_t th;
	sq_worker_opts_init(&o);
	o.worker_id = "wHeld";
	o.poll_min_ms = o.poll_max_ms = 50;
	o.on_tick = count_round;
	OKE(sq_worker_create(cfg, &o, &w, &err));
	OKE(sq_worker_add(w, "h", 8, run_10s, &run_s, &err));
	test_worker_thread(&th, w);

	/* s2's answers held: its round out for good once the others have
	 * had 20 rounds since (each polls every 50 ms) */
	testdb_proxy_freeze(&px, 1);
	int s2_at = atomic_load(&rounds_ended[1]), others_at = rounds_off_s2();
	double since = test_now_s();
	while (rounds_off_s2() - others_at < 20 || atomic_load(&rounds_ended[1]) != s2_at) {
		if (atomic_load(&rounds_ended[1]) != s2_at) { /* one was still answered */
			s2_at = atomic_load(&rounds_ended[1]);
			others_at = rounds_off_s2();
		}
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "the other shards' rounds did not go on with s2 frozen for %.0fs "
			      "(%d rounds of theirs since the freeze, %d of s2's)",
			      testdb_stall_s(), rounds_off_s2() - others_at,
			      atomic_load(&rounds_ended[1]));
		usleep(20000);
	}
	s2_at = atomic_load(&rounds_ended[1]);

	int others = enqueue_off_s2(t.client, "held", N, 0, NULL);
	const char *done_sql = "SELECT count(*) FROM shardq.jobs_history WHERE status = "
			       "'completed' AND task = 'h'";
	long long done = 0, last = -1;
	double started = test_now_s();
	since = started;
	sq_worker_stats st;
	while ((done = testdb_sum(&t, done_sql)) < others) {
		if (done != last) {
			last = done;
			since = test_now_s();
		}
		sq_worker_get_stats(w, &st);
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "%lld of %d jobs on the other shards completed while s2's answer "
			      "was held, and none for %.0fs: their claims wait for s2's round "
			      "(the worker's last error: %s)",
			      done, others, testdb_stall_s(), st.last_error);
		usleep(20000);
	}
	printf("%d jobs off s2 completed in %.2fs with s2's round held; %d rounds of the "
	       "other shards meanwhile\n",
	       others, test_now_s() - started, rounds_off_s2() - others_at);
	ck_assert_msg(atomic_load(&rounds_ended[1]) == s2_at,
		      "a round of s2 ended while its answers were held (%d, was %d): the jobs "
		      "above may have waited for it",
		      atomic_load(&rounds_ended[1]), s2_at);
	sq_worker_get_stats(w, &st);
	ck_assert_msg(st.types[0].lost == 0, "%llu writes answered lost",
		      (unsigned long long)st.types[0].lost);
	ck_assert_int_eq(testdb_sum(&t,
				    "SELECT count(DISTINCT id) FROM shardq.jobs_history "
				    "WHERE status = 'completed' AND task = 'h' AND attempt = 1"),
			 others);

	/* s2 answers again: its held round ends, and a job there is run */
	testdb_proxy_freeze(&px, 0);
	enqueue_on_s2("heldback");
	await_s2_job(w, "enqueued once s2 answered again");
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	sq_worker_destroy(w);
	h_jobs_ran_once();
	testdb_proxy_stop(&px);
	sq_config_free(cfg);
	cleanup();
}
END_TEST

/*
 * A LISTEN connection that dies unseen: the connections through a proxy in
 * front of s2 lose their shard side, while their worker side stays open
 * and silent (a network cut that ended, a NAT that forgot them; no reset
 * reaches the worker). s2's NOTIFYs then go nowhere, and an idle worker
 * whose polls are 10 minutes apart would not run s2's next job for 10
 * minutes. The worker probes a LISTEN connection silent for 5 s, takes
 * one whose probe gets no answer within 5 s as dead, listens again, and
 * claims from s2 at once; that claim goes out on its own connection to
 * s2, dead too, and fails after the answer wait (3.75 s), and the poll
 * that follows connects again. Asserted: the job enqueued on s2 after the
 * cut is run once, well before the next poll.
 */
START_TEST(a_listen_connection_that_died_unseen_is_made_again)
{
	sq_error err;
	testdb_proxy px;
	setup_with("sqt_work_zombie", "[type h]\nhistory = true\n");
	testdb_proxy_start(&px, t.ports[1]);
	char *direct = testdb_ini(&t, NULL, "");
	char *ini = testdb_ini_via(direct, t.ports[1], px.port);
	free(direct);
	sq_config *cfg;
	OKE(sq_config_parse(ini, "zombie.ini", &cfg, &err));
	free(ini);

	pthread_t th;
	sq_worker *w = start_idle_listener(cfg, "wZ", &th);
	testdb_proxy_zombie(&px);
	double since = test_now_s();
	while (testdb_scalar(&t, 1, s2_listening) > 0) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "s2 still has the worker's LISTEN backend %.0fs after the cut",
			      testdb_stall_s());
		usleep(50000);
	}
	enqueue_on_s2("zombie");
	sq_worker_stats st = await_s2_job(w, "enqueued after its connections died unseen");
	ck_assert_msg(strstr(st.last_error, "shard s2") != NULL,
		      "the worker's last error does not name s2: %s", st.last_error);
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	sq_worker_destroy(w);
	h_jobs_ran_once();
	testdb_proxy_stop(&px);
	sq_config_free(cfg);
	cleanup();
}
END_TEST

/*
 * A claim made on a wake-up that fails: the wake-up must not be lost with
 * it. An idle worker whose polls are 10 minutes apart is woken by s2's
 * NOTIFY; its claim there fails once (a trigger on s2's jobs raises on
 * the first update: a connection that died unseen fails the same way,
 * after the answer wait). Asserted: the claim is made again (the trigger
 * ran twice) and the job is run, long before the next poll; before, it
 * waited for that poll.
 */
START_TEST(a_claim_that_fails_after_a_wake_up_is_made_again)
{
	setup_with("sqt_work_wakefail", "[type h]\nhistory = true\n");
	testdb_scalar(&t, 1,
		      "CREATE SEQUENCE sqt_fail_once;"
		      "CREATE FUNCTION sqt_fail_once() RETURNS trigger LANGUAGE plpgsql AS $$"
		      "BEGIN IF nextval('sqt_fail_once') = 1 THEN"
		      "  RAISE EXCEPTION 'a claim made to fail once'; END IF; RETURN NEW; END $$;"
		      "CREATE TRIGGER sqt_fail_once BEFORE UPDATE ON shardq.jobs"
		      "  FOR EACH ROW EXECUTE FUNCTION sqt_fail_once();"
		      "SELECT 1");
	pthread_t th;
	sq_worker *w = start_idle_listener(t.cfg, "wW", &th);
	enqueue_on_s2("wakefail");
	sq_worker_stats st = await_s2_job(w, "whose first claim failed");
	ck_assert_int_ge(testdb_scalar(&t, 1, "SELECT last_value FROM sqt_fail_once"), 2);
	ck_assert_msg(strstr(st.last_error, "a claim made to fail once") != NULL,
		      "the claim did not fail as the test meant: %s", st.last_error);
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	sq_worker_destroy(w);
	/* each job once (enqueue_on_s2 may have put others on other shards) */
	h_jobs_ran_once();
	cleanup();
}
END_TEST

/* A host that is gone at ip:port: it takes no connection, answers none
 * (a listening socket that never accepts). */
static int hold_silent(const char *ip, int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	ck_assert_int_eq(inet_pton(AF_INET, ip, &a.sin_addr), 1);
	/* the other test's hole at the same address may have left connections
	 * in TIME_WAIT there */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	ck_assert_msg(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "cannot hold %s:%d: %s", ip,
		      port, strerror(errno));
	ck_assert_int_eq(listen(fd, 1), 0);
	return fd;
}

/*
 * A shard named by a host name with two addresses, the first of which
 * never answers (a host that is gone; SHARDQ_TEST_LOOKUP sets what the
 * lookup finds, a black hole holds 127.0.0.2 at s2's port, connect_timeout
 * 2 s): after connect_timeout on the first address the connect goes on to
 * the second, as libpq's blocking connect would, instead of failing and
 * starting with the first again on every try (s2 was then never reached).
 * Asserted: a worker runs every job, s2's too.
 */
START_TEST(a_host_name_whose_first_address_is_gone_is_reached_at_the_next)
{
	enum { N = 8 };
	sq_error err;
	setup_with("sqt_work_addrs", "[type h]\nhistory = true\n");
	int on_s2, others = enqueue_off_s2(t.client, "addrs", N, 1, &on_s2);
	int hole = hold_silent("127.0.0.2", t.ports[1]);
	char *direct = testdb_ini(&t, NULL, "\n[connection]\nconnect_timeout = 2s\n");
	char *ini = ini_by_name(direct, t.ports[1]);
	free(direct);
	sq_config *cfg;
	OKE(sq_config_parse(ini, "addrs.ini", &cfg, &err));
	free(ini);
	setenv("SHARDQ_TEST_LOOKUP", "localhost=127.0.0.2,127.0.0.1", 1);

	sq_worker_opts o;
	sq_worker *w;
	sq_worker_opts_init(&o);
	o.worker_id = "wA";
	o.poll_min_ms = o.poll_max_ms = 100;
	OKE(sq_worker_create(cfg, &o, &w, &err));
	OKE(sq_worker_add(w, "h", 4, run_10s, &(double){0}, &err));
	pthread_t th;
	test_worker_thread(&th, w);
	const char *done_sql = "SELECT count(*) FROM shardq.jobs_history WHERE status = "
			       "'completed' AND task = 'h'";
	long long done = 0, last = -1;
	double since = test_now_s();
	sq_worker_stats st;
	while ((done = testdb_sum(&t, done_sql)) < others + on_s2) {
		if (done != last) {
			last = done;
			since = test_now_s();
		}
		sq_worker_get_stats(w, &st);
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "%lld of %d jobs completed (%d of them on s2, named localhost, whose "
			      "first address does not answer), nothing moved for %.0fs; the "
			      "worker's last error: %s",
			      done, others + on_s2, on_s2, testdb_stall_s(), st.last_error);
		usleep(50000);
	}
	ck_assert_int_eq(testdb_scalar(&t, 1, done_sql), on_s2);
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	sq_worker_destroy(w);
	unsetenv("SHARDQ_TEST_LOOKUP");
	close(hole);
	sq_config_free(cfg);
	cleanup();
}
END_TEST

/*
 * A shard whose dsn names two hosts (host=127.0.0.3,127.0.0.1), the first
 * gone without a trace (connect_timeout 8 s), as with a primary that
 * vanished and its standby promoted. Such a dsn was connected by libpq's
 * blocking connect, the only one that went on to the next host, so every
 * reconnect held the loop up for 8 s. Now the hosts are looked up and
 * taken one address after another like a name's: the shard's connections
 * are cut during the other shards' 20 s runs (8 s leases), and the worker
 * reaches the shard again through the second host without holding its
 * loop up. Asserted: every run kept its lease, each job was completed
 * once, and a job enqueued on the shard after the cut is run.
 */
START_TEST(a_shard_with_two_hosts_the_first_gone_holds_no_run_up)
{
	enum { N = 4 };
	sq_error err;
	setup_with("sqt_work_hosts", "[type h]\nhistory = true\nstarting_timeout = 8s\n"
				     "execution_timeout = 8s\n[type q]\nhistory = true\n");
	int others = enqueue_off_s2(t.client, "hosts", N, 0, NULL);
	testdb_scalar(&t, 1,
		      "WITH d AS (DELETE FROM shardq.jobs RETURNING 1) SELECT count(*) FROM d");
	int hole = hold_silent("127.0.0.3", t.ports[1]);
	char *direct = testdb_ini(&t, NULL, "\n[connection]\nconnect_timeout = 8s\n");
	char from[64], to[80];
	snprintf(from, sizeof(from), "host=127.0.0.1 port=%d ", t.ports[1]);
	snprintf(to, sizeof(to), "host=127.0.0.3,127.0.0.1 port=%d ", t.ports[1]);
	char *ini = testdb_ini_sub(direct, from, to);
	free(direct);
	sq_config *cfg;
	OKE(sq_config_parse(ini, "hosts.ini", &cfg, &err));
	free(ini);

	sq_worker_opts o;
	sq_worker *w;
	sq_worker_opts_init(&o);
	o.worker_id = "wM";
	o.poll_min_ms = o.poll_max_ms = 100;
	OKE(sq_worker_create(cfg, &o, &w, &err)); /* s2 through the second host: 8 s */
	static double run_s = 20;
	OKE(sq_worker_add(w, "h", N, run_10s, &run_s, &err));
	OKE(sq_worker_add(w, "q", 1, note_start, NULL, &err));
	pthread_t th;
	test_worker_thread(&th, w);
	double since = test_now_s();
	while (atomic_load(&hole_runs) < N) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "%d of %d runs begun after %.0fs", atomic_load(&hole_runs), N,
			      testdb_stall_s());
		usleep(50000);
	}
	/* the runs are under way: s2's connections are cut (the call returns
	 * once their backends are gone: the test's own client, cut too, must
	 * see it before its enqueue), and a job is enqueued there */
	long long cut = testdb_scalar(
		&t, 1,
		"SELECT count(pg_terminate_backend(pid, 30000)) FROM pg_stat_activity "
		"WHERE datname = current_database() AND pid <> pg_backend_pid()");
	ck_assert_int_ge(cut, 1);
	int on_s2 = 0;
	for (int i = 0; !on_s2; i++) {
		char key[32];
		snprintf(key, sizeof(key), "q-%d", i);
		uint32_t part = sq_partition_of_key(key, strlen(key), t.partitions);
		if (sq_client_shard_of_partition(t.client, part) != 1)
			continue;
		enqueue_one(t.client, "q", key, NULL, NULL);
		on_s2 = 1;
	}
	const char *done_h = "SELECT count(*) FROM shardq.jobs_history WHERE status = "
			     "'completed' AND task = 'h'";
	const char *done_q = "SELECT count(*) FROM shardq.jobs_history WHERE status = "
			     "'completed' AND task = 'q'";
	since = test_now_s();
	long long dh = 0, dq = 0, last = -1;
	sq_worker_stats st;
	while ((dh = testdb_sum(&t, done_h)) < others || (dq = testdb_scalar(&t, 1, done_q)) < 1) {
		if (dh + dq != last) {
			last = dh + dq;
			since = test_now_s();
		}
		sq_worker_get_stats(w, &st);
		ck_assert_msg(test_now_s() - since < testdb_stall_s() + 20,
			      "%lld of %d jobs off s2 and %lld of 1 on s2 completed, nothing moved "
			      "for %.0fs; the worker's last error: %s",
			      dh, others, dq, testdb_stall_s() + 20, st.last_error);
		usleep(50000);
	}
	sq_worker_get_stats(w, &st);
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	assert_runs_kept(&st, others, "s2's first host was gone");
	sq_worker_destroy(w);
	close(hole);
	sq_config_free(cfg);
	cleanup();
}
END_TEST

/* Runs sq_job_lease_lost(job) in a child; returns what it printed, and
 * whether it was stopped by SIGABRT in *aborted. */
static char *lease_lost_in_child(const sq_job *job, int *aborted)
{
	static char out[2048];
	const char *path = tmp("lease_lost.err");
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 2);
		int r = sq_job_lease_lost(job);
		fprintf(stderr, "returned %d\n", r);
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	*aborted = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(out, 1, sizeof(out) - 1, f) : 0;
	if (f)
		fclose(f);
	out[n] = '\0';
	return out;
}

/*
 * sq_job_lease_lost answers only for the job a worker passed to a handler
 * (the task around it says whether the lease is held). Given a job of
 * sq_claim (here a copy, in memory the test owns, so that what lies before
 * it is readable) or NULL, it returns -1, as its header says, instead of
 * answering from whatever memory lies before the job; it does not abort
 * (run in a child, so that an abort fails the test with what it printed).
 * (The handler's own job is asked in a_shard_that_does_not_answer_
 * holds_no_run_up and by `shardq work --exec`.)
 */
START_TEST(lease_lost_refuses_a_job_no_handler_was_given)
{
	setup_with("sqt_work_misuse", "[type m]\n");
	test_enqueue_n(t.client, "m", 1, NULL);
	sq_claim_req req = {"m", 1, 0};
	sq_job *jobs = NULL;
	size_t n = 0;
	sq_error err;
	OKE(sq_claim(t.client, "wm", &req, 1, &jobs, &n, &err));
	ck_assert_int_eq(n, 1);
	struct {
		char before[256];
		sq_job job;
	} copy;
	memset(copy.before, 0, sizeof(copy.before));
	copy.job = jobs[0];
	int aborted;
	const char *out = lease_lost_in_child(&copy.job, &aborted);
	ck_assert_msg(!aborted && !strcmp(out, "returned -1\n"),
		      "a job of sq_claim: aborted %d, printed: %s", aborted, out);
	out = lease_lost_in_child(NULL, &aborted);
	ck_assert_msg(!aborted && !strcmp(out, "returned -1\n"), "NULL: aborted %d, printed: %s",
		      aborted, out);
	sq_jobs_free(jobs, n);
	cleanup();
}
END_TEST

typedef struct open_arg {
	sq_config *cfg;
	sq_status st;
	sq_error err;
	sq_client *c;
	atomic_int done;
} open_arg;

static void *open_client(void *p)
{
	open_arg *a = p;
	a->st = sq_client_open(a->cfg, 0, &a->c, &a->err);
	atomic_store(&a->done, 1);
	return NULL;
}

/*
 * A client connects to its shards all at once. s2 and s3 point at two
 * black holes, connect_timeout is 10 minutes: the test takes each hole's
 * connection (and answers nothing) and waits until both have one while the
 * open is still under way, which a client that connects one shard after
 * another never gets to (it waits on s2 for connect_timeout, and the test
 * fails on its stall limit). Then it closes them: the open fails, naming
 * s2 and s3 and not s1.
 */
START_TEST(a_client_connects_its_shards_at_once)
{
	sq_error err;
	testdb_open(&t, "sqt_open_holes", 3, 64, "[type m]\n");
	int pa, pb, ha = testdb_black_hole(1, &pa), hb = testdb_black_hole(1, &pb);
	char *direct = testdb_ini(&t, NULL, "\n[connection]\nconnect_timeout = 10m\n");
	char *via_a = testdb_ini_via(direct, t.ports[1], pa);
	char *ini = testdb_ini_via(via_a, t.ports[2], pb);
	free(direct);
	free(via_a);
	open_arg a;
	memset(&a, 0, sizeof(a));
	OKE(sq_config_parse(ini, "holes.ini", &a.cfg, &err));
	free(ini);
	pthread_t th;
	pthread_create(&th, NULL, open_client, &a);
	int got[2] = {-1, -1}, holes[2] = {ha, hb};
	double since = test_now_s();
	while (got[0] < 0 || got[1] < 0) {
		for (int i = 0; i < 2; i++) {
			struct pollfd p = {holes[i], POLLIN, 0};
			if (got[i] < 0 && poll(&p, 1, 20) > 0)
				got[i] = accept(holes[i], NULL, NULL);
		}
		ck_assert_msg(!atomic_load(&a.done),
			      "the open ended before both holes were connected to: %s", a.err.msg);
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "after %.0fs, s2's hole %s a connection and s3's %s: the shards are "
			      "not connected at once",
			      testdb_stall_s(), got[0] >= 0 ? "has" : "has no",
			      got[1] >= 0 ? "has" : "has no");
	}
	close(got[0]);
	close(got[1]);
	pthread_join(th, NULL);
	ck_assert_int_eq(a.st, SQ_ECONN);
	ck_assert_msg(strstr(a.err.msg, "shard s2 (") && strstr(a.err.msg, "shard s3 (") &&
			      !strstr(a.err.msg, "shard s1 ("),
		      "the open's error should name s2 and s3, not s1: %s", a.err.msg);
	sq_config_free(a.cfg);
	close(ha);
	close(hb);
	cleanup();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("worker");
	ADD_CASE(s, kill9_jobs_come_back, 3600);
	ADD_CASE(s, sigterm_releases_buffer_and_finishes, 3600);
	ADD_CASE(s, second_signal_exits_at_once, 3600);
	ADD_CASE(s, backpressure_and_long_jobs_never_prefetched, 3600);
	ADD_CASE(s, claims_out_keep_their_slots_from_buffered_jobs, 3600);
	ADD_CASE(s, fast_jobs_keep_slots_busy, 3600);
	ADD_CASE(s, expired_lease_result_discarded, 3600);
	ADD_CASE(s, exec_contract, 3600);
	ADD_CASE(s, exec_takes_what_the_shell_takes, 3600);
	ADD_CASE(s, notify_wakes_idle_worker, 3600);
	ADD_CASE(s, listens_again_after_its_connections_are_cut, 3600);
	ADD_CASE(s, a_notify_wakes_the_workers_its_batch_needs, 3600);
	ADD_CASE(s, without_the_listeners_table_every_worker_is_woken, 3600);
	ADD_CASE(s, a_shard_that_does_not_answer_holds_no_run_up, 3600);
	ADD_CASE(s, a_slow_name_lookup_holds_no_run_up, 3600);
	ADD_CASE(s, a_slow_name_lookup_holds_no_relisten_up, 3600);
	ADD_CASE(s, a_shard_that_vanishes_holds_no_relisten_up, 3600);
	ADD_CASE(s, a_shard_that_stops_answering_holds_no_heartbeat_up, 3600);
	ADD_CASE(s, a_held_shard_delays_no_other_shards_jobs, 3600);
	ADD_CASE(s, a_listen_connection_that_died_unseen_is_made_again, 3600);
	ADD_CASE(s, a_claim_that_fails_after_a_wake_up_is_made_again, 3600);
	ADD_CASE(s, a_host_name_whose_first_address_is_gone_is_reached_at_the_next, 3600);
	ADD_CASE(s, a_shard_with_two_hosts_the_first_gone_holds_no_run_up, 3600);
	ADD_CASE(s, lease_lost_refuses_a_job_no_handler_was_given, 3600);
	ADD_CASE(s, a_client_connects_its_shards_at_once, 3600);
	return run_suite(s);
}
