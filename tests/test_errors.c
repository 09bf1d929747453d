/* test_errors.c - bad input gets a clear error naming what was wrong, and
 * nothing of it is written: configs, unreachable shards, JSON, types,
 * sizes; and the same through the CLI. */
#include "support.h"

#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *types = "[type t]\n";

START_TEST(unreachable_shard_is_named)
{
	sq_config *cfg;
	sq_client *c;
	sq_error err;
	int ports[16];
	testdb_ports(ports, 16);
	char ini[512];
	snprintf(ini, sizeof(ini),
		 "[shard s1]\ndsn = host=127.0.0.1 port=%d dbname=postgres user=postgres\n"
		 "[shard s2]\ndsn = host=127.0.0.1 port=1 dbname=shardq user=postgres\n",
		 ports[0]);
	OKE(sq_config_parse(ini, "x.ini", &cfg, &err));
	ck_assert_int_eq(sq_client_open(cfg, 0, &c, &err), SQ_ECONN);
	ck_assert_ptr_nonnull(strstr(err.msg, "shard s2 (127.0.0.1:1)"));
	ck_assert_msg(strstr(err.msg, "onnection refused") != NULL, "%s", err.msg);
	ck_assert_ptr_null(strstr(err.msg, "shard s1"));
	sq_config_free(cfg);
}
END_TEST

START_TEST(not_initialised)
{
	sq_config *cfg;
	sq_client *c;
	sq_error err;
	int ports[16];
	testdb_ports(ports, 16);
	char ini[512];
	snprintf(ini, sizeof(ini),
		 "[shard s1]\ndsn = host=127.0.0.1 port=%d dbname=postgres user=postgres\n",
		 ports[0]);
	OKE(sq_config_parse(ini, "x.ini", &cfg, &err));
	sq_status st = sq_client_open(cfg, 0, &c, &err);
	ck_assert_msg(st == SQ_ESTATE || st == SQ_EDB, "got %s", sq_status_name(st));
	ck_assert_ptr_nonnull(strstr(err.msg, "shardq"));
	sq_config_free(cfg);
}
END_TEST

START_TEST(bad_jobs_write_nothing)
{
	testdb t;
	sq_error err;
	testdb_open(&t, "sqt_errors", 2, 256, types);
	enum { N = 100 };
	sq_job_spec js[N];
	sq_enqueue_result rs[N];
	char big_key[SQ_MAX_KEY_LEN + 2];
	memset(js, 0, sizeof(js));
	for (int i = 0; i < N; i++)
		js[i].type = "t", js[i].params = "{\"ok\":true}";

	/* invalid JSON in the 50th job: the whole batch is refused */
	js[49].params = "{\"a\": }";
	ck_assert_int_eq(sq_enqueue(t.client, js, N, rs, &err), SQ_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "job 50"));
	ck_assert_ptr_nonnull(strstr(err.msg, "not valid JSON"));
	ck_assert_int_eq(test_all_jobs(&t), 0);
	js[49].params = "[1,2]";
	ck_assert_int_eq(sq_enqueue(t.client, js, N, rs, &err), SQ_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "JSON object"));
	js[49].params = NULL;

	/* unknown type */
	js[10].type = "nosuch";
	ck_assert_int_eq(sq_enqueue(t.client, js, N, rs, &err), SQ_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "job 11: unknown task type 'nosuch'"));
	ck_assert_ptr_nonnull(strstr(err.msg, "configured types: t"));
	js[10].type = "t";

	/* oversize key */
	memset(big_key, 'k', sizeof(big_key) - 1);
	big_key[sizeof(big_key) - 1] = '\0';
	js[20].key = big_key;
	ck_assert_int_eq(sq_enqueue(t.client, js, N, rs, &err), SQ_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "job 21: key is 513 bytes"));
	js[20].key = NULL;

	/* oversize params */
	size_t big = SQ_MAX_PARAMS_LEN + 16;
	char *p = malloc(big + 1);
	memset(p, ' ', big);
	p[0] = '{', p[big - 1] = '}', p[big] = '\0';
	js[30].params = p;
	ck_assert_int_eq(sq_enqueue(t.client, js, N, rs, &err), SQ_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "job 31: params are"));
	free(p);
	js[30].params = NULL;
	ck_assert_int_eq(test_all_jobs(&t), 0);

	/* claims of unknown types and bad limits */
	sq_claim_req rq = {"nosuch", 5, 0};
	sq_job *jobs;
	size_t n;
	ck_assert_int_eq(sq_claim(t.client, "w", &rq, 1, &jobs, &n, &err), SQ_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "unknown task type 'nosuch'"));

	/* and then the good batch goes in whole */
	OKE(sq_enqueue(t.client, js, N, rs, &err));
	ck_assert_int_eq(test_all_jobs(&t), N);
	testdb_close(&t);
}
END_TEST

