/* test_admin.c - an operator's actions on the fleet: a task type paused and resumed with `shardq pause` and over HTTP, while `shardq work` workers and shardqd claim. */
/*
 * What a user counts on: once paused (and the map poll that carries it is
 * past), no worker and no shardqd claims the type, its jobs are still
 * enqueued and wait, the other types go on, and the jobs already claimed
 * run to their end; once resumed, the waiting jobs run, each once.
 */
#define _GNU_SOURCE
#include "support.h"

#include <jansson.h>
#include <signal.h>

static const char tok_admin[] = "admin-token-0123456789abcdef";
static const char tok_worker[] = "worker-token-0123456789abcdef";

/* map_poll and the workers' poll short, so that the bound the docs give
 * (map_poll, plus a tick to read its answer) is short too */
static const char types[] = "[connection]\nmap_poll = 200ms\n"
			    "[type a]\nhistory = true\n[type b]\nhistory = true\n";

static testdb t;
static test_daemon D;

/* One request to shardqd; its JSON (NULL unless 200), the status in *st. */
static json_t *call(const char *method, const char *path, const char *token, const char *body,
		    int *st)
{
	hresp r = {0};
	int fd = hc_connect(D.port);
	int got = hc_send(fd, method, path, token, body) == 0 && hc_recv(fd, &r) == 0;
	close(fd);
	*st = got ? r.status : 0;
	json_t *j = got && r.status == 200 ? json_loads(r.body, 0, NULL) : NULL;
	free(r.body);
	return j;
}

static long long count(const char *where)
{
	char sql[256];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs WHERE %s", where);
	return testdb_sum(&t, sql);
}

static long long done(const char *type)
{
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs_history WHERE task = '%s' AND status = "
		 "'completed'",
		 type);
	return testdb_sum(&t, sql);
}

static long long want_b;
static long long b_left(void *arg)
{
	(void)arg;
	long long n = want_b - done("b");
	return n > 0 ? n : 0;
}
static long long want_a;
static long long a_left(void *arg)
{
	(void)arg;
	long long n = want_a - done("a");
	return n > 0 ? n : 0;
}

/* Waits the documented bound for a pause to reach every client: map_poll
 * (200 ms here), a tick of the workers (200 ms) to read its answer, and
 * shardqd's claimer's next claim, five times over. */
static void past_the_map_poll(void)
{
	usleep(5 * 600 * 1000);
}

