/* test_admin.c - an operator's actions on the fleet: a task type paused and resumed with `shardq pause` and over HTTP, while `shardq work` workers and shardqd claim. */
/*
 * What a user counts on: once paused (and the map poll that carries it is
 * past), no worker and no shardqd claims the type, its jobs are still
 * enqueued and wait, the other types go on, and the jobs already claimed
 * run to their end; once resumed, the waiting jobs run, each once.
 */
#define _GNU_SOURCE
#include "support.h"

#include "sql_queries.h"

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

/* shardqd on t's cluster, with an admin token (named ops) and a worker
 * token (fleet). */
static void daemon_start(void)
{
	char dini[600], hash_a[160], hash_w[160];
	test_hash_token(tok_admin, hash_a, sizeof(hash_a));
	test_hash_token(tok_worker, hash_w, sizeof(hash_w));
	test_write_file(testdb_path(dini, sizeof(dini), "d.ini"), 0,
			"%s\n[daemon]\nlisten = 127.0.0.1:0\n\n[token ops]\n%s\nscopes = admin\n\n"
			"[token fleet]\n%s\nscopes = worker\n",
			t.ini, hash_a, hash_w);
	test_daemon_start(&D, dini, "shardqd.out");
}

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
	char ini[600], runs[600], out[600], exec[800];
	char msg[4096];
	int st;
	testdb_open(&t, "admin_pause", 2, 64, types);
	test_write_bytes(testdb_path(ini, sizeof(ini), "c.ini"), t.ini, strlen(t.ini));
	daemon_start();
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

/* Claims up to n jobs of type and fails each for good (max_attempts 1);
 * their ids into ids. */
static size_t fail_all(sq_client *c, const char *type, size_t n, int64_t *ids)
{
	size_t got = 0;
	sq_error err;
	while (got < n) {
		sq_job *js;
		size_t k = claim_type(c, "fw", type, n - got > 1000 ? 1000 : (int)(n - got), &js);
		if (!k)
			break;
		sq_fail_req *fr = calloc(k, sizeof(*fr));
		sq_status *out = calloc(k, sizeof(*out));
		for (size_t i = 0; i < k; i++) {
			fr[i].ref.id = js[i].id, fr[i].ref.attempt = js[i].attempt;
			fr[i].error = "downstream said no";
			fr[i].permanent = 1;
			ids[got + i] = js[i].id;
		}
		OKE(sq_fail(c, "fw", fr, k, out, &err));
		for (size_t i = 0; i < k; i++)
			ck_assert_int_eq(out[i], SQ_OK);
		free(fr);
		free(out);
		sq_jobs_free(js, k);
		got += k;
	}
	return got;
}

static int status_of(int64_t id)
{
	sq_job j = test_get_job(t.client, id);
	int st = j.status;
	sq_job_clear(&j);
	return st;
}