/* After an upgrade, a shard whose schema is older than this build is named,
 * with what to do. */
START_TEST(old_schema_asks_for_init)
{
	testdb t;
	sq_error err;
	sq_client *c;
	int created;
	testdb_open(&t, "sqt_errors_schema", 2, 64, types);
	testdb_scalar(&t, 1,
		      "CREATE TABLE public.saved_versions AS SELECT * FROM shardq.schema_version "
		      "WHERE version > 1; SELECT 1");
	testdb_scalar(&t, 1,
		      "WITH d AS (DELETE FROM shardq.schema_version WHERE version > 1 "
		      "RETURNING 1) SELECT count(*) FROM d");
	ck_assert_int_eq(sq_client_open(t.cfg, 0, &c, &err), SQ_ESTATE);
	ck_assert_ptr_nonnull(strstr(err.msg, "shard s2"));
	ck_assert_ptr_nonnull(strstr(err.msg, "run 'shardq init'"));
	/* init brings it up to date (a migration is applied only where its
	 * version is missing: here what they made exists, so put them back) */
	testdb_scalar(&t, 1,
		      "WITH d AS (INSERT INTO shardq.schema_version SELECT * FROM "
		      "public.saved_versions RETURNING 1) SELECT count(*) FROM d");
	OKE(sq_init(t.client, &created, &err));
	OKE(sq_client_open(t.cfg, 0, &c, &err));
	sq_client_close(c);
	testdb_close(&t);
}
END_TEST

START_TEST(database_of_another_shard_refused)
{
	testdb t;
	sq_error err;
	testdb_open(&t, "sqt_errors2", 2, 64, types);
	/* swap the two dsns: each database belongs to the other shard id */
	char *ini = strdup(t.ini);
	char *a = strstr(ini, "[shard s1]"), *b = strstr(ini, "[shard s2]");
	a[8] = '2', b[8] = '1';
	sq_config *cfg;
	sq_client *c;
	int created;
	OKE(sq_config_parse(ini, "swapped.ini", &cfg, &err));
	OKE(sq_client_open(cfg, 1, &c, &err));
	ck_assert_int_eq(sq_init(c, &created, &err), SQ_ESTATE);
	ck_assert_ptr_nonnull(strstr(err.msg, "already belongs to shard"));
	sq_client_close(c);
	sq_config_free(cfg);
	free(ini);
	testdb_close(&t);
}
END_TEST

