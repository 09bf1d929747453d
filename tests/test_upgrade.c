/* test_upgrade.c - upgrades without downtime: the previous release's workers and shardqd keep working while this build's `shardq init` migrates under them, and this build runs on the schema before its own and one after. */
/*
 * The previous release is a real build of the commit before the newest
 * migration (scripts/prev-release, run by the build into
 * $SHARDQ_PREV_DIR): its `shardq init` makes the cluster, its `shardq
 * work` and shardqd run beside this build's worker and a producer of this
 * build, and then this build's `shardq init` migrates while all of them
 * work. A move (this build's mover, with the new schema's markers) follows
 * while the old programs go on. The test ends with what a user counts on:
 * every acknowledged job completed, each exactly once, the old worker and
 * the old shardqd served jobs after the migration, and `shardq check`
 * finds nothing (docs/operations.md, "Upgrading").
 */
#define _GNU_SOURCE
#include "support.h"
#include "schema.h"

#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

static const char types[] = "[type up]\n"
			    "starting_timeout = 20s\n"
			    "execution_timeout = 20s\n"
			    "history = true\n"
			    "[type uh]\n"
			    "history = true\n";
static const char tok[] = "upgrade-test-token-0123456789abc";

/* What scripts/prev-release built: its programs and schema versions. */
typedef struct prev_release {
	char cli[600], daemon[600], commit[64];
	int shard_schema, meta_schema, ahead;
} prev_release;

static void prev_load(prev_release *p)
{
	const char *dir = getenv("SHARDQ_PREV_DIR");
	char path[600];
	ck_assert_msg(dir != NULL, "SHARDQ_PREV_DIR is not set (run through ctest)");
	snprintf(path, sizeof(path), "%s/prev.env", dir);
	char *env = test_read_file(path);
	ck_assert_msg(env != NULL, "%s is missing: the build runs scripts/prev-release", path);
	ck_assert_msg(strncmp(env, "unavailable=", 12) != 0,
		      "the previous release could not be built: %s", env + 12);
	const char *a = strstr(env, "ahead=");
	ck_assert_msg(sscanf(env, "commit=%63s shard_schema=%d meta_schema=%d", p->commit,
			     &p->shard_schema, &p->meta_schema) == 3,
		      "%s: cannot read '%s'", path, env);
	p->ahead = a ? atoi(a + 6) : 0;
	snprintf(p->cli, sizeof(p->cli), "%s/build/shardq", dir);
	snprintf(p->daemon, sizeof(p->daemon), "%s/build/shardqd", dir);
	free(env);
}

static long long shard_schema(testdb *t, int s)
{
	return testdb_scalar(t, s, "SELECT max(version) FROM shardq.schema_version");
}

/* Drops what this build's init made and lets the previous release's make
 * the cluster again, at its own schema. */
static void init_as_prev(testdb *t, const prev_release *p, const char *ini)
{
	char out[4096];
	sq_client_close(t->client);
	t->client = NULL;
	for (int s = 0; s < t->nshards; s++) {
		PGconn *c = testdb_pg(t, s);
		PGresult *r = PQexec(c, "SET client_min_messages = warning; "
					"DROP SCHEMA IF EXISTS shardq, shardq_meta CASCADE");
		ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "drop: %s", PQerrorMessage(c));
		PQclear(r);
		PQfinish(c);
	}
	int rc = test_cli_of(p->cli, NULL, out, sizeof(out), "-c %s init", ini);
	ck_assert_msg(rc == 0, "the previous release's init exited %d:\n%s", rc, out);
	for (int s = 0; s < t->nshards; s++)
		ck_assert_int_eq(shard_schema(t, s), p->shard_schema);
	t->client = testdb_client(t);
}

/* ---- HTTP through the previous release's shardqd -------------------------- */

static test_daemon D;

typedef struct acked {
	int64_t *ids;
	size_t n, cap;
} acked;

static void ack(acked *a, int64_t id)
{
	if (a->n == a->cap)
		a->ids = realloc(a->ids, (a->cap = a->cap ? 2 * a->cap : 256) * sizeof(*a->ids));
	a->ids[a->n++] = id;
}

/* One request; the reply's JSON (NULL unless 200). */
static json_t *post(const char *path, const char *body, int *status)
{
	hresp r = {0};
	int fd = hc_connect(D.port);
	int got = hc_send(fd, "POST", path, tok, body) == 0 && hc_recv(fd, &r) == 0;
	close(fd);
	*status = got ? r.status : 0;
	json_t *j = got && r.status == 200 ? json_loads(r.body, 0, NULL) : NULL;
	free(r.body);
	return j;
}