START_TEST(failed_jobs_are_retried_by_id_by_type_and_over_http)
{
	enum { BULK = 2500 };
	char ini[600], msg[8192];
	static int64_t ids[BULK];
	int st;
	sq_error err;
	testdb_open(&t, "admin_retry", 2, 64,
		    "[type f]\nmax_attempts = 1\n[type g]\nmax_attempts = 1\n");
	test_write_bytes(testdb_path(ini, sizeof(ini), "c.ini"), t.ini, strlen(t.ini));

	/* three failed jobs, one of whose key a live job took since; one
	 * running under a worker's lease; one ready */
	int64_t f1 = enqueue_one(t.client, "f", "k1", NULL, NULL),
		f2 = enqueue_one(t.client, "f", "k2", NULL, NULL),
		f3 = enqueue_one(t.client, "f", "k3", NULL, NULL);
	int64_t failed[3];
	ck_assert_uint_eq(fail_all(t.client, "f", 3, failed), 3);
	int64_t taken = enqueue_one(t.client, "f", "k3", NULL, NULL); /* k3 is live again */
	sq_job *js;
	ck_assert_uint_eq(claim_type(t.client, "w9", "f", 1, &js), 1);
	ck_assert_int_eq(js[0].id, taken);
	sq_job_ref held = {js[0].id, js[0].attempt};
	sq_jobs_free(js, 1);
	sq_status out1[1];
	OKE(sq_start(t.client, "w9", &held, 1, out1, &err));
	int64_t ready = enqueue_one(t.client, "f", NULL, NULL, NULL);

	int rc = test_cli(NULL, msg, sizeof(msg), "-c %s retry %lld %lld %lld %lld %lld 77", ini,
			  (long long)f1, (long long)f2, (long long)f3, (long long)taken,
			  (long long)ready);
	ck_assert_msg(rc == 7, "shardq retry exited %d (7: some not made ready):\n%s", rc, msg);
	char want[1024];
#define NA "not allowed (not failed, or a live job holds its key)"
#define NF "not found (finished, or never existed)"
	snprintf(want, sizeof(want),
		 "%lld ready\n%lld ready\n%lld " NA "\n%lld " NA "\n%lld " NA "\n77 " NF "\n",
		 (long long)f1, (long long)f2, (long long)f3, (long long)taken, (long long)ready);
	ck_assert_str_eq(msg, want);
	ck_assert_int_eq(status_of(f1), SQ_READY);
	ck_assert_int_eq(status_of(f3), SQ_FAILED);
	ck_assert_int_eq(status_of(taken), SQ_RUNNING);
	ck_assert_int_eq(count("last_error = 'downstream said no' AND status = 'ready'"), 2);
	/* the worker that holds it goes on as if nothing happened */
	OKE(sq_complete(t.client, "w9", &held, 1, out1, &err));
	ck_assert_int_eq(out1[0], SQ_OK);
	/* a retried job runs again with a fresh budget, under a newer fence */
	sq_job j = test_get_job(t.client, f1);
	int old_attempt = j.attempt;
	sq_job_clear(&j);
	size_t k = claim_type(t.client, "w2", "f", 10, &js);
	ck_assert_uint_eq(k, 3); /* f1, f2, ready */
	for (size_t i = 0; i < k; i++)
		if (js[i].id == f1) {
			ck_assert_int_eq(js[i].tries, 1);
			ck_assert_int_gt(js[i].attempt, old_attempt);
		}
	sq_jobs_free(js, k);

	/* every failed job of a type, in batches */
	test_enqueue_n(t.client, "g", BULK, NULL);
	ck_assert_uint_eq(fail_all(t.client, "g", BULK, ids), BULK);
	char *out = NULL, *errs = NULL;
	const char *args[] = {"-c", ini, "retry", "--type", "g", "--batch", "500", NULL};
	rc = test_cli_argv(args, NULL, 0, &out, &errs);
	ck_assert_msg(rc == 0, "shardq retry --type exited %d:\n%s", rc, errs);
	ck_assert_str_eq(out, "{\"type\":\"g\",\"retried\":2500,\"not_allowed\":0}\n");
	int batches = 0;
	for (const char *p = errs; (p = strstr(p, "made ready")) != NULL; p++)
		batches++;
	ck_assert_msg(batches >= 5, "%d progress lines for 2,500 jobs in batches of 500:\n%s",
		      batches, errs);
	free(out);
	free(errs);
	ck_assert_int_eq(count("task = 'g' AND status = 'ready' AND attempt = attempt_base"), BULK);

	/* over HTTP: admin only, per job, logged with the token's name */
	daemon_start();
	ck_assert_uint_eq(fail_all(t.client, "g", 2, ids), 2);
	char body[256];
	/* `ready` was claimed by w2 above: a worker holds it */
	snprintf(body, sizeof(body), "{\"ids\":[%lld,%lld,%lld]}", (long long)ids[0],
		 (long long)ids[1], (long long)ready);
	json_t *r = call("POST", "/v1/jobs/retry", tok_worker, body, &st);
	ck_assert_int_eq(st, 403);
	r = call("POST", "/v1/jobs/retry", tok_admin, body, &st);
	ck_assert_msg(r != NULL, "retry answered %d", st);
	json_t *res = json_object_get(r, "results");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(res, 0), "result")),
			 "ok");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(res, 1), "result")),
			 "ok");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(res, 2), "result")),
			 "not_allowed");
	json_decref(r);
	ck_assert_int_eq(status_of(ids[0]), SQ_READY);
	ck_assert_int_eq(status_of(ready), SQ_STARTING);
	/* a job's last error, in `shardq get` and GET /v1/jobs/{id} */
	snprintf(body, sizeof(body), "/v1/jobs/%lld", (long long)f3);
	r = call("GET", body, tok_admin, NULL, &st);
	ck_assert_msg(r != NULL, "GET %s answered %d", body, st);
	ck_assert_str_eq(json_string_value(json_object_get(r, "last_error")), "downstream said no");
	json_decref(r);
	rc = test_cli(NULL, msg, sizeof(msg), "-c %s get %lld", ini, (long long)f3);
	ck_assert_msg(rc == 0 && strstr(msg, "\"last_error\":\"downstream said no\""), "%d: %s", rc,
		      msg);
	ck_assert_msg(strstr(test_file_text(D.out), "retry of 3 jobs by token 'ops': 2 made ready"),
		      "shardqd did not log the retry with its token:\n%s", test_file_text(D.out));
	ck_assert_int_eq(test_daemon_stop(&D, SIGTERM), 0);
	testdb_close(&t);
}
END_TEST

/* Every page of `status` of type l, `limit` at a time, through the
 * library; the ids in order into ids (at most max); how many. */
static size_t list_all(sq_client *c, const char *status, int limit, int64_t *ids, size_t max,
		       int *pages)
{
	sq_job_filter f = {"l", status, NULL, -1, 0, 0, 0, 0};
	char next[64] = "", cur[64] = "";
	size_t got = 0;
	sq_error err;
	*pages = 0;
	do {
		sq_job *js;
		size_t n;
		OKE(sq_jobs_list(c, &f, cur, limit, &js, &n, next, sizeof(next), &err));
		ck_assert_uint_le(n, (size_t)limit);
		for (size_t i = 0; i < n && got < max; i++)
			ids[got++] = js[i].id;
		sq_jobs_free(js, n);
		snprintf(cur, sizeof(cur), "%s", next);
		(*pages)++;
	} while (next[0]);
	return got;
}

/* Jobs found by type and status, a page at a time over both shards: every
 * job of the status once, in its order, also when jobs are claimed between
 * two pages; by key; over HTTP (admin); bad input named. */