START_TEST(cli_errors)
{
	testdb t;
	char out[16384], path[600], jobs[600];
	testdb_open(&t, "sqt_errors_cli", 2, 64, types);
	testdb_path(path, sizeof(path), "errors.ini");
	testdb_path(jobs, sizeof(jobs), "errors.jsonl");

	/* the version, without a config */
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "--version"), 0);
	ck_assert_msg(!strncmp(out, "shardq ", 7) && out[7] >= '0' && out[7] <= '9', "%s", out);

	/* a malformed config: every bad key with its line, exit 3 */
	test_write_file(
		path, 0, "%s",
		"[cluster]\npartitions = 3\n[shard s1]\nweight = x\n[type t]\nretries = 2\n");
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s stats", path), 3);
	ck_assert_ptr_nonnull(strstr(out, ":2: [cluster] partitions"));
	ck_assert_ptr_nonnull(strstr(out, ":4: [shard s1] weight"));
	ck_assert_ptr_nonnull(strstr(out, ":6: [type t] retries: unknown key"));
	ck_assert_ptr_nonnull(strstr(out, ":3: [shard s1] dsn: missing"));

	/* a good config; a job file with a bad third line writes nothing */
	test_write_file(path, 0, "%s", t.ini);
	test_write_file(jobs, 0, "%s",
			"{\"type\":\"t\",\"key\":\"a\"}\n{\"type\":\"t\",\"key\":\"b\"}\n"
			"{\"type\":\"t\",\"params\":{\"x\":}\n{\"type\":\"t\"}\n");
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s enqueue --file %s", path, jobs),
			 5);
	ck_assert_ptr_nonnull(strstr(out, ":3: invalid JSON"));
	ck_assert_ptr_nonnull(strstr(out, "nothing was enqueued"));
	ck_assert_int_eq(test_all_jobs(&t), 0);
	test_write_file(jobs, 0, "%s", "{\"type\":\"t\",\"key\":\"a\"}\n{\"type\":\"nosuch\"}\n");
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s enqueue --file %s", path, jobs),
			 5);
	ck_assert_ptr_nonnull(strstr(out, ":2: unknown task type 'nosuch'"));
	ck_assert_int_eq(test_all_jobs(&t), 0);
	ck_assert_int_eq(
		testdb_run_cli(out, sizeof(out), "-c %s enqueue --type t --params '{x'", path), 5);
	ck_assert_ptr_nonnull(strstr(out, "not valid JSON"));
	ck_assert_int_eq(test_all_jobs(&t), 0);

	/* the whole path through the CLI: enqueue, claim, start, complete */
	test_write_file(jobs, 0, "%s",
			"{\"type\":\"t\",\"key\":\"a\",\"params\":{\"n\":1}}\n"
			"{\"type\":\"t\",\"key\":\"b\"}\n{\"type\":\"t\",\"key\":\"a\"}\n");
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s enqueue --file %s", path, jobs),
			 0);
	ck_assert_ptr_nonnull(strstr(out, "\"outcome\":\"duplicate\""));
	ck_assert_int_eq(test_all_jobs(&t), 2);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out),
					"-c %s claim --types t:10 --worker cli > %s.claimed && "
					"%s -c %s start --worker cli - < %s.claimed && "
					"%s -c %s complete --worker cli - < %s.claimed",
					path, jobs, getenv("SHARDQ_CLI"), path, jobs,
					getenv("SHARDQ_CLI"), path, jobs),
			 0);
	ck_assert_int_eq(test_all_jobs(&t), 0);
	/* completing again: lost, exit 6 */
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out),
					"-c %s complete --worker cli - < %s.claimed", path, jobs),
			 6);
	ck_assert_ptr_nonnull(strstr(out, " lost"));

	/* every command has --help; bad usage is exit 2 */
	const char *cmds[] = {"init",     "enqueue", "claim",   "start",  "heartbeat",
			      "complete", "fail",    "release", "cancel", "get",
			      "stats",    "map",     "demo"};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "%s --help", cmds[i]), 0);
		ck_assert_ptr_nonnull(strstr(out, "usage: shardq"));
	}
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s claim --types t --worker w", path),
			 2);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "frobnicate"), 2);
	unlink(path);
	unlink(jobs);
	snprintf(out, sizeof(out), "%s.claimed", jobs);
	unlink(out);
	testdb_close(&t);
}
END_TEST

/* Writes the cluster's config with shard i+1 (or every shard: -1) at a
 * port where nothing listens, as down.ini; its path in path. */
static void down_ini(testdb *t, char *path, size_t len, int which)
{
	char *ini = strdup(t->ini), port[32];
	for (int i = 0; i < t->nshards; i++) {
		if (which >= 0 && i != which)
			continue;
		snprintf(port, sizeof(port), "port=%d ", t->ports[i]);
		char *at = strstr(ini, port);
		ck_assert_ptr_nonnull(at);
		memmove(at + 7, at + strlen(port), strlen(at + strlen(port)) + 1);
		memcpy(at, "port=1 ", 7);
	}
	testdb_path(path, len, which < 0 ? "all-down.ini" : "down.ini");
	test_write_file(path, 0, "%s", ini);
	free(ini);
}

/* `shardq stats` with a shard whose database refuses connections: the down
 * shard is named, the other one's jobs are still counted, exit 4. */
START_TEST(stats_with_a_shard_down)
{
	testdb t;
	char out[16384], path[600];
	testdb_open(&t, "sqt_errors_down", 2, 64, types);
	for (int i = 0; i < 40; i++)
		enqueue_one(t.client, "t", NULL, NULL, NULL);
	long long on_s1 = testdb_scalar(&t, 0, "SELECT count(*) FROM shardq.jobs");
	ck_assert_int_gt(on_s1, 0);
	down_ini(&t, path, sizeof(path), 1);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s stats", path), 4);
	ck_assert_msg(strstr(out, "shard s2 (127.0.0.1:1)") != NULL, "%s", out);
	char want[64];
	snprintf(want, sizeof(want), "s1       t                %9lld", on_s1);
	ck_assert_msg(strstr(out, want) != NULL, "no '%s' in:\n%s", want, out);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s stats --json", path), 4);
	ck_assert_msg(strstr(out, "{\"shard\":\"s2\",\"partitions_owned\":0,"
				  "\"partitions_moving\":0,\"error\":\"") != NULL,
		      "%s", out);
	testdb_close(&t);
}
END_TEST