/* Posts n keyed jobs of `type` (keys PREFIX-SEQ) until shardqd takes them
 * (the same keys again after a failed answer: dedup makes that safe). */
static void post_jobs(acked *a, const char *type, const char *prefix, int seq, int n)
{
	char body[8192];
	int k = snprintf(body, sizeof(body), "{\"jobs\":[");
	for (int i = 0; i < n; i++)
		k += snprintf(body + k, sizeof(body) - (size_t)k,
			      "%s{\"type\":\"%s\",\"key\":\"%s-%d\",\"params\":{}}", i ? "," : "",
			      type, prefix, seq + i);
	snprintf(body + k, sizeof(body) - (size_t)k, "]}");
	double since = test_now_s();
	for (;;) {
		int status;
		json_t *j = post("/v1/jobs", body, &status), *one;
		size_t i;
		if (j) {
			json_array_foreach(json_object_get(j, "results"), i, one)
			{
				ack(a, json_integer_value(json_object_get(one, "id")));
			}
			json_decref(j);
			return;
		}
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "the previous release's shardqd took no enqueue for %.0fs (last "
			      "answer %d):\n%s",
			      testdb_stall_s(), status, test_file_text(D.out));
		usleep(100000);
	}
}

/* Claims the `uh` jobs through shardqd and completes them; how many. */
static int claim_complete_http(void)
{
	int status, n = 0;
	json_t *j = post("/v1/claim",
			 "{\"worker\":\"up-http\",\"types\":[{\"type\":\"uh\",\"limit\":50}]}",
			 &status),
	       *job;
	ck_assert_msg(j != NULL, "the previous release's shardqd answered a claim %d:\n%s", status,
		      test_file_text(D.out));
	size_t i;
	char refs[16384];
	int k = snprintf(refs, sizeof(refs), "{\"jobs\":[");
	json_array_foreach(json_object_get(j, "jobs"), i, job)
	{
		k += snprintf(refs + k, sizeof(refs) - (size_t)k,
			      "%s{\"id\":%" JSON_INTEGER_FORMAT ",\"attempt\":%" JSON_INTEGER_FORMAT
			      ",\"worker\":\"%s\"}",
			      n ? "," : "", json_integer_value(json_object_get(job, "id")),
			      json_integer_value(json_object_get(job, "attempt")),
			      json_string_value(json_object_get(job, "worker")));
		n++;
	}
	json_decref(j);
	if (n == 0)
		return 0;
	snprintf(refs + k, sizeof(refs) - (size_t)k, "]}");
	j = post("/v1/jobs/complete", refs, &status);
	ck_assert_msg(j != NULL, "the previous release's shardqd answered a completion %d:\n%s",
		      status, test_file_text(D.out));
	json_decref(j);
	return n;
}

/* ---- what ran ------------------------------------------------------------- */

/* Lines of the runs file that name worker (a substring). */
static long runs_by(const char *runs, const char *worker)
{
	char *text = test_read_file(runs);
	long n = 0;
	for (char *p = text; p && (p = strstr(p, worker)) != NULL; p++)
		n++;
	free(text);
	return n;
}

static testdb *drain_t;
static long long live_jobs(void *arg)
{
	(void)arg;
	return test_live_jobs(drain_t);
}

/* Every acknowledged id completed (in the history), and each `up` job ran
 * exactly once (one line in runs). */
static void assert_all_completed_once(testdb *t, acked *a, const char *runs)
{
	char *text = test_read_file(runs);
	long lines = 0;
	for (size_t i = 0; i < a->n; i++) {
		char sql[256];
		snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM shardq.jobs_history WHERE id = %" PRId64
			 " AND status = 'completed'",
			 a->ids[i]);
		ck_assert_msg(testdb_sum(t, sql) == 1,
			      "job %" PRId64 " was acknowledged but did not complete", a->ids[i]);
	}
	for (char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		lines++;
	/* each line is "ID WORKER"; a job in two lines ran twice */
	long long up_done = testdb_sum(t, "SELECT count(*) FROM shardq.jobs_history "
					  "WHERE task = 'up' AND status = 'completed'");
	ck_assert_msg(lines == up_done, "%ld runs of %lld completed `up` jobs: a job ran twice",
		      lines, up_done);
	long long attempts =
		testdb_sum(t, "SELECT count(*) FROM shardq.jobs_history WHERE attempt > 1");
	ck_assert_msg(attempts == 0, "%lld jobs needed a second attempt", attempts);
	free(text);
}

/* ---- the test ------------------------------------------------------------- */