START_TEST(jobs_are_found_by_type_and_status_a_page_at_a_time)
{
	enum { N = 300 };
	static int64_t ids[2 * N];
	char ini[600], msg[16384];
	sq_error err;
	int pages, st;
	testdb_open(&t, "admin_list", 2, 64, "[type l]\nmax_attempts = 1\n[type o]\n");
	test_write_bytes(testdb_path(ini, sizeof(ini), "c.ini"), t.ini, strlen(t.ini));
	/* N ready jobs in three priorities, 20 failed, 10 running, 10 starting */
	static sq_job_spec js[N];
	static sq_enqueue_result rs[N];
	char keys[N][16];
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "key%d", i);
		js[i] = (sq_job_spec){
			.type = "l", .key = keys[i], .has_priority = 1, .priority = i % 3};
	}
	OKE(sq_enqueue(t.client, js, N, rs, &err));
	test_enqueue_n(t.client, "o", 50, NULL); /* another type: never listed */
	sq_job *cl;
	size_t k = claim_type(t.client, "w", "l", 40, &cl);
	ck_assert_uint_eq(k, 40);
	sq_fail_req fr[20];
	sq_status out[20];
	sq_job_ref refs[10];
	for (int i = 0; i < 20; i++)
		fr[i] = (sq_fail_req){{cl[i].id, cl[i].attempt}, "no", 1};
	OKE(sq_fail(t.client, "w", fr, 20, out, &err));
	for (int i = 0; i < 10; i++)
		refs[i] = (sq_job_ref){cl[20 + i].id, cl[20 + i].attempt};
	OKE(sq_start(t.client, "w", refs, 10, out, &err));
	sq_jobs_free(cl, k);

	/* each status: every job once, pages of 7, in the status's order */
	static const struct {
		const char *status;
		size_t n;
	} want[] = {{"ready", N - 40}, {"failed", 20}, {"running", 10}, {"starting", 10}};
	for (size_t w = 0; w < 4; w++) {
		size_t n = list_all(t.client, want[w].status, 7, ids, 2 * N, &pages);
		ck_assert_msg(n == want[w].n, "%s: %zu jobs listed, want %zu", want[w].status, n,
			      want[w].n);
		qsort(ids, n, sizeof(ids[0]), test_cmp_i64);
		for (size_t i = 1; i < n; i++)
			ck_assert_msg(ids[i] != ids[i - 1], "%s: job %lld listed twice",
				      want[w].status, (long long)ids[i]);
		char sql[160];
		snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM shardq.jobs WHERE task = 'l' AND status = '%s'",
			 want[w].status);
		ck_assert_int_eq(testdb_sum(&t, sql), (long long)n);
	}
	/* the page's last errors at once: a failed job's, none for a ready
	 * job or an id that is no job */
	{
		sq_job ej[3] = {{.id = fr[0].ref.id, .shard = -1},
				{.id = rs[0].id, .shard = -1},
				{.id = INT64_C(4294967295) << 16, .shard = -1}};
		char *errs[3];
		OKE(sq_jobs_errors(t.client, ej, 3, errs, &err));
		ck_assert_msg(errs[0] && !strcmp(errs[0], "no"), "failed job's error: %s",
			      errs[0] ? errs[0] : "(none)");
		ck_assert_ptr_null(errs[1]);
		ck_assert_ptr_null(errs[2]);
		free(errs[0]);
	}
	/* ready: claim order across the shards (priority 2 first) */
	sq_job_filter f = {"l", NULL, NULL, -1, 0, 0, 0, 0};
	char next[64];
	sq_job *page;
	size_t n;
	OKE(sq_jobs_list(t.client, &f, NULL, 1000, &page, &n, next, sizeof(next), &err));
	ck_assert_uint_eq(n, N - 40);
	ck_assert_str_eq(next, "");
	for (size_t i = 1; i < n; i++)
		ck_assert_msg(page[i - 1].priority >= page[i].priority,
			      "job %zu of priority %d before one of %d", i, page[i - 1].priority,
			      page[i].priority);
	sq_jobs_free(page, n);
	/* claims between pages neither skip nor repeat the jobs left ready */
	OKE(sq_jobs_list(t.client, &f, NULL, 50, &page, &n, next, sizeof(next), &err));
	int64_t seen_last = page[n - 1].id;
	sq_jobs_free(page, n);
	k = claim_type(t.client, "w", "l", 30, &cl); /* from the front: pages 1 */
	sq_jobs_free(cl, k);
	size_t rest = 0;
	char cur[64];
	snprintf(cur, sizeof(cur), "%s", next);
	while (cur[0]) {
		OKE(sq_jobs_list(t.client, &f, cur, 50, &page, &n, next, sizeof(next), &err));
		for (size_t i = 0; i < n; i++)
			ck_assert_int_ne(page[i].id, seen_last);
		rest += n;
		sq_jobs_free(page, n);
		snprintf(cur, sizeof(cur), "%s", next);
	}
	ck_assert_uint_eq(rest, N - 40 - 50); /* the claims took from the first page */
	/* by key; by shard */
	f.key = "key299";
	OKE(sq_jobs_list(t.client, &f, NULL, 10, &page, &n, next, sizeof(next), &err));
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(page[0].key, "key299");
	sq_jobs_free(page, n);
	f.key = NULL;
	/* bad input */
	f.status = "done";
	ck_assert_int_eq(sq_jobs_list(t.client, &f, NULL, 10, &page, &n, next, 64, &err),
			 SQ_EINVAL);
	ck_assert_msg(strstr(err.msg, "status 'done' cannot be listed"), "%s", err.msg);
	f.status = NULL;
	ck_assert_int_eq(sq_jobs_list(t.client, &f, "x.y", 10, &page, &n, next, 64, &err),
			 SQ_EINVAL);
	ck_assert_msg(strstr(err.msg, "is not one a listing of ready jobs of type l gave"), "%s",
		      err.msg);
	/* a cursor of another listing (failed jobs of l) is refused, not read
	 * as a place in this one */
	{
		sq_job_filter ff = {"l", "failed", NULL, -1, 0, 0, 0, 0};
		char fnext[64];
		OKE(sq_jobs_list(t.client, &ff, NULL, 3, &page, &n, fnext, sizeof(fnext), &err));
		sq_jobs_free(page, n);
		ck_assert(fnext[0]);
		ck_assert_int_eq(sq_jobs_list(t.client, &f, fnext, 10, &page, &n, next, 64, &err),
				 SQ_EINVAL);
		ck_assert_msg(strstr(err.msg, "not one a listing of ready jobs"), "%s", err.msg);
	}
	/* filters that do not apply are named, never dropped */
	sq_job_filter bad[] = {
		{"l", "failed", "key7", -1, 0, 0, 0, 0},        /* a key finds a live job */
		{"l", "ready", NULL, -1, 1000, 0, 0, 0},        /* finish time of a ready job */
		{"l", "completed", NULL, -1, 0, 0, 0, 0},       /* l keeps no history */
		{"l", NULL, "", -1, 0, 0, 0, 0},                /* an empty key */
		{"l", "completed", NULL, -1, 2000, 1000, 0, 0}, /* an empty window */
	};
	static const char *const named[] = {"live job", "filters completed jobs",
					    "keeps no history", "empty key", "finish-time window"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(
			sq_jobs_list(t.client, &bad[i], NULL, 10, &page, &n, next, 64, &err),
			SQ_EINVAL);
		ck_assert_msg(strstr(err.msg, named[i]), "case %zu: %s", i, err.msg);
	}
	/* a key with a status finds its live job only in that status */
	sq_job_filter kf = {"l", "running", "key7", -1, 0, 0, 0, 0};
	OKE(sq_jobs_list(t.client, &kf, NULL, 10, &page, &n, next, 64, &err));
	ck_assert_uint_eq(n, 0); /* key7 is ready */
	kf.status = "ready";
	OKE(sq_jobs_list(t.client, &kf, NULL, 10, &page, &n, next, 64, &err));
	ck_assert_uint_eq(n, 1);
	sq_jobs_free(page, n);
	int rc = test_cli(NULL, msg, sizeof(msg), "-c %s jobs list --type l --status failed --all",
			  ini);
	ck_assert_int_eq(rc, 0);
	int lines = 0, errors = 0;
	for (const char *p = msg; (p = strchr(p, '\n')) != NULL; p++)
		lines++;
	for (const char *p = msg; (p = strstr(p, "\"last_error\":\"no\"")) != NULL; p++)
		errors++;
	ck_assert_int_eq(lines, 20);
	ck_assert_int_eq(errors, 20);
	rc = test_cli(NULL, msg, sizeof(msg), "-c %s jobs list --type nope", ini);
	ck_assert_msg(rc == 5 && strstr(msg, "unknown type 'nope'"), "%d: %s", rc, msg);
	/* cancel every ready job of o, page by page: the others stay */
	rc = test_cli(NULL, msg, sizeof(msg), "-c %s cancel --type o --status ready", ini);
	ck_assert_msg(rc == 0 && strstr(msg, "{\"type\":\"o\",\"status\":\"ready\","
					     "\"cancelled\":50}"),
		      "%d: %s", rc, msg);
	ck_assert_int_eq(count("task = 'o' AND status = 'cancelled'"), 50);
	const char *args[] = {"-c",       ini,         "jobs",    "list", "--type", "o",
			      "--status", "cancelled", "--limit", "8",    "--all",  NULL};
	char *lout = NULL, *lerr = NULL;
	rc = test_cli_argv(args, NULL, 0, &lout, &lerr);
	lines = 0;
	for (const char *p = lout; p && (p = strstr(p, "\"status\":\"cancelled\"")) != NULL; p++)
		lines++;
	ck_assert_msg(rc == 0 && lines == 50, "%d cancelled jobs listed (exit %d): %s", lines, rc,
		      lerr);
	free(lout);
	free(lerr);
	ck_assert_int_eq(count("task = 'l' AND status = 'cancelled'"), 0);
	rc = test_cli(NULL, msg, sizeof(msg), "-c %s cancel --type o --status failed", ini);
	ck_assert_msg(rc == 5 && strstr(msg, "only ready, starting or running"), "%d: %s", rc, msg);

	/* over HTTP, admin only */
	daemon_start();
	json_t *j = call("GET", "/v1/jobs?type=l&status=failed&limit=15", tok_worker, NULL, &st);
	ck_assert_int_eq(st, 403);
	j = call("GET", "/v1/jobs?type=l&status=failed&limit=15", tok_admin, NULL, &st);
	ck_assert_msg(j != NULL, "GET /v1/jobs answered %d", st);
	ck_assert_int_eq((int)json_array_size(json_object_get(j, "jobs")), 15);
	for (size_t i = 0; i < 15; i++) {
		json_t *e = json_object_get(json_array_get(json_object_get(j, "jobs"), i),
					    "last_error");
		ck_assert_msg(json_is_string(e) && !strcmp(json_string_value(e), "no"),
			      "failed job %zu of the page has no last_error", i);
	}
	const char *nx = json_string_value(json_object_get(j, "next"));
	ck_assert_ptr_nonnull(nx);
	char path[256];
	snprintf(path, sizeof(path), "/v1/jobs?type=l&status=failed&limit=15&after=%s", nx);
	json_decref(j);
	j = call("GET", path, tok_admin, NULL, &st);
	ck_assert_msg(j != NULL, "the next page answered %d", st);
	ck_assert_int_eq((int)json_array_size(json_object_get(j, "jobs")), 5);
	ck_assert(json_is_null(json_object_get(j, "next")));
	json_decref(j);
	j = call("GET", "/v1/jobs?status=failed", tok_admin, NULL, &st);
	ck_assert_int_eq(st, 400);
	call("GET", "/v1/jobs?type=l&stauts=failed", tok_admin, NULL, &st);
	ck_assert_int_eq(st, 400); /* not every ready job */
	call("GET", "/v1/jobs?type=l&limit=5&limit=500", tok_admin, NULL, &st);
	ck_assert_int_eq(st, 400);
	/* cancel by status over HTTP: an admin's call */
	test_enqueue_n(t.client, "o", 12, NULL);
	j = call("POST", "/v1/jobs/cancel", tok_worker, "{\"type\":\"o\",\"status\":\"ready\"}",
		 &st);
	ck_assert_int_eq(st, 403);
	j = call("POST", "/v1/jobs/cancel", tok_admin, "{\"type\":\"o\",\"status\":\"ready\"}",
		 &st);
	ck_assert_msg(j != NULL, "cancel by status answered %d", st);
	ck_assert_int_eq((int)json_integer_value(json_object_get(j, "cancelled")), 12);
	json_decref(j);
	ck_assert_msg(
		strstr(test_file_text(D.out), "cancel of the ready jobs of type o by token 'ops'"),
		"%s", test_file_text(D.out));
	ck_assert_int_eq(test_daemon_stop(&D, SIGTERM), 0);
	testdb_close(&t);
}
END_TEST