/* With one shard down, the commands still work for the jobs on the other:
 * get, cancel and a worker (which runs them); a job on the down shard gets
 * exit 4 naming it, and an enqueue reports which jobs were not written.
 * With every shard down, the error names each one. */
START_TEST(commands_with_a_shard_down)
{
	enum { N = 40 };
	testdb t;
	char out[16384], path[600], all[600];
	testdb_open(&t, "sqt_errors_down2", 2, 64, "[type t]\nhistory = true\n");
	sq_job_spec js[N];
	sq_enqueue_result rs[N];
	sq_error err;
	char keys[N][16];
	memset(js, 0, sizeof(js));
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "j%d", i);
		js[i].type = "t";
		js[i].key = keys[i]; /* keyed: spread over both shards */
	}
	OKE(sq_enqueue(t.client, js, N, rs, &err));
	int64_t on_s1 = -1, on_s2 = -1, cancel_s1 = -1;
	for (int i = 0; i < N; i++) {
		if (rs[i].shard == 0 && on_s1 < 0)
			on_s1 = rs[i].id;
		else if (rs[i].shard == 0 && cancel_s1 < 0)
			cancel_s1 = rs[i].id;
		else if (rs[i].shard == 1 && on_s2 < 0)
			on_s2 = rs[i].id;
	}
	ck_assert_msg(on_s1 > 0 && cancel_s1 > 0 && on_s2 > 0, "%d jobs did not reach both shards",
		      N);
	down_ini(&t, path, sizeof(path), 1);
	down_ini(&t, all, sizeof(all), -1);

	int rc = testdb_run_cli(out, sizeof(out), "-c %s get %lld", path, (long long)on_s1);
	ck_assert_msg(rc == 0 && strstr(out, "\"status\":\"ready\""), "get on s1: exit %d:\n%s", rc,
		      out);
	rc = testdb_run_cli(out, sizeof(out), "-c %s get %lld", path, (long long)on_s2);
	ck_assert_msg(rc == 4 && strstr(out, "shard s2 (127.0.0.1:1)"), "get on s2: exit %d:\n%s",
		      rc, out);
	rc = testdb_run_cli(out, sizeof(out), "-c %s cancel %lld", path, (long long)cancel_s1);
	ck_assert_msg(rc == 0, "cancel on s1: exit %d:\n%s", rc, out);
	/* keyed jobs: each goes to its partition's shard */
	long long written = 0, refused = 0;
	for (int k = 1; k <= 8; k++) {
		rc = testdb_run_cli(out, sizeof(out), "-c %s enqueue --type t --key key%d", path,
				    k);
		if (rc == 0 && strstr(out, "\"outcome\":\"inserted\""))
			written++;
		else {
			ck_assert_msg(rc == 4 && strstr(out, "not_written") &&
					      strstr(out, "shard s2 (127.0.0.1:1)"),
				      "enqueue key%d: exit %d:\n%s", k, rc, out);
			refused++;
		}
	}
	ck_assert_msg(written > 0 && refused > 0, "8 keys: %lld written, %lld refused", written,
		      refused);
	ck_assert_int_eq(
		testdb_scalar(&t, 0,
			      "SELECT count(*) FROM shardq.jobs WHERE active_uid LIKE 'key%'"),
		written);

	/* a worker runs what is on s1, all of it, with s2 down */
	long long s1_live = testdb_scalar(&t, 0,
					  "SELECT count(*) FROM shardq.jobs WHERE "
					  "status = 'ready'");
	char wout[700], cmd[2048];
	testdb_path(wout, sizeof(wout), "work.out");
	snprintf(cmd, sizeof(cmd),
		 "exec %s -c %s work --worker wd --types t:4 --exec true --poll 100ms > %s 2>&1",
		 getenv("SHARDQ_CLI"), path, wout);
	pid_t w = fork();
	ck_assert_int_ge(w, 0);
	if (w == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	double since = test_now_s();
	long long left = s1_live, was = -1;
	while ((left = testdb_scalar(&t, 0,
				     "SELECT count(*) FROM shardq.jobs WHERE status IN "
				     "('ready', 'starting', 'running')")) > 0) {
		int st;
		if (left != was)
			was = left, since = test_now_s();
		if (waitpid(w, &st, WNOHANG) == w || test_now_s() - since > testdb_stall_s()) {
			kill(w, SIGKILL);
			waitpid(w, NULL, 0);
			FILE *f = fopen(wout, "r");
			size_t n = f ? fread(out, 1, sizeof(out) - 1, f) : 0;
			out[n] = '\0';
			if (f)
				fclose(f);
			ck_assert_msg(0,
				      "the worker with s2 down left %lld of %lld jobs of s1 undone "
				      "(stalled %.0fs, or exited); its output:\n%s",
				      left, s1_live, test_now_s() - since, out);
		}
		usleep(50000);
	}
	kill(w, SIGTERM);
	int st;
	waitpid(w, &st, 0);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the worker's exit: %d", st);
	ck_assert_int_eq(testdb_scalar(&t, 0,
				       "SELECT count(*) FROM shardq.jobs_history WHERE "
				       "status = 'completed' AND worker = 'wd'"),
			 s1_live);
	/* s2's jobs are untouched */
	ck_assert_int_eq(testdb_scalar(&t, 1,
				       "SELECT count(*) FROM shardq.jobs WHERE status <> "
				       "'ready'"),
			 0);

	/* a (dry run of a) move to the down shard: refused, naming it; a move
	 * needs both of its shards and the meta database */
	rc = testdb_run_cli(out, sizeof(out), "-c %s move --count 1 --from s1 --to s2 --dry-run",
			    path);
	ck_assert_msg(rc == 4 && strstr(out, "shard s2 (127.0.0.1:1)"),
		      "dry run to a down shard: exit %d:\n%s", rc, out);

	/* no shard at all: each is named */
	rc = testdb_run_cli(out, sizeof(out), "-c %s get %lld", all, (long long)on_s1);
	ck_assert_msg(rc == 4 && strstr(out, "no shard can be reached") &&
			      strstr(out, "shard s1 (127.0.0.1:1)") &&
			      strstr(out, "shard s2 (127.0.0.1:1)"),
		      "every shard down: exit %d:\n%s", rc, out);
	testdb_close(&t);
}
END_TEST