START_TEST(a_paused_type_is_claimed_by_no_worker_and_no_shardqd)
{
	char ini[600], dini[600], runs[600], out[600], exec[800], hash_a[160], hash_w[160];
	char msg[4096];
	int st;
	testdb_open(&t, "admin_pause", 2, 64, types);
	test_write_bytes(testdb_path(ini, sizeof(ini), "c.ini"), t.ini, strlen(t.ini));
	test_hash_token(tok_admin, hash_a, sizeof(hash_a));
	test_hash_token(tok_worker, hash_w, sizeof(hash_w));
	test_write_file(testdb_path(dini, sizeof(dini), "d.ini"), 0,
			"%s\n[daemon]\nlisten = 127.0.0.1:0\n\n[token ops]\n%s\nscopes = admin\n\n"
			"[token fleet]\n%s\nscopes = worker\n",
			t.ini, hash_a, hash_w);
	test_daemon_start(&D, dini, "shardqd.out");
	testdb_path(runs, sizeof(runs), "runs");
	test_write_bytes(runs, "", 0);
	snprintf(exec, sizeof(exec), "echo \"$SHARDQ_JOB_ID\" >> %s", runs);
	test_worker_cmd w = {ini, "pw", "a:4,b:4", exec, "--poll 200ms", NULL, 0, 0, NULL};
	w.out_path = testdb_path(out, sizeof(out), "worker.out");
	pid_t wp = test_spawn_worker(&w);

	/* pause a with the CLI: the workers' claims leave it out */
	int rc = test_cli(NULL, msg, sizeof(msg), "-c %s pause a", ini);
	ck_assert_msg(rc == 0, "shardq pause exited %d:\n%s", rc, msg);
	rc = test_cli(NULL, msg, sizeof(msg), "-c %s stats", ini);
	ck_assert_msg(rc == 0 && strstr(msg, "paused (shardq resume TYPE): a"),
		      "shardq stats does not list a as paused:\n%s", msg);
	past_the_map_poll();
	test_enqueue_n(t.client, "a", 30, NULL); /* still enqueued */
	test_enqueue_n(t.client, "b", 30, NULL);
	long long left;
	want_b = 30;
	ck_assert_msg(wait_progress(b_left, NULL, &left), "%lld b jobs never ran", left);
	/* b ran while a waited: claims had the chance and left a out, also
	 * shardqd's, asked for both */
	json_t *j = call("POST", "/v1/claim", tok_worker,
			 "{\"worker\":\"h\",\"types\":[{\"type\":\"a\",\"limit\":10}]}", &st);
	ck_assert_msg(j != NULL, "the claim answered %d", st);
	ck_assert_int_eq((int)json_array_size(json_object_get(j, "jobs")), 0);
	json_decref(j);
	ck_assert_int_eq(count("task = 'a' AND status = 'ready'"), 30);
	ck_assert_int_eq(done("a"), 0);
	/* shown paused: GET /v1/types and /metrics */
	j = call("GET", "/v1/types", tok_admin, NULL, &st);
	ck_assert_msg(j != NULL, "GET /v1/types answered %d", st);
	ck_assert(json_is_true(
		json_object_get(json_array_get(json_object_get(j, "types"), 0), "paused")));
	ck_assert(json_is_false(
		json_object_get(json_array_get(json_object_get(j, "types"), 1), "paused")));
	json_decref(j);
	hresp r = {0};
	int fd = hc_connect(D.port);
	ck_assert_int_eq(hc_send(fd, "GET", "/metrics", tok_admin, NULL), 0);
	ck_assert_int_eq(hc_recv(fd, &r), 0);
	close(fd);
	ck_assert_msg(strstr(r.body, "shardq_type_paused{type=\"a\"} 1") &&
			      strstr(r.body, "shardq_type_paused{type=\"b\"} 0"),
		      "/metrics does not show a paused:\n%.2000s", r.body);
	free(r.body);

	/* resume over HTTP (admin only): the waiting jobs run, each once */
	j = call("POST", "/v1/types/resume", tok_worker, "{\"type\":\"a\"}", &st);
	ck_assert_int_eq(st, 403);
	j = call("POST", "/v1/types/resume", tok_admin, "{\"type\":\"nope\"}", &st);
	ck_assert_int_eq(st, 400);
	j = call("POST", "/v1/types/resume", tok_admin, "{\"type\":\"a\"}", &st);
	ck_assert_msg(j != NULL, "resume answered %d", st);
	json_decref(j);
	want_a = 30;
	ck_assert_msg(wait_progress(a_left, NULL, &left), "%lld a jobs never ran after the resume",
		      left);

	/* pause again, over HTTP */
	j = call("POST", "/v1/types/pause", tok_admin, "{\"type\":\"a\"}", &st);
	ck_assert_msg(j != NULL, "pause answered %d", st);
	json_decref(j);
	ck_assert_msg(strstr(test_file_text(D.out), "type a paused by token 'ops'") != NULL,
		      "shardqd did not log who paused a:\n%s", test_file_text(D.out));
	past_the_map_poll();
	test_enqueue_n(t.client, "a", 10, NULL);
	test_enqueue_n(t.client, "b", 10, NULL);
	want_b = 40;
	ck_assert_msg(wait_progress(b_left, NULL, &left), "%lld b jobs never ran", left);
	ck_assert_int_eq(count("task = 'a' AND status = 'ready'"), 10);
	ck_assert_int_eq(done("a"), 30);
	rc = test_cli(NULL, msg, sizeof(msg), "-c %s resume a", ini);
	ck_assert_msg(rc == 0, "shardq resume exited %d:\n%s", rc, msg);
	want_a = 40;
	ck_assert_msg(wait_progress(a_left, NULL, &left), "%lld a jobs never ran after the resume",
		      left);
	/* none ran twice: 80 runs, 80 ids */
	char *text = test_read_file(runs);
	long lines = 0;
	for (char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		lines++;
	free(text);
	ck_assert_int_eq(lines, 80);
	kill(wp, SIGTERM);
	ck_assert_int_eq(test_wait_exit(wp, testdb_stall_s()), 0);
	ck_assert_int_eq(test_daemon_stop(&D, SIGTERM), 0);
	testdb_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("admin");
	ADD_CASE(s, a_paused_type_is_claimed_by_no_worker_and_no_shardqd, 3600);
	return run_suite(s);
}