/* Every job of type l in status that the filter's creation window holds,
 * `limit` at a time; ids into ids (at most max), how many; checks that
 * the ready ones come in claim order across the shards and pages. */
static size_t list_window(const char *status, int64_t after_us, int64_t before_us, int limit,
			  int64_t *ids, size_t max)
{
	sq_job_filter f = {"l", status, NULL, -1, 0, 0, after_us, before_us};
	char next[64] = "", cur[64] = "";
	size_t got = 0;
	int64_t prev_o = INT64_MIN, prev_id = 0;
	sq_error err;
	do {
		sq_job *js;
		size_t n;
		OKE(sq_jobs_list(t.client, &f, cur, limit, &js, &n, next, sizeof(next), &err));
		for (size_t i = 0; i < n; i++) {
			int64_t o = js[i].delay_tolerance_time_us ? js[i].delay_tolerance_time_us
								  : js[i].schedule_time_us;
			ck_assert_msg((after_us == 0 || js[i].created_us > after_us) &&
					      (before_us == 0 || js[i].created_us <= before_us),
				      "job %lld created at %lld is outside (%lld, %lld]",
				      (long long)js[i].id, (long long)js[i].created_us,
				      (long long)after_us, (long long)before_us);
			ck_assert_msg(strcmp(status, "ready") || o > prev_o ||
					      (o == prev_o && js[i].id > prev_id),
				      "ready job %lld listed out of claim order",
				      (long long)js[i].id);
			prev_o = o, prev_id = js[i].id;
			if (got < max)
				ids[got++] = js[i].id;
		}
		sq_jobs_free(js, n);
		snprintf(cur, sizeof(cur), "%s", next);
	} while (next[0]);
	return got;
}