START_TEST(the_previous_release_keeps_working_while_init_migrates)
{
	prev_release p;
	testdb t;
	acked a = {0};
	char ini[600], dini[600], runs[600], out[8192], hash[160], path[600];
	prev_load(&p);
	int meta_newest = sq_meta_migrations[sq_meta_migration_count - 1].version;
	ck_assert_msg(p.shard_schema < sq_shard_schema_newest() || p.meta_schema < meta_newest,
		      "the previous release (%.12s) has shard schema %d and meta schema %d, this "
		      "build %d and %d: it is not older",
		      p.commit, p.shard_schema, p.meta_schema, sq_shard_schema_newest(),
		      meta_newest);
	testdb_open(&t, "upgrade", 2, 64, types);
	test_write_bytes(testdb_path(ini, sizeof(ini), "up.ini"), t.ini, strlen(t.ini));
	init_as_prev(&t, &p, ini);
	printf("upgrade: the previous release %.12s made the cluster at shard schema %d, meta "
	       "schema %d\n",
	       p.commit, p.shard_schema, p.meta_schema);

	/* the old shardqd (producer and worker), old and new `shardq work` */
	test_hash_token(tok, hash, sizeof(hash));
	test_write_file(testdb_path(dini, sizeof(dini), "d.ini"), 0,
			"%s\n[daemon]\nlisten = 127.0.0.1:0\nthreads = 2\n\n[token t]\n%s\n"
			"scopes = producer, worker\n",
			t.ini, hash);
	D.bin = p.daemon;
	test_daemon_start(&D, dini, "shardqd-prev.out");
	testdb_path(runs, sizeof(runs), "runs");
	test_write_bytes(runs, "", 0);
	char exec[800];
	snprintf(exec, sizeof(exec), "echo \"$SHARDQ_JOB_ID $SHARDQ_WORKER\" >> %s", runs);
	test_worker_cmd wo = {ini, "up-old", "up:4", exec, "--poll 200ms", NULL, 0, 0, p.cli},
			wn = {ini, "up-new", "up:4", exec, "--poll 200ms", NULL, 0, 0, NULL};
	wo.out_path = testdb_path(path, sizeof(path), "worker-old.out");
	pid_t old_w = test_spawn_worker(&wo);
	char path2[600];
	wn.out_path = testdb_path(path2, sizeof(path2), "worker-new.out");
	pid_t new_w = test_spawn_worker(&wn);

	/* a producer of this build, and batches through the old shardqd */
	test_producer prod = {.t = &t,
			      .type = "up",
			      .prefix = "lib",
			      .keyed = 1,
			      .batch = 20,
			      .pause_us = 20000,
			      .max_jobs = 4000};
	test_producer_start(&prod);
	int seq = 0;
	for (int i = 0; i < 5; i++, seq += 10)
		post_jobs(&a, "up", "http", seq, 10);

	/* this build's init migrates under all of them */
	char init_out[600];
	testdb_path(init_out, sizeof(init_out), "init.out");
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "exec %s -c %s init > %s 2>&1", getenv("SHARDQ_CLI"), ini,
		 init_out);
	pid_t init = test_spawn(cmd, TEST_SPAWN_PDEATH);
	int rc, status;
	while ((rc = waitpid(init, &status, WNOHANG)) == 0) {
		post_jobs(&a, "up", "http", seq, 10);
		seq += 10;
	}
	ck_assert_int_eq(rc, init);
	rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	ck_assert_msg(rc == 0, "this build's init exited %d:\n%s", rc, test_file_text(init_out));
	for (int s = 0; s < t.nshards; s++)
		ck_assert_int_eq(shard_schema(&t, s), sq_shard_schema_newest());
	ck_assert_int_eq(
		testdb_scalar(&t, 0, "SELECT max(version) FROM shardq_meta.schema_version"),
		meta_newest);
	long old_before = runs_by(runs, "up-old");
	printf("upgrade: migrated to shard schema %d, meta schema %d while the workers ran (%ld "
	       "runs by the old worker)\n",
	       sq_shard_schema_newest(), meta_newest, old_before);

	/* a process of the previous release started now: it runs on one
	 * schema ahead only if it says so (SQ_SHARD_SCHEMA_AHEAD) */
	rc = test_cli_of(p.cli, NULL, out, sizeof(out), "-c %s stats", ini);
	if (p.ahead)
		ck_assert_msg(rc == 0, "the previous release's stats exited %d:\n%s", rc, out);
	else
		ck_assert_msg(rc != 0 && strstr(out, "upgrade shardq"),
			      "the previous release started on a newer schema (%d):\n%s", rc, out);

	/* a move with the new markers, the old programs routing around it */
	rc = test_cli(NULL, out, sizeof(out), "-c %s move --count 8 --from s1 --to s2", ini);
	ck_assert_msg(rc == 0, "move exited %d:\n%s", rc, out);
	for (int i = 0; i < 5; i++, seq += 10)
		post_jobs(&a, "up", "http", seq, 10);
	post_jobs(&a, "uh", "http-claimed", 0, 30);
	int claimed = 0;
	double since = test_now_s();
	while (claimed < 30) {
		int n = claim_complete_http();
		if (n)
			since = test_now_s();
		claimed += n;
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "the old shardqd claimed %d of 30 jobs and no more", claimed);
	}
	test_producer_stop(&prod);
	for (size_t i = 0; i < prod.nacked; i++)
		ack(&a, prod.acked[i]);

	/* drain, then count */
	long long left;
	drain_t = &t;
	ck_assert_msg(wait_progress(live_jobs, NULL, &left), "%lld jobs never ran:\n%s", left,
		      testdb_live_report(&t, out, sizeof(out)));
	long old_after = runs_by(runs, "up-old") - old_before;
	ck_assert_msg(old_after > 0, "the old worker ran no job after the migration:\n%s",
		      test_file_text(wo.out_path));
	ck_assert_msg(runs_by(runs, "up-new") > 0, "this build's worker ran no job");
	assert_all_completed_once(&t, &a, runs);
	printf("upgrade: %zu jobs acknowledged (%zu through the old shardqd), all completed "
	       "once; the old worker ran %ld after the migration\n",
	       a.n, a.n - prod.nacked, old_after);
	kill(old_w, SIGTERM);
	kill(new_w, SIGTERM);
	ck_assert_int_eq(test_wait_exit(old_w, testdb_stall_s()), 0);
	ck_assert_int_eq(test_wait_exit(new_w, testdb_stall_s()), 0);
	ck_assert_int_eq(test_daemon_stop(&D, SIGTERM), 0);
	test_check_cluster(&t);
	test_producer_free(&prod);
	free(a.ids);
	testdb_close(&t);
}
END_TEST

