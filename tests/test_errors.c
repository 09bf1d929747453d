/* test_errors.c - bad input gets a clear error naming what was wrong, and
 * nothing of it is written: configs, unreachable shards, JSON, types,
 * sizes; and the same through the CLI. */
#include "test_common.h"

#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *types = "[type t]\n";

static long long jobs_now(testdb *t)
{
	return testdb_sum(t, "SELECT count(*) FROM shardq.jobs");
}

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
	ck_assert_int_eq(jobs_now(&t), 0);
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
	ck_assert_int_eq(jobs_now(&t), 0);

	/* claims of unknown types and bad limits */
	sq_claim_req rq = {"nosuch", 5, 0};
	sq_job *jobs;
	size_t n;
	ck_assert_int_eq(sq_claim(t.client, "w", &rq, 1, &jobs, &n, &err), SQ_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "unknown task type 'nosuch'"));

	/* and then the good batch goes in whole */
	OKE(sq_enqueue(t.client, js, N, rs, &err));
	ck_assert_int_eq(jobs_now(&t), N);
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

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
}

START_TEST(cli_errors)
{
	testdb t;
	char out[16384], path[600], jobs[600];
	testdb_open(&t, "sqt_errors_cli", 2, 64, types);
	testdb_path(path, sizeof(path), "errors.ini");
	testdb_path(jobs, sizeof(jobs), "errors.jsonl");

	/* a malformed config: every bad key with its line, exit 3 */
	write_file(path,
		   "[cluster]\npartitions = 3\n[shard s1]\nweight = x\n[type t]\nretries = 2\n");
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s stats", path), 3);
	ck_assert_ptr_nonnull(strstr(out, ":2: [cluster] partitions"));
	ck_assert_ptr_nonnull(strstr(out, ":4: [shard s1] weight"));
	ck_assert_ptr_nonnull(strstr(out, ":6: [type t] retries: unknown key"));
	ck_assert_ptr_nonnull(strstr(out, ":3: [shard s1] dsn: missing"));

	/* a good config; a job file with a bad third line writes nothing */
	write_file(path, t.ini);
	write_file(jobs, "{\"type\":\"t\",\"key\":\"a\"}\n{\"type\":\"t\",\"key\":\"b\"}\n"
			 "{\"type\":\"t\",\"params\":{\"x\":}\n{\"type\":\"t\"}\n");
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s enqueue --file %s", path, jobs),
			 5);
	ck_assert_ptr_nonnull(strstr(out, ":3: invalid JSON"));
	ck_assert_ptr_nonnull(strstr(out, "nothing was enqueued"));
	ck_assert_int_eq(jobs_now(&t), 0);
	write_file(jobs, "{\"type\":\"t\",\"key\":\"a\"}\n{\"type\":\"nosuch\"}\n");
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s enqueue --file %s", path, jobs),
			 5);
	ck_assert_ptr_nonnull(strstr(out, ":2: unknown task type 'nosuch'"));
	ck_assert_int_eq(jobs_now(&t), 0);
	ck_assert_int_eq(
		testdb_run_cli(out, sizeof(out), "-c %s enqueue --type t --params '{x'", path), 5);
	ck_assert_ptr_nonnull(strstr(out, "not valid JSON"));
	ck_assert_int_eq(jobs_now(&t), 0);

	/* the whole path through the CLI: enqueue, claim, start, complete */
	write_file(jobs, "{\"type\":\"t\",\"key\":\"a\",\"params\":{\"n\":1}}\n"
			 "{\"type\":\"t\",\"key\":\"b\"}\n{\"type\":\"t\",\"key\":\"a\"}\n");
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s enqueue --file %s", path, jobs),
			 0);
	ck_assert_ptr_nonnull(strstr(out, "\"outcome\":\"duplicate\""));
	ck_assert_int_eq(jobs_now(&t), 2);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out),
					"-c %s claim --types t:10 --worker cli > %s.claimed && "
					"%s -c %s start --worker cli - < %s.claimed && "
					"%s -c %s complete --worker cli - < %s.claimed",
					path, jobs, getenv("SHARDQ_CLI"), path, jobs,
					getenv("SHARDQ_CLI"), path, jobs),
			 0);
	ck_assert_int_eq(jobs_now(&t), 0);
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

/* `shardq stats` with a shard whose database refuses connections: the down
 * shard is named, the other one's jobs are still counted, exit 4. */
START_TEST(stats_with_a_shard_down)
{
	testdb t;
	char out[16384], path[600], port[32], *ini;
	testdb_open(&t, "sqt_errors_down", 2, 64, types);
	for (int i = 0; i < 40; i++)
		enqueue_one(t.client, "t", NULL, NULL, NULL);
	long long on_s1 = testdb_scalar(&t, 0, "SELECT count(*) FROM shardq.jobs");
	ck_assert_int_gt(on_s1, 0);
	/* the same cluster, with s2 at a port where nothing listens */
	ini = strdup(t.ini);
	snprintf(port, sizeof(port), "port=%d ", t.ports[1]);
	char *at = strstr(ini, port);
	ck_assert_ptr_nonnull(at);
	memmove(at + 7, at + strlen(port), strlen(at + strlen(port)) + 1);
	memcpy(at, "port=1 ", 7);
	testdb_path(path, sizeof(path), "down.ini");
	write_file(path, ini);
	free(ini);
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

int main(void)
{
	Suite *s = suite_create("errors");
	TCase *tc = tcase_create("errors");
	tcase_set_timeout(tc, 3600);
	tcase_add_test(tc, unreachable_shard_is_named);
	tcase_add_test(tc, not_initialised);
	tcase_add_test(tc, bad_jobs_write_nothing);
	tcase_add_test(tc, old_schema_asks_for_init);
	tcase_add_test(tc, database_of_another_shard_refused);
	tcase_add_test(tc, cli_errors);
	tcase_add_test(tc, stats_with_a_shard_down);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