/* The distinct ids of v (sorted), and that none came twice. */
static size_t distinct(int64_t *v, size_t n)
{
	qsort(v, n, sizeof(v[0]), test_cmp_i64);
	for (size_t i = 1; i < n; i++)
		ck_assert_msg(v[i] != v[i - 1], "job %lld listed twice", (long long)v[i]);
	return n;
}

/* Jobs found by when they were created: a window over each status's
 * order, past more rows than one round of a shard's scan reads (10,000),
 * each job of the window once and in order, failed jobs from where the
 * window starts; the CLI (jobs list, cancel) and HTTP; bad windows named. */
START_TEST(jobs_are_found_by_creation_time_past_a_long_scan)
{
	enum { N = 24000 };
	static int64_t ids[N];
	char ini[600], msg[4096], path[256];
	int st;
	sq_error err;
	testdb_open(&t, "admin_created", 2, 64, "[type l]\nmax_attempts = 1\n[type o]\n");
	test_write_bytes(testdb_path(ini, sizeof(ini), "c.ini"), t.ini, strlen(t.ini));
	test_enqueue_n(t.client, "l", N, NULL);
	test_enqueue_n(t.client, "o", 100, NULL);
	/* one job in 397 created two hours ago, scattered over both shards'
	 * claim order; 20 of those, and 15 new ones, failed since */
	for (int s = 0; s < 2; s++) {
		PGconn *pg = testdb_pg(&t, s);
		PQclear(PQexec(pg, "UPDATE shardq.jobs SET created_at = now() - interval '2 hours' "
				   "WHERE task = 'l' AND id % 397 = 5"));
		PQclear(PQexec(pg, "UPDATE shardq.jobs SET status = 'failed', updated_at = now() - "
				   "interval '90 minutes' WHERE id IN (SELECT id FROM shardq.jobs "
				   "WHERE task = 'l' AND id % 397 = 5 ORDER BY id LIMIT 10)"));
		PQclear(PQexec(pg, "UPDATE shardq.jobs SET status = 'failed', updated_at = now() "
				   "WHERE id IN (SELECT id FROM shardq.jobs WHERE task = 'l' AND "
				   "status = 'ready' AND id % 397 <> 5 ORDER BY id DESC LIMIT 8)"));
		PQfinish(pg);
	}
	long long old = count("task = 'l' AND status = 'ready' AND created_at < now() - "
			      "interval '1 hour'");
	long long fresh_failed = count("task = 'l' AND status = 'failed' AND created_at > now() - "
				       "interval '1 hour'");
	ck_assert_msg(old > 20 && fresh_failed == 16, "%lld old ready jobs, %lld new failed", old,
		      fresh_failed);
	int64_t hour_ago = (int64_t)(test_wall_s() * 1e6) - INT64_C(3600000000);

	/* ready, created over an hour ago: a few in each round's 10,000 */
	size_t n = distinct(ids, list_window("ready", 0, hour_ago, 7, ids, N));
	ck_assert_int_eq((long long)n, old);
	n = distinct(ids, list_window("ready", hour_ago, 0, 1000, ids, N));
	ck_assert_int_eq((long long)n, count("task = 'l' AND status = 'ready'") - old);
	/* failed: the window starts the order where it starts */
	n = distinct(ids, list_window("failed", hour_ago, 0, 5, ids, N));
	ck_assert_int_eq((long long)n, fresh_failed);
	n = distinct(ids, list_window("failed", 0, hour_ago, 5, ids, N));
	ck_assert_int_eq((long long)n, 20);
	/* a window that holds no time is named */
	sq_job_filter bad = {"l", NULL, NULL, -1, 0, 0, hour_ago, hour_ago - 1};
	sq_job *js;
	char next[64];
	ck_assert_int_eq(sq_jobs_list(t.client, &bad, NULL, 10, &js, &n, next, sizeof(next), &err),
			 SQ_EINVAL);
	ck_assert_msg(strstr(err.msg, "creation window"), "%s", err.msg);

	/* the command line: list, then cancel, the ready jobs waiting an hour */
	const char *args[] = {
		"-c", ini,       "jobs", "list",  "--type", "l", "--created-older-than",
		"1h", "--limit", "50",   "--all", NULL};
	char *lout = NULL, *lerr = NULL;
	int rc = test_cli_argv(args, NULL, 0, &lout, &lerr);
	long long lines = 0;
	for (const char *p = lout; p && (p = strchr(p, '\n')) != NULL; p++)
		lines++;
	ck_assert_msg(rc == 0 && lines == old, "%lld jobs listed of %lld (exit %d): %s", lines, old,
		      rc, lerr);
	free(lout);
	free(lerr);
	rc = test_cli(NULL, msg, sizeof(msg), "-c %s cancel --type l --created-within 1h", ini);
	ck_assert_msg(rc == 2 && strstr(msg, "go with --type T --status S"), "%d: %s", rc, msg);
	long long ready = count("task = 'l' AND status = 'ready'");
	rc = test_cli(NULL, msg, sizeof(msg),
		      "-c %s cancel --type l --status ready --created-older-than 1h", ini);
	ck_assert_msg(rc == 0 && strstr(msg, "\"cancelled\":"), "%d: %s", rc, msg);
	ck_assert_int_eq(count("task = 'l' AND status = 'cancelled'"), old);
	ck_assert_int_eq(count("task = 'l' AND status = 'ready'"), ready - old);
	ck_assert_int_eq(count("task = 'l' AND status = 'ready' AND created_at < now() - "
			       "interval '1 hour'"),
			 0);

	/* over HTTP */
	daemon_start();
	snprintf(path, sizeof(path), "/v1/jobs?type=l&status=failed&limit=3&created_after_ms=%lld",
		 (long long)(hour_ago / 1000));
	n = 0;
	for (int pages = 0; path[0]; pages++) {
		json_t *j = call("GET", path, tok_admin, NULL, &st);
		ck_assert_msg(j != NULL, "GET %s answered %d", path, st);
		n += json_array_size(json_object_get(j, "jobs"));
		const char *nx = json_string_value(json_object_get(j, "next"));
		if (nx)
			snprintf(path, sizeof(path),
				 "/v1/jobs?type=l&status=failed&limit=3&created_after_ms=%lld&"
				 "after=%s",
				 (long long)(hour_ago / 1000), nx);
		else
			path[0] = '\0';
		json_decref(j);
		ck_assert_int_lt(pages, 100);
	}
	ck_assert_int_eq((long long)n, fresh_failed);
	call("GET", "/v1/jobs?type=l&created_after_ms=an+hour+ago", tok_admin, NULL, &st);
	ck_assert_int_eq(st, 400);
	/* a bulk cancel with a field it does not know, or of two forms, is
	 * refused whole: a misspelled window is not read as none */
	static const char *const refused[] = {
		"{\"type\":\"l\",\"status\":\"ready\",\"created_afer_ms\":1}",
		"{\"type\":\"l\",\"status\":\"ready\",\"key\":\"k\"}",
		"{\"ids\":[1],\"type\":\"l\",\"status\":\"ready\"}",
		"{\"type\":\"nosuch\",\"status\":\"ready\"}",
	};
	ready = count("task = 'l' AND status = 'ready'");
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		call("POST", "/v1/jobs/cancel", tok_admin, refused[i], &st);
		ck_assert_msg(st == 400, "%s answered %d", refused[i], st);
	}
	ck_assert_int_eq(count("task = 'l' AND status = 'ready'"), ready);
	snprintf(path, sizeof(path),
		 "{\"type\":\"l\",\"status\":\"ready\",\"created_before_ms\":%lld}",
		 (long long)(hour_ago / 1000));
	json_t *cj = call("POST", "/v1/jobs/cancel", tok_admin, path, &st);
	ck_assert_msg(cj != NULL, "a windowed cancel answered %d", st);
	ck_assert_int_eq(json_integer_value(json_object_get(cj, "cancelled")), 0);
	json_decref(cj);
	ck_assert_int_eq(count("task = 'l' AND status = 'ready'"), ready);
	call("GET", "/v1/jobs?type=l&created_after_ms=20&created_before_ms=10", tok_admin, NULL,
	     &st);
	ck_assert_int_eq(st, 400);
	ck_assert_int_eq(test_daemon_stop(&D, SIGTERM), 0);
	const char *log = test_file_text(D.out);
	ck_assert_msg(strstr(log, "cancel of the ready jobs of type l, created after 0 ms and by"),
		      "the windowed cancel is not logged with its window:\n%s", log);
	ck_assert_msg(!strstr(log, "type nosuch") && !strstr(log, "created_afer"),
		      "a refused cancel is logged as done:\n%s", log);
	testdb_close(&t);
}
END_TEST