/* More ready jobs of a type on a shard than stats counts exactly (10,000):
 * the row shows PostgreSQL's estimate with ~, and so does the total. */
START_TEST(stats_marks_estimates_in_the_total)
{
	enum { N = 24000, B = 1000 };
	testdb t;
	char out[16384], path[600];
	testdb_open(&t, "sqt_errors_est", 2, 64, types);
	static sq_job_spec js[B];
	static sq_enqueue_result rs[B];
	sq_error err;
	memset(js, 0, sizeof(js));
	for (int i = 0; i < B; i++)
		js[i].type = "t";
	for (int i = 0; i < N; i += B)
		OKE(sq_enqueue(t.client, js, B, rs, &err));
	for (int s = 0; s < t.nshards; s++)
		ck_assert_int_gt(testdb_scalar(&t, s, "SELECT count(*) FROM shardq.jobs"), 10000);
	testdb_path(path, sizeof(path), "est.ini");
	test_write_file(path, 0, "%s", t.ini);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s stats", path), 0);
	char *total = strstr(out, "\ntotal ");
	ck_assert_msg(strstr(out, " ~") && total, "%s", out);
	ck_assert_msg(strchr(total, '~') && strchr(total, '~') < strchr(total + 1, '\n'),
		      "the total's READY is not marked as an estimate:\n%s", out);
	testdb_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("errors");
	TCase *tc = tcase_create("errors");
	tcase_set_timeout(tc, 3600);
	ADD_TEST(tc, unreachable_shard_is_named);
	ADD_TEST(tc, not_initialised);
	ADD_TEST(tc, bad_jobs_write_nothing);
	ADD_TEST(tc, old_schema_asks_for_init);
	ADD_TEST(tc, database_of_another_shard_refused);
	ADD_TEST(tc, cli_errors);
	ADD_TEST(tc, stats_with_a_shard_down);
	ADD_TEST(tc, commands_with_a_shard_down);
	ADD_TEST(tc, stats_marks_estimates_in_the_total);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