/* This build on its shard schema one ahead (the next release's init ran)
 * and two ahead: the first runs, the second is refused with what to do. */
START_TEST(a_schema_one_ahead_runs_two_ahead_is_refused)
{
	testdb t;
	sq_error err;
	sq_client *c;
	char sql[256], out[4096], ini[600];
	int want = sq_shard_schema_newest();
	testdb_open(&t, "ahead", 2, 16, types);
	test_write_bytes(testdb_path(ini, sizeof(ini), "a.ini"), t.ini, strlen(t.ini));
	for (int ahead = 1; ahead <= 2; ahead++) {
		snprintf(sql, sizeof(sql),
			 "INSERT INTO shardq.schema_version (version, name) VALUES (%d, 'next') "
			 "RETURNING 0",
			 want + ahead);
		for (int s = 0; s < t.nshards; s++)
			ck_assert_int_eq(testdb_scalar(&t, s, sql), 0);
		c = NULL;
		sq_status st = sq_client_open(t.cfg, 0, &c, &err);
		if (ahead == 1) {
			ck_assert_msg(st == SQ_OK, "schema %d refused: %s", want + 1, err.msg);
			int64_t id = enqueue_one(c, "up", NULL, "{}", NULL);
			ck_assert_msg(id > 0, "no enqueue on schema %d", want + 1);
			sq_job *jobs;
			ck_assert_uint_eq(claim_type(c, "w", "up", 5, &jobs), 1);
			sq_jobs_free(jobs, 1);
			sq_client_close(c);
			/* the mover alone needs its own version */
			int rc = test_cli(NULL, out, sizeof(out),
					  "-c %s move --count 1 --from s1 --to s2", ini);
			ck_assert_msg(rc != 0 && strstr(out, "newer than this shardq"),
				      "a move on a newer schema exited %d:\n%s", rc, out);
		} else {
			ck_assert_int_eq(st, SQ_ESTATE);
			snprintf(sql, sizeof(sql),
				 "schema version %d and this shardq runs on %d to %d", want + 2,
				 SQ_SHARD_SCHEMA_MIN, want + 1);
			ck_assert_msg(strstr(err.msg, sql), "refused with: %s", err.msg);
		}
	}
	for (int s = 0; s < t.nshards; s++)
		testdb_scalar(&t, s,
			      "DELETE FROM shardq.schema_version WHERE name = 'next' RETURNING 0");
	testdb_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("upgrade");
	ADD_CASE(s, the_previous_release_keeps_working_while_init_migrates, 3600);
	ADD_CASE(s, a_schema_one_ahead_runs_two_ahead_is_refused, 600);
	return run_suite(s);
}