/* The listing's statements, planned generic and custom with the library's
 * session settings, on a shard whose statistics say it holds 10^7 jobs
 * (20,000 real ones, ANALYZEd, and a density of 500 rows a page): each
 * reads its status's index, never the table; a type's failed jobs by the
 * index that holds them by type, not past another type's. */
START_TEST(the_listing_reads_each_status_by_its_index_at_ten_million_jobs)
{
#define FAR "253402300799000000"
	static const struct {
		const char *name, *sql, *args, *index;
	} st[] = {
		{"ready", sq_sql_list_ready, "'l', 2147483647, 0, 0, 100, 100, 0, " FAR,
		 "jobs_ready"},
		{"ready, from a cursor", sq_sql_list_ready,
		 "'l', 1, 1795406483327000, 4294967338, 100, 100, 0, " FAR, "jobs_ready"},
		{"ready, created in a window", sq_sql_list_ready,
		 "'l', 2147483647, 0, 0, 100, 10000, 1795406483327000, " FAR, "jobs_ready"},
		{"running", sq_sql_list_leased, "'l', 'running', 0, 0, 100, 100, 0, " FAR,
		 "jobs_lease"},
		{"failed", sq_sql_list_failed, "'l', 'failed', 0, 0, 100, 100, 0, " FAR ", " FAR,
		 "jobs_failed_task"},
		{"failed, created in a window", sq_sql_list_failed,
		 "'l', 'failed', 1795406483327000, 9223372036854775807, 100, 10000, "
		 "1795406483327000, " FAR ", " FAR,
		 "jobs_failed_task"},
		{"key", sq_sql_list_key, "'l', 'key7'", "jobs_active_uid"},
		{"completed", sq_sql_list_completed,
		 "'l', 'completed', 0, 0, 100, 100, 0, " FAR ", " FAR, "jobs_history"},
		{"cancelled", sq_sql_list_cancelled, "'l', 'cancelled', 0, 0, 100, 100, 0, " FAR,
		 "jobs_cancelled"},
	};
	testdb_open(&t, "admin_list_plans", 2, 64, "[type l]\n[type o]\n");
	test_enqueue_n(t.client, "o", 20000, NULL);
	test_enqueue_n(t.client, "l", 200, NULL);
	PGconn *pg = testdb_pg(&t, 0);
	/* a type with many failed jobs beside one with few: a page of the
	 * few must not read past the many */
	PQclear(PQexec(pg, "UPDATE shardq.jobs SET status = 'failed' WHERE id IN (SELECT id FROM "
			   "shardq.jobs WHERE task = 'o' ORDER BY id LIMIT 5000)"));
	PQclear(PQexec(pg, "UPDATE shardq.jobs SET status = 'failed' WHERE id IN (SELECT id FROM "
			   "shardq.jobs WHERE task = 'l' ORDER BY id LIMIT 5)"));
	PQclear(PQexec(pg, "ANALYZE shardq.jobs"));
	/* 10^7 rows as the planner sees them: its density times the pages */
	PQclear(PQexec(pg, "UPDATE pg_class SET reltuples = 1e7, relpages = 20000 "
			   "WHERE oid = 'shardq.jobs'::regclass"));
	PQclear(PQexec(pg, "SET enable_seqscan = off; SET enable_bitmapscan = off"));
	for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++)
		for (int generic = 0; generic < 2; generic++) {
			char q[512];
			PQclear(PQexec(pg, "DEALLOCATE ALL"));
			PGresult *r = PQprepare(pg, "s", st[i].sql, 0, NULL);
			ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s: %s", st[i].name,
				      PQerrorMessage(pg));
			PQclear(r);
			PQclear(PQexec(pg, generic ? "SET plan_cache_mode = force_generic_plan"
						   : "SET plan_cache_mode = force_custom_plan"));
			snprintf(q, sizeof(q), "EXPLAIN EXECUTE s(%s)", st[i].args);
			r = PQexec(pg, q);
			ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", st[i].name,
				      PQerrorMessage(pg));
			char plan[8192] = "";
			for (int row = 0; row < PQntuples(r); row++)
				snprintf(plan + strlen(plan), sizeof(plan) - strlen(plan), "%s\n",
					 PQgetvalue(r, row, 0));
			PQclear(r);
			char want[64];
			snprintf(want, sizeof(want), "Index Scan using %s", st[i].index);
			ck_assert_msg(strstr(plan, want) && !strstr(plan, "Seq Scan on jobs") &&
					      !strstr(plan, "Bitmap Heap Scan on jobs"),
				      "the listing of %s (%s plan) does not read %s alone:\n%s",
				      st[i].name, generic ? "generic" : "custom", st[i].index,
				      plan);
		}
	PQfinish(pg);
	testdb_close(&t);
}
END_TEST

static long long scans_wanted;
/* How many more scans of jobs_failed_task the shards' statistics must show. */
static long long failed_task_scans_left(void *arg)
{
	(void)arg;
	long long got =
		testdb_sum(&t, "SELECT COALESCE(sum(idx_scan), 0) FROM "
			       "pg_stat_user_indexes WHERE indexrelname = 'jobs_failed_task'");
	return got >= scans_wanted ? 0 : scans_wanted - got;
}

/* A listing is planned for its type on every call, never by a plan kept
 * for every type: the server's generic plan guessed a type's share of the
 * failed jobs, and from the sixth call on read a common type's failed jobs
 * by jobs_failed (every type's, by time) and sorted them all, a page after
 * page. Shown by the shards' index statistics (flushed by the library's
 * sessions within seconds of a call: the wait is for that flush). */
START_TEST(a_listing_is_planned_for_its_type_on_every_call)
{
	sq_error err;
	long long left;
	testdb_open(&t, "admin_list_planned", 2, 64, "[type l]\n[type o]\n");
	test_enqueue_n(t.client, "o", 6000, NULL);
	test_enqueue_n(t.client, "l", 50, NULL);
	for (int s = 0; s < 2; s++) {
		PGconn *pg = testdb_pg(&t, s);
		PQclear(PQexec(pg, "UPDATE shardq.jobs SET status = 'failed' WHERE task = 'o' OR "
				   "(task = 'l' AND id % 10 = 0)"));
		PQclear(PQexec(pg, "ANALYZE shardq.jobs"));
		PQfinish(pg);
	}
	const char *by_time = "SELECT COALESCE(sum(idx_scan), 0) FROM pg_stat_user_indexes "
			      "WHERE indexrelname = 'jobs_failed'";
	long long time_scans = testdb_sum(&t, by_time);
	scans_wanted =
		testdb_sum(&t, "SELECT COALESCE(sum(idx_scan), 0) FROM "
			       "pg_stat_user_indexes WHERE indexrelname = 'jobs_failed_task'");
	/* a window that holds every job: one round on each shard a call */
	sq_job_filter f = {"o", "failed", NULL, -1, 0, 0, 1, 0};
	for (int i = 0; i < 12; i++) {
		sq_job *js;
		size_t n;
		char next[64];
		OKE(sq_jobs_list(t.client, &f, NULL, 10, &js, &n, next, sizeof(next), &err));
		ck_assert_uint_eq(n, 10);
		sq_jobs_free(js, n);
	}
	scans_wanted += 12 * 2;
	ck_assert_msg(wait_progress(failed_task_scans_left, NULL, &left),
		      "%lld of 24 listings' scans of jobs_failed_task never showed", left);
	ck_assert_int_eq(testdb_sum(&t, by_time), time_scans);
	testdb_close(&t);
}
END_TEST

/* Claims and completes n jobs of type, with the library. */
static void run_n(const char *type, int n)
{
	sq_error err;
	for (int done = 0; done < n;) {
		sq_job *js;
		size_t k = claim_type(t.client, "hw", type, 100, &js);
		ck_assert_msg(k > 0, "%d of %d jobs of %s claimed, then none", done, n, type);
		sq_job_ref refs[100];
		sq_status out[100];
		for (size_t i = 0; i < k; i++)
			refs[i] = (sq_job_ref){js[i].id, js[i].attempt};
		OKE(sq_complete(t.client, "hw", refs, k, out, &err));
		sq_jobs_free(js, k);
		done += (int)k;
	}
}

/* Finished jobs of a type found in its history a page at a time, and
 * purged by age (the CLI and HTTP), by the history's type index. */
START_TEST(finished_jobs_are_found_and_purged_by_type)
{
	static int64_t ids[64];
	char ini[600], msg[32768], body[128];
	int pages, st;
	testdb_open(&t, "admin_hist", 2, 64,
		    "[type l]\nhistory = true\nmax_attempts = 4\n[type o]\nhistory = true\n");
	test_write_bytes(testdb_path(ini, sizeof(ini), "c.ini"), t.ini, strlen(t.ini));
	test_enqueue_n(t.client, "l", 50, NULL);
	test_enqueue_n(t.client, "o", 10, NULL);
	run_n("l", 50);
	run_n("o", 10);
	size_t n = list_all(t.client, "completed", 20, ids, 64, &pages);
	ck_assert_uint_eq(n, 50);
	{ /* a history row keeps no budget of tries: the type's is shown */
		sq_job_filter cf = {"l", "completed", NULL, -1, 0, 0, 0, 0};
		sq_job *cj;
		size_t cn;
		char cnext[64];
		sq_error err;
		OKE(sq_jobs_list(t.client, &cf, NULL, 5, &cj, &cn, cnext, sizeof(cnext), &err));
		ck_assert_uint_eq(cn, 5);
		for (size_t i = 0; i < cn; i++)
			ck_assert_int_eq(cj[i].max_attempts, 4);
		sq_jobs_free(cj, cn);
	}
	ck_assert_int_ge(pages, 3);
	qsort(ids, n, sizeof(ids[0]), test_cmp_i64);
	for (size_t i = 1; i < n; i++)
		ck_assert_int_ne(ids[i], ids[i - 1]);
	int rc = test_cli(NULL, msg, sizeof(msg),
			  "-c %s jobs list --type l --status completed --finished-within 1h --all "
			  "--limit 7",
			  ini);
	ck_assert_int_eq(rc, 0);
	int lines = 0;
	for (const char *p = msg; (p = strstr(p, "\"status\":\"completed\"")) != NULL; p++)
		lines++;
	ck_assert_int_eq(lines, 50);
	/* purge l's: o's stay */
	rc = test_cli(NULL, msg, sizeof(msg), "-c %s purge --type l --older-than 0s --batch 20",
		      ini);
	ck_assert_msg(rc == 0 && strstr(msg, "{\"type\":\"l\",\"purged\":50}"), "%d: %s", rc, msg);
	ck_assert_int_eq(
		testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history WHERE task = 'l'"), 0);
	ck_assert_int_eq(
		testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history WHERE task = 'o'"), 10);
	rc = test_cli(NULL, msg, sizeof(msg), "-c %s purge --type l", ini);
	ck_assert_int_eq(rc, 2);
	/* over HTTP, admin only, logged */
	test_enqueue_n(t.client, "l", 5, NULL);
	run_n("l", 5);
	daemon_start();
	json_t *j = call("GET", "/v1/jobs?type=l&status=completed", tok_admin, NULL, &st);
	ck_assert_msg(j != NULL, "GET /v1/jobs answered %d", st);
	ck_assert_int_eq((int)json_array_size(json_object_get(j, "jobs")), 5);
	json_decref(j);
	snprintf(body, sizeof(body), "{\"type\":\"l\",\"finished_before_ms\":%lld}",
		 (long long)(test_wall_s() * 1000) + 60000);
	j = call("POST", "/v1/jobs/purge", tok_worker, body, &st);
	ck_assert_int_eq(st, 403);
	j = call("POST", "/v1/jobs/purge", tok_admin, body, &st);
	ck_assert_msg(j != NULL, "purge answered %d", st);
	ck_assert_int_eq((int)json_integer_value(json_object_get(j, "purged")), 5);
	json_decref(j);
	ck_assert_msg(strstr(test_file_text(D.out), "purge of type l's history by token 'ops'"),
		      "%s", test_file_text(D.out));
	ck_assert_int_eq(test_daemon_stop(&D, SIGTERM), 0);
	testdb_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("admin");
	ADD_CASE(s, a_paused_type_is_claimed_by_no_worker_and_no_shardqd, 3600);
	ADD_CASE(s, failed_jobs_are_retried_by_id_by_type_and_over_http, 3600);
	ADD_CASE(s, jobs_are_found_by_type_and_status_a_page_at_a_time, 3600);
	ADD_CASE(s, jobs_are_found_by_creation_time_past_a_long_scan, 3600);
	ADD_CASE(s, the_listing_reads_each_status_by_its_index_at_ten_million_jobs, 3600);
	ADD_CASE(s, a_listing_is_planned_for_its_type_on_every_call, 3600);
	ADD_CASE(s, finished_jobs_are_found_and_purged_by_type, 3600);
	return run_suite(s);
}
