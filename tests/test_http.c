/* test_http.c - shardqd through real HTTP, in front of real shards. */
/*
 * Every test starts its own cluster (fresh databases on 2 shards) and its
 * own shardqd process (listen port 0; the port is read from its first
 * line), and talks to it over plain sockets with a small HTTP/1.1 client of
 * its own, so what is tested is what a client in any language sees. Replies
 * are parsed with jansson. Waits go on while something moves and fail on a
 * stall (testdb_stall_s), saying what is left.
 */
#define _GNU_SOURCE
#include "buf.h"
#include "support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define STALL_S testdb_stall_s()

static testdb t;
static char ini_path[512];
static const char *tok_worker = "worker-token-0123456789abcdef";
static const char *tok_producer = "producer-token-0123456789abcdef";
static const char *tok_admin = "admin-token-0123456789abcdef";

/* The end of a file, for a message (check caps a message's length). */
static char *slurp_tail(const char *path)
{
	char *all = (char *)test_file_text(path);
	size_t n = strlen(all);
	if (n <= 2500)
		return all;
	char *at = all + n - 2500;
	memcpy(at, "[...]", 5);
	return at;
}

/* The daemon's config: the cluster's, with [daemon], the tokens and
 * application_name = sqd (so its connections can be counted). */
static void write_ini_via(const char *daemon_keys, const char *extra_tokens,
			  const char *connection_keys, int s2_via)
{
	char hw[160], hp[160], ha[160], conn[256];
	test_hash_token(tok_worker, hw, sizeof(hw));
	test_hash_token(tok_producer, hp, sizeof(hp));
	test_hash_token(tok_admin, ha, sizeof(ha));
	snprintf(conn, sizeof(conn), "\n[connection]\napplication_name = sqd\n%s",
		 connection_keys ? connection_keys : "");
	char *ini = testdb_ini(&t, NULL, conn);
	if (s2_via) {
		char *via = testdb_ini_via(ini, t.ports[1], s2_via);
		free(ini);
		ini = via;
	}
	testdb_path(ini_path, sizeof(ini_path), "shardqd.ini");
	FILE *f = fopen(ini_path, "w");
	ck_assert_msg(f != NULL, "%s: %s", ini_path, strerror(errno));
	fprintf(f,
		"%s\n[daemon]\nlisten = 127.0.0.1:0\n%s%s%s\n"
		"[token w]\n%s\nscopes = worker\n\n[token p]\n%s\nscopes = producer\n\n"
		"[token a]\n%s\nscopes = admin\n\n%s",
		ini, /* 2 threads, polls 100 ms apart, unless the case sets its own */
		daemon_keys && strstr(daemon_keys, "threads") ? "" : "threads = 2\n",
		daemon_keys && strstr(daemon_keys, "claim_poll") ? "" : "claim_poll = 100ms\n",
		daemon_keys ? daemon_keys : "", hw, hp, ha, extra_tokens ? extra_tokens : "");
	fclose(f);
	free(ini);
}

/* The same, shards reached directly. */
static void write_ini(const char *daemon_keys, const char *extra_tokens)
{
	write_ini_via(daemon_keys, extra_tokens, NULL, 0);
}

static const char *types_ini = "[type a]\n"
			       "[type b]\n"
			       "[type q]\nstarting_timeout = 2s\nexecution_timeout = 2s\n";

static test_daemon D;
static void free_bodies(void);

static void start_all(const char *db, const char *daemon_keys)
{
	testdb_open(&t, db, 2, 64, types_ini);
	write_ini(daemon_keys, NULL);
	test_daemon_start(&D, ini_path, "shardqd.out");
}

static void stop_all(void)
{
	if (D.pid)
		test_daemon_stop(&D, SIGKILL);
	testdb_close(&t);
	testdb_tmpdir_remove();
	free_bodies();
}

/* The bodies call() returned, freed by stop_all. */
static char **bodies;
static size_t nbodies;

static void free_bodies(void)
{
	for (size_t i = 0; i < nbodies; i++)
		free(bodies[i]);
	free(bodies);
	bodies = NULL;
	nbodies = 0;
}

static void keep(const hresp *r)
{
	bodies = realloc(bodies, (nbodies + 1) * sizeof(*bodies));
	bodies[nbodies++] = r->body;
}

/* > 0: call() fails when no reply comes within this many seconds. */
static double call_timeout_s;

/* One request on a fresh connection. */
static hresp call(const char *method, const char *path, const char *token, const char *body)
{
	hresp r;
	int fd = hc_connect(D.port);
	if (call_timeout_s > 0) {
		struct timeval tv = {(time_t)call_timeout_s, 0};
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	ck_assert_msg(hc_send(fd, method, path, token, body) == 0, "send %s %s", method, path);
	int got = hc_recv(fd, &r);
	ck_assert_msg(got == 0 || !(errno == EAGAIN || errno == EWOULDBLOCK),
		      "%s %s: no reply within %.0fs; the daemon's output:\n%s", method, path,
		      call_timeout_s, slurp_tail(D.out));
	ck_assert_msg(got == 0, "%s %s: the connection ended without a reply", method, path);
	close(fd);
	keep(&r);
	return r;
}

/* The 30-digit number of every_endpoint's params, which jansson cannot
 * hold: read as 0 (it is checked as text). */
#define BIG "123456789012345678901234567890"

static json_t *js(const hresp *r)
{
	json_error_t e;
	char *big;
	while ((big = strstr(r->body, BIG)) != NULL)
		memcpy(big, "0                             ", strlen(BIG));
	json_t *j = json_loads(r->body, 0, &e);
	ck_assert_msg(j != NULL, "not JSON (%s): %s", e.text, r->body);
	return j;
}

static const char *err_code(const hresp *r)
{
	static char code[64];
	json_t *j = js(r);
	snprintf(code, sizeof(code), "%s",
		 json_string_value(json_object_get(json_object_get(j, "error"), "code"))
			 ?: "(none)");
	json_decref(j);
	return code;
}

static void expect(const hresp *r, int st, const char *code, int line)
{
	ck_assert_msg(r->status == st, "line %d: status %d, want %d: %s", line, r->status, st,
		      r->body);
	if (code)
		ck_assert_msg(!strcmp(err_code(r), code), "line %d: code %s, want %s: %s", line,
			      err_code(r), code, r->body);
}

#define EXPECT(r, st, code) expect(&(r), (st), (code), __LINE__)

/* lease_until_ms of the first result of a start or heartbeat reply; 0
 * when it has none. */
static long long reply_lease(const hresp *r)
{
	json_t *j = js(r);
	json_t *x =
		json_object_get(json_array_get(json_object_get(j, "results"), 0), "lease_until_ms");
	long long v = json_is_integer(x) ? (long long)json_integer_value(x) : 0;
	json_decref(j);
	return v;
}

/* The lease of job id as GET /v1/jobs/{id} shows it. */
static long long job_lease(const char *token, long long id)
{
	char path[64];
	snprintf(path, sizeof(path), "/v1/jobs/%lld", id);
	hresp r = call("GET", path, token, NULL);
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	json_t *x = json_object_get(j, "lease_until_ms");
	ck_assert_msg(json_is_integer(x), "no lease in %s", r.body);
	long long v = (long long)json_integer_value(x);
	json_decref(j);
	return v;
}

static long long live(const char *where)
{
	char sql[512];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs WHERE %s", where);
	return testdb_sum(&t, sql);
}

/* Enqueues n jobs of type through the daemon; returns their ids in order. */
static void enqueue(const char *type, int n, const char *keyprefix, int64_t *ids)
{
	sq_buf b;
	sq_buf_init(&b);
	sq_buf_puts(&b, "{\"jobs\":[");
	for (int i = 0; i < n; i++) {
		if (keyprefix)
			sq_buf_printf(&b,
				      "%s{\"type\":\"%s\",\"key\":\"%s%d\",\"params\":{\"i\":%d}}",
				      i ? "," : "", type, keyprefix, i, i);
		else
			sq_buf_printf(&b, "%s{\"type\":\"%s\",\"params\":{\"i\":%d}}", i ? "," : "",
				      type, i);
	}
	sq_buf_puts(&b, "]}");
	hresp r = call("POST", "/v1/jobs", tok_producer, b.data);
	sq_buf_free(&b);
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	json_t *res = json_object_get(j, "results");
	ck_assert_int_eq((int)json_array_size(res), n);
	for (int i = 0; i < n; i++) {
		json_t *x = json_array_get(res, (size_t)i);
		ck_assert_str_eq(json_string_value(json_object_get(x, "outcome")), "inserted");
		if (ids)
			ids[i] = json_integer_value(json_object_get(x, "id"));
	}
	json_decref(j);
}

/* The body of a result call for the jobs of a claim reply. */
static char *fence_body(json_t *jobs, const char *extra)
{
	sq_buf b;
	sq_buf_init(&b);
	sq_buf_puts(&b, "{\"jobs\":[");
	for (size_t i = 0; i < json_array_size(jobs); i++) {
		json_t *x = json_array_get(jobs, i);
		sq_buf_printf(&b, "%s{\"id\":%lld,\"attempt\":%lld,\"worker\":\"%s\"%s}",
			      i ? "," : "", (long long)json_integer_value(json_object_get(x, "id")),
			      (long long)json_integer_value(json_object_get(x, "attempt")),
			      json_string_value(json_object_get(x, "worker")), extra ? extra : "");
	}
	sq_buf_puts(&b, "]}");
	return b.data;
}

static long long metric(const char *name)
{
	hresp r = call("GET", "/metrics", tok_admin, NULL);
	ck_assert_int_eq(r.status, 200);
	char want[128];
	snprintf(want, sizeof(want), "\n%s ", name);
	const char *p = strstr(r.body, want);
	ck_assert_msg(p != NULL, "no metric %s in /metrics", name);
	long long v = atoll(p + strlen(want));
	return v;
}

/* ---- the tests ---------------------------------------------------------- */

/* Every endpoint once, with its error statuses. */
START_TEST(every_endpoint)
{
	start_all("sq_http_api", NULL);
	hresp r;

	r = call("GET", "/healthz", NULL, NULL);
	EXPECT(r, 200, NULL);
	r = call("GET", "/nowhere", tok_admin, NULL);
	EXPECT(r, 404, "not_found");
	r = call("GET", "/v1/claim", tok_worker, NULL);
	EXPECT(r, 405, "method_not_allowed");
	ck_assert_msg(strcasestr(r.head, "\r\nAllow: POST\r\n"), "%s", r.head);
	r = call("POST", "/v1/jobs/5", tok_admin, NULL);
	EXPECT(r, 405, "method_not_allowed");
	ck_assert_msg(strcasestr(r.head, "\r\nAllow: GET\r\n"), "%s", r.head);
	r = call("DELETE", "/v1/jobs/5", tok_admin, NULL);
	EXPECT(r, 405, "method_not_allowed");

	/* enqueue: bad input is refused whole, nothing written */
	r = call("POST", "/v1/jobs", tok_producer, "{\"jobs\":[{\"type\":\"a\"},");
	EXPECT(r, 400, "bad_json");
	r = call("POST", "/v1/jobs", tok_producer,
		 "{\"jobs\":[{\"type\":\"a\"},{\"type\":\"nope\"}]}");
	EXPECT(r, 400, "bad_job");
	ck_assert_msg(strstr(r.body, "job 1") != NULL, "the message names the job: %s", r.body);
	r = call("POST", "/v1/jobs", tok_producer,
		 "{\"jobs\":[{\"type\":\"a\",\"priority\":\"x\"}]}");
	EXPECT(r, 400, "bad_job");
	ck_assert_msg(strstr(r.body, "job 0: \\\"priority\\\" must be an integer in "
				     "-1000000..1000000"),
		      "the message names the field and what it takes: %s", r.body);
	r = call("POST", "/v1/jobs", tok_producer, "{\"jobs\":[{\"type\":\"a\",\"prio\":1}]}");
	EXPECT(r, 400, "bad_job");
	ck_assert_msg(strstr(r.body, "job 0: unknown field \\\"prio\\\"; a job's fields are"),
		      "the message names the unknown field: %s", r.body);
	r = call("POST", "/v1/jobs", tok_producer, "{\"jobs\":[]}");
	EXPECT(r, 400, "bad_request");
	/* a field given twice: refused, as in every other body (and the first
	 * value is not kept aside meanwhile) */
	r = call("POST", "/v1/jobs", tok_producer,
		 "{\"jobs\":[{\"type\":\"a\",\"params\":{\"x\":1},\"params\":{}}]}");
	EXPECT(r, 400, "bad_json");
	ck_assert_msg(strstr(r.body, "job 0: field \\\"params\\\" is given twice") != NULL,
		      "the message names the job and the field: %s", r.body);
	r = call("POST", "/v1/jobs", tok_producer,
		 "{\"jobs\":[{\"type\":\"a\"}],\"jobs\":[{\"type\":\"b\"}]}");
	EXPECT(r, 400, "bad_json");
	/* an error that quotes a field name cut inside a character is still
	 * UTF-8 (js() parses every body with jansson, which refuses it else) */
	r = call("POST", "/v1/jobs", tok_producer,
		 "{\"jobs\":[{\"type\":\"a\",\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		 "xxxxxxxxxxxx\xc3\xa9\":1}]}");
	EXPECT(r, 400, "bad_job");
	ck_assert_int_eq(live("true"), 0);

	/* enqueue with every dedup outcome this type has: inserted, duplicate;
	 * params keep their exact numbers */
	r = call("POST", "/v1/jobs", tok_producer,
		 "{\"jobs\":[{\"type\":\"a\",\"key\":\"k1\",\"params\":{\"x\":0.1,"
		 "\"big\":" BIG "}},{\"type\":\"a\",\"key\":\"k1\"},"
		 "{\"type\":\"b\",\"priority\":5,\"max_attempts\":1}]}");
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	json_t *res = json_object_get(j, "results");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(res, 0), "outcome")),
			 "inserted");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(res, 1), "outcome")),
			 "duplicate");
	int64_t id_a = json_integer_value(json_object_get(json_array_get(res, 0), "id"));
	int64_t id_b = json_integer_value(json_object_get(json_array_get(res, 2), "id"));
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(res, 1), "id")), id_a);
	json_decref(j);
	ck_assert_int_eq(live("status = 'ready'"), 2);
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs WHERE id = %lld AND params->>'big' = "
		 "'" BIG "' AND params->>'x' = '0.1'",
		 (long long)id_a);
	ck_assert_int_eq(testdb_sum(&t, sql), 1);

	/* get a job */
	char path[64];
	snprintf(path, sizeof(path), "/v1/jobs/%lld", (long long)id_a);
	r = call("GET", path, tok_producer, NULL);
	EXPECT(r, 200, NULL);
	/* (jansson cannot hold the 30-digit number: looked at as text) */
	ck_assert_msg(strstr(r.body, "\"status\":\"ready\"") && strstr(r.body, "\"key\":\"k1\"") &&
			      strstr(r.body, BIG),
		      "%s", r.body);
	r = call("GET", "/v1/jobs/99999999", tok_producer, NULL);
	EXPECT(r, 404, "not_found");
	r = call("GET", "/v1/jobs/abc", tok_producer, NULL);
	EXPECT(r, 404, "not_found");

	/* claim: bad requests */
	r = call("POST", "/v1/claim", tok_worker, "{\"types\":[{\"type\":\"a\",\"limit\":1}]}");
	EXPECT(r, 400, "bad_request");
	r = call("POST", "/v1/claim", tok_worker,
		 "{\"worker\":\"w\",\"types\":[{\"type\":\"zzz\",\"limit\":1}]}");
	EXPECT(r, 400, "bad_request");
	r = call("POST", "/v1/claim", tok_worker,
		 "{\"worker\":\"w\",\"types\":[{\"type\":\"a\",\"limit\":0}]}");
	EXPECT(r, 400, "bad_request");

	/* claim without start, then start, heartbeat, complete */
	r = call("POST", "/v1/claim", tok_worker,
		 "{\"worker\":\"w1\",\"types\":[{\"type\":\"a\",\"limit\":5}],\"start\":false}");
	EXPECT(r, 200, NULL);
	j = js(&r);
	json_t *jobs = json_object_get(j, "jobs");
	ck_assert_int_eq((int)json_array_size(jobs), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(jobs, 0), "status")),
			 "starting");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(jobs, 0), "worker")),
			 D.worker_id);
	ck_assert_int_eq(live("status = 'starting'"), 1);
	char *fb = fence_body(jobs, NULL);
	long long started_id =
		(long long)json_integer_value(json_object_get(json_array_get(jobs, 0), "id"));
	r = call("POST", "/v1/jobs/start", tok_worker, fb);
	EXPECT(r, 200, NULL);
	ck_assert_int_eq(live("status = 'running'"), 1);
	/* start and heartbeat answer the lease they set, as the job shows it */
	long long lease1 = reply_lease(&r);
	ck_assert_msg(lease1 > 0, "no lease in the start's reply: %s", r.body);
	ck_assert_int_eq(lease1, job_lease(tok_producer, started_id));
	r = call("POST", "/v1/jobs/heartbeat", tok_worker, fb);
	EXPECT(r, 200, NULL);
	long long lease2 = reply_lease(&r);
	ck_assert_msg(lease2 >= lease1, "heartbeat lease %lld before the start's %lld: %s", lease2,
		      lease1, r.body);
	ck_assert_int_eq(lease2, job_lease(tok_producer, started_id));
	r = call("POST", "/v1/jobs/complete", tok_worker, fb);
	EXPECT(r, 200, NULL);
	ck_assert_int_eq(reply_lease(&r), 0);
	ck_assert_int_eq(live("task = 'a'"), 0);
	/* a second complete: the job is gone */
	r = call("POST", "/v1/jobs/complete", tok_worker, fb);
	EXPECT(r, 409, "lost");
	ck_assert_msg(strstr(r.body, "\"not_found\"") != NULL, "%s", r.body);
	free(fb);
	json_decref(j);

	/* a wrong attempt is lost, and changes nothing */
	r = call("POST", "/v1/claim", tok_worker,
		 "{\"worker\":\"w1\",\"types\":[{\"type\":\"b\",\"limit\":5}]}");
	EXPECT(r, 200, NULL);
	j = js(&r);
	jobs = json_object_get(j, "jobs");
	ck_assert_int_eq((int)json_array_size(jobs), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(jobs, 0), "id")), id_b);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(jobs, 0), "status")),
			 "running");
	char bad[256];
	snprintf(bad, sizeof(bad), "{\"jobs\":[{\"id\":%lld,\"attempt\":99,\"worker\":\"%s\"}]}",
		 (long long)id_b, D.worker_id);
	r = call("POST", "/v1/jobs/complete", tok_worker, bad);
	EXPECT(r, 409, "lost");
	ck_assert_int_eq(live("status = 'running'"), 1);
	r = call("POST", "/v1/jobs/complete", tok_worker, "{\"jobs\":[{\"id\":1}]}");
	EXPECT(r, 400, "bad_request");
	r = call("POST", "/v1/jobs/complete", tok_worker,
		 "{\"jobs\":[{\"id\":1,\"attempt\":1,\"worker\":\"\"}]}");
	EXPECT(r, 400, "bad_request");
	/* each worker name costs a call on the shards: at most 16 a request,
	 * and the job still held is left alone */
	{
		sq_buf many;
		sq_buf_init(&many);
		sq_buf_printf(&many, "{\"jobs\":[{\"id\":%lld,\"attempt\":%lld,\"worker\":\"%s\"}",
			      (long long)id_b,
			      (long long)json_integer_value(
				      json_object_get(json_array_get(jobs, 0), "attempt")),
			      D.worker_id);
		for (int i = 0; i < 16; i++)
			sq_buf_printf(&many, ",{\"id\":%d,\"attempt\":1,\"worker\":\"w%d\"}", i + 1,
				      i);
		sq_buf_puts(&many, "]}");
		r = call("POST", "/v1/jobs/complete", tok_worker, many.data);
		sq_buf_free(&many);
		EXPECT(r, 400, "bad_request");
		ck_assert_msg(strstr(r.body, "job 16: more than 16 distinct") != NULL,
			      "the message names the job and the limit: %s", r.body);
		ck_assert_int_eq(live("status = 'running'"), 1);
	}
	/* fail for good (max_attempts 1): failed, with its error kept */
	fb = fence_body(jobs, ",\"error\":\"disk full\"");
	r = call("POST", "/v1/jobs/fail", tok_worker, fb);
	EXPECT(r, 200, NULL);
	free(fb);
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/jobs/%lld", (long long)id_b);
	r = call("GET", path, tok_worker, NULL);
	EXPECT(r, 200, NULL);
	j = js(&r);
	ck_assert_str_eq(json_string_value(json_object_get(j, "status")), "failed");
	json_decref(j);

	/* release: back to ready, no try counted */
	int64_t ids[3];
	enqueue("b", 3, "rel", ids);
	r = call("POST", "/v1/claim", tok_worker,
		 "{\"worker\":\"w1\",\"types\":[{\"type\":\"b\",\"limit\":3}],\"start\":false}");
	EXPECT(r, 200, NULL);
	j = js(&r);
	jobs = json_object_get(j, "jobs");
	ck_assert_int_eq((int)json_array_size(jobs), 3);
	fb = fence_body(jobs, NULL);
	r = call("POST", "/v1/jobs/release", tok_worker, fb);
	EXPECT(r, 200, NULL);
	free(fb);
	json_decref(j);
	ck_assert_int_eq(live("task = 'b' AND status = 'ready'"), 3);
	/* jobs claimed straight to running, not begun, go back too */
	r = call("POST", "/v1/claim", tok_worker,
		 "{\"worker\":\"w1\",\"types\":[{\"type\":\"b\",\"limit\":2}]}");
	EXPECT(r, 200, NULL);
	j = js(&r);
	jobs = json_object_get(j, "jobs");
	ck_assert_int_eq((int)json_array_size(jobs), 2);
	ck_assert_int_eq(live("task = 'b' AND status = 'running'"), 2);
	fb = fence_body(jobs, NULL);
	r = call("POST", "/v1/jobs/release", tok_worker, fb);
	EXPECT(r, 200, NULL);
	free(fb);
	json_decref(j);
	ck_assert_int_eq(live("task = 'b' AND status = 'ready' AND attempt - attempt_base = 0"), 3);

	/* cancel by ids and by key */
	char body[256];
	snprintf(body, sizeof(body), "{\"ids\":[%lld,%lld,77777777]}", (long long)ids[0],
		 (long long)ids[1]);
	r = call("POST", "/v1/jobs/cancel", tok_producer, body);
	EXPECT(r, 200, NULL);
	ck_assert_msg(strstr(r.body, "\"not_found\"") != NULL, "%s", r.body);
	r = call("POST", "/v1/jobs/cancel", tok_producer, "{\"type\":\"b\",\"key\":\"rel2\"}");
	EXPECT(r, 200, NULL);
	r = call("POST", "/v1/jobs/cancel", tok_producer, "{\"type\":\"b\",\"key\":\"rel2\"}");
	EXPECT(r, 404, "not_found");
	ck_assert_int_eq(live("task = 'b' AND status IN ('ready', 'starting', 'running')"), 0);

	/* stats agree with the shards; the map covers every partition */
	enqueue("a", 7, NULL, NULL);
	r = call("GET", "/v1/stats", tok_admin, NULL);
	EXPECT(r, 200, NULL);
	j = js(&r);
	long long ready = 0;
	json_t *rows = json_object_get(j, "types");
	for (size_t i = 0; i < json_array_size(rows); i++)
		if (!strcmp(json_string_value(json_object_get(json_array_get(rows, i), "type")),
			    "a"))
			ready += json_integer_value(
				json_object_get(json_array_get(rows, i), "ready"));
	ck_assert_int_eq(ready, live("task = 'a' AND status = 'ready'"));
	ck_assert_int_eq(ready, 7);
	json_decref(j);
	r = call("GET", "/v1/map", tok_admin, NULL);
	EXPECT(r, 200, NULL);
	j = js(&r);
	long long parts = 0;
	json_t *sh = json_object_get(j, "shards");
	for (size_t i = 0; i < json_array_size(sh); i++)
		parts += json_integer_value(json_object_get(json_array_get(sh, i), "partitions"));
	ck_assert_int_eq(parts, 64);
	ck_assert_int_eq((int)json_array_size(sh), 2);
	json_decref(j);
	r = call("GET", "/v1/moves", tok_admin, NULL);
	EXPECT(r, 200, NULL);
	ck_assert_str_eq(r.body, "{\"moves\":[]}");
	r = call("GET", "/metrics", tok_admin, NULL);
	EXPECT(r, 200, NULL);
	ck_assert_msg(strstr(r.body, "# TYPE shardqd_claim_statements_total counter") != NULL, "%s",
		      r.body);
	ck_assert_msg(strstr(r.head, "text/plain") != NULL, "%s", r.head);
	ck_assert_msg(strstr(r.body, "(null)") == NULL, "a metric without its name:\n%s", r.body);
	stop_all();
}
END_TEST

/* Each scope only where it belongs; a missing or unknown token is 401. */
START_TEST(auth_and_scopes)
{
	start_all("sq_http_auth", NULL);
	static const struct {
		const char *method, *path;
		const char *allowed; /* w, p, a */
	} eps[] = {
		{"POST", "/v1/jobs", "p"},
		{"POST", "/v1/claim", "w"},
		{"POST", "/v1/jobs/start", "w"},
		{"POST", "/v1/jobs/heartbeat", "w"},
		{"POST", "/v1/jobs/complete", "w"},
		{"POST", "/v1/jobs/fail", "w"},
		{"POST", "/v1/jobs/release", "w"},
		{"POST", "/v1/jobs/cancel", "pa"},
		{"GET", "/v1/jobs/1", "wpa"},
		{"GET", "/v1/stats", "a"},
		{"GET", "/v1/map", "a"},
		{"GET", "/v1/moves", "a"},
		{"GET", "/metrics", "a"},
	};
	const char *toks[3] = {tok_worker, tok_producer, tok_admin};
	const char scope[3] = {'w', 'p', 'a'};
	for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
		hresp r = call(eps[i].method, eps[i].path, NULL, "{}");
		ck_assert_msg(r.status == 401, "%s %s without a token: %d", eps[i].method,
			      eps[i].path, r.status);
		ck_assert_str_eq(err_code(&r), "unauthorized");
		ck_assert_msg(strcasestr(r.head, "WWW-Authenticate: Bearer") != NULL, "%s", r.head);
		r = call(eps[i].method, eps[i].path, "not-a-known-token", "{}");
		ck_assert_msg(r.status == 401, "%s %s with a bad token: %d", eps[i].method,
			      eps[i].path, r.status);
		for (int k = 0; k < 3; k++) {
			r = call(eps[i].method, eps[i].path, toks[k], "{}");
			int allowed = strchr(eps[i].allowed, scope[k]) != NULL;
			if (allowed)
				ck_assert_msg(r.status != 401 && r.status != 403,
					      "%s %s with scope %c: %d %s", eps[i].method,
					      eps[i].path, scope[k], r.status, r.body);
			else
				ck_assert_msg(r.status == 403 && !strcmp(err_code(&r), "forbidden"),
					      "%s %s with scope %c: %d %s (want 403)",
					      eps[i].method, eps[i].path, scope[k], r.status,
					      r.body);
			/* no token text in any answer */
			ck_assert(strstr(r.body, toks[k]) == NULL);
		}
	}
	/* a malformed header */
	int fd = hc_connect(D.port);
	const char *req =
		"GET /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Zm9vOmJhcg==\r\n\r\n";
	ck_assert_int_eq(hc_send_bytes(fd, req, strlen(req)), 0);
	hresp r;
	ck_assert_int_eq(hc_recv(fd, &r), 0);
	keep(&r);
	close(fd);
	EXPECT(r, 401, "unauthorized");
	/* the log holds no token and no DSN */
	const char *out = test_file_text(D.out);
	ck_assert(strstr(out, tok_admin) == NULL && strstr(out, "not-a-known-token") == NULL);
	ck_assert(strstr(out, "dbname=") == NULL);

	/* SIGHUP reloads the tokens: a new one works, a removed one is refused */
	char hn[160], hw[160];
	test_hash_token("new-token-0123456789abcdef", hn, sizeof(hn));
	test_hash_token(tok_worker, hw, sizeof(hw));
	char *ini = testdb_ini(&t, NULL, "\n[connection]\napplication_name = sqd\n");
	FILE *f = fopen(ini_path, "w");
	fprintf(f, "%s\n[daemon]\nlisten = 127.0.0.1:0\n[token n]\n%s\nscopes = admin\n", ini, hn);
	fclose(f);
	free(ini);
	kill(D.pid, SIGHUP);
	double since = test_now_s();
	for (;;) {
		r = call("GET", "/v1/stats", "new-token-0123456789abcdef", NULL);
		if (r.status == 200)
			break;
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "the new token is still refused %.0fs after SIGHUP: %d; log:\n%s",
			      STALL_S, r.status, test_file_text(D.out));
		usleep(50000);
	}
	r = call("GET", "/v1/stats", tok_admin, NULL);
	EXPECT(r, 401, "unauthorized");
	stop_all();
}
END_TEST

/* A 100 MB body is refused with 413 before it is read; headers over the
 * limit too; a client that trickles its request is dropped. */
START_TEST(limits_and_slow_clients)
{
	start_all("sq_http_limits", "max_body = 64KB\nrequest_timeout = 2s\nclaim_wait_max = 1s\n"
				    "max_connections = 4\n");
	/* four keep-alive connections are held; a fifth is refused (503) and
	 * closed, and once one of the four goes, a new one is served */
	int held[4];
	for (int i = 0; i < 4; i++) {
		held[i] = hc_connect(D.port);
		ck_assert_int_eq(hc_send(held[i], "GET", "/v1/map", tok_admin, NULL), 0);
		hresp hr;
		ck_assert_int_eq(hc_recv(held[i], &hr), 0);
		keep(&hr);
		EXPECT(hr, 200, NULL);
	}
	{
		/* refused: 503 with Connection: close, or (on a machine so slow
		 * that its request is not read within a second) shut unanswered */
		int fx = hc_connect(D.port);
		hresp hr;
		ck_assert_int_eq(hc_send(fx, "GET", "/v1/map", tok_admin, NULL), 0);
		if (hc_recv(fx, &hr) == 0) {
			keep(&hr);
			EXPECT(hr, 503, "unavailable");
			ck_assert_msg(strcasestr(hr.head, "Connection: close") != NULL, "%s",
				      hr.head);
		} else {
			printf("the fifth connection was shut before its request was read\n");
		}
		close(fx);
	}
	for (int i = 0; i < 4; i++)
		close(held[i]);
	double since0 = test_now_s();
	for (;;) {
		/* until the daemon has seen the four close (its sweep, every 250
		 * ms), a new connection is still over the limit: answered 503, or
		 * shut without an answer if the sweep comes before its request */
		hresp hr = {0};
		int fx = hc_connect(D.port);
		int got = hc_send(fx, "GET", "/v1/map", tok_admin, NULL) == 0 &&
			  hc_recv(fx, &hr) == 0;
		close(fx);
		if (got)
			keep(&hr);
		if (got && hr.status == 200)
			break;
		ck_assert_msg(test_now_s() - since0 < STALL_S,
			      "still refused %.0fs after the held connections closed: %s", STALL_S,
			      got ? hr.body : "(connection shut)");
		usleep(100000);
	}
	int fd = hc_connect(D.port);
	char head[512];
	int n = snprintf(head, sizeof(head),
			 "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
			 "Content-Length: 104857600\r\n\r\n",
			 tok_producer);
	ck_assert_int_eq(hc_send_bytes(fd, head, (size_t)n), 0);
	/* send the body while the daemon lets us; it answers 413 and closes
	 * long before 100 MB */
	static char chunk[65536];
	memset(chunk, 'x', sizeof(chunk));
	size_t sent = 0;
	fcntl(fd, F_SETFL, O_NONBLOCK);
	double since = test_now_s();
	while (sent < 104857600) {
		ssize_t w = send(fd, chunk, sizeof(chunk), MSG_NOSIGNAL);
		if (w > 0) {
			sent += (size_t)w;
			since = test_now_s();
			continue;
		}
		if (w < 0 && errno != EAGAIN)
			break; /* closed on us */
		struct pollfd p = {fd, POLLOUT | POLLIN, 0};
		poll(&p, 1, 200);
		if (p.revents & (POLLIN | POLLHUP | POLLERR))
			break;
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "the daemon neither read nor refused");
	}
	fcntl(fd, F_SETFL, 0);
	ck_assert_msg(sent < 104857600 / 4, "the daemon read %zu bytes of a 100 MB body", sent);
	hresp r;
	ck_assert_msg(hc_recv(fd, &r) == 0, "no reply to a 100 MB body (sent %zu bytes)", sent);
	keep(&r);
	close(fd);
	ck_assert_int_eq(r.status, 413);
	printf("100 MB body: 413 after %zu bytes sent\n", sent);

	/* headers over max_headers (16KB) */
	fd = hc_connect(D.port);
	sq_buf hb;
	sq_buf_init(&hb);
	sq_buf_puts(&hb, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
	for (int i = 0; i < 400; i++)
		sq_buf_printf(&hb, "X-Pad-%d: %0100d\r\n", i, 0);
	sq_buf_puts(&hb, "\r\n");
	hc_send_bytes(fd, hb.data, hb.len);
	sq_buf_free(&hb);
	if (hc_recv(fd, &r) == 0 && (keep(&r), 1))
		ck_assert_msg(r.status == 413 || r.status == 400, "oversized headers: %d",
			      r.status);
	close(fd);

	/* slow loris: a header line every 300 ms, never the end */
	fd = hc_connect(D.port);
	double t0 = test_now_s();
	int dropped = 0;
	hc_send_bytes(fd, "GET /healthz HTTP/1.1\r\n", 23);
	while (test_now_s() - t0 < 2 + STALL_S) {
		if (hc_send_bytes(fd, "X-Slow: 1\r\n", 11)) {
			dropped = 1;
			break;
		}
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 300) > 0) {
			char c;
			if (recv(fd, &c, 1, MSG_DONTWAIT) <= 0) {
				dropped = 1;
				break;
			}
		}
	}
	close(fd);
	ck_assert_msg(dropped, "a client trickling its headers was not dropped in %.0fs",
		      test_now_s() - t0);
	printf("slow client dropped after %.1fs (request_timeout 2s)\n", test_now_s() - t0);
	ck_assert_int_ge(metric("shardqd_connections_dropped_total"), 1);
	/* the daemon still serves */
	r = call("GET", "/healthz", NULL, NULL);
	EXPECT(r, 200, NULL);
	stop_all();
}
END_TEST

/* All a connection sends until it closes (the test fails if it does not
 * within the stall time). */
static char *recv_to_end(int fd)
{
	struct timeval tv = {(time_t)STALL_S, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	sq_buf b;
	sq_buf_init(&b);
	char chunk[4096];
	ssize_t n;
	while ((n = recv(fd, chunk, sizeof(chunk), 0)) > 0)
		sq_buf_append(&b, chunk, (size_t)n);
	ck_assert_msg(n == 0, "the connection did not close after its replies: %s (%zu bytes: %s)",
		      strerror(errno), b.len, b.data ? b.data : "");
	sq_buf_puts(&b, "");
	return b.data;
}

/* bytes on a fresh connection: the one reply, after which the connection
 * must close. */
static hresp raw_once(const char *bytes, size_t n)
{
	int fd = hc_connect(D.port);
	ck_assert_int_eq(hc_send_bytes(fd, bytes, n), 0);
	char *all = recv_to_end(fd);
	close(fd);
	hresp r = {0};
	char *eoh = strstr(all, "\r\n\r\n");
	ck_assert_msg(eoh != NULL, "no reply to %.80s: '%s'", bytes, all);
	snprintf(r.head, sizeof(r.head), "%.*s", (int)(eoh - all), all);
	r.status = atoi(strchr(all, ' ') + 1);
	r.body = strdup(eoh + 4);
	r.len = strlen(r.body);
	free(all);
	keep(&r);
	return r;
}

/* (Connection: close, so that a 200 ends its connection too) */
#define CHUNKED_HEAD                                                        \
	"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n" \
	"Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n"

/* A chunked request whose chunks follow. */
static hresp chunked(const char *chunks)
{
	sq_buf b;
	sq_buf_init(&b);
	sq_buf_printf(&b, CHUNKED_HEAD "%s", tok_producer, chunks);
	hresp r = raw_once(b.data, b.len);
	sq_buf_free(&b);
	return r;
}

static void expect_bad_chunk(const hresp *r, const char *says, int line)
{
	expect(r, 400, "bad_request", line);
	ck_assert_msg(strcasestr(r->head, "Content-Type: application/json") != NULL, "line %d: %s",
		      line, r->head);
	ck_assert_msg(strcasestr(r->head, "Connection: close") != NULL, "line %d: %s", line,
		      r->head);
	ck_assert_msg(strstr(r->body, says) != NULL, "line %d: '%s' does not say '%s'", line,
		      r->body, says);
	ck_assert_msg(strstr(r->body, "send a valid chunked body or a Content-Length") != NULL,
		      "line %d: %s", line, r->body);
}

/* A malformed chunked body gets shardqd's JSON 400, not libevent's HTML
 * 413 (issue 43): alone on its connection, or pipelined behind a request
 * whose reply goes first; a valid chunked body is taken, and one over
 * max_body still gets 413. */
START_TEST(a_malformed_chunked_body_gets_a_json_400)
{
	start_all("sq_http_chunked", "max_body = 64KB\n");
	hresp r = chunked("zz\r\n");
	expect_bad_chunk(&r, "the chunk size 'zz' is not hexadecimal", __LINE__);
	r = chunked("9\r\n{\"jobs\":[XY\r\n");
	expect_bad_chunk(&r, "the chunk of 9 bytes is not followed by CRLF but by 'XY'", __LINE__);
	r = chunked("3;x=1\r\n{\"j\r\n0\r\n\r\n");
	expect_bad_chunk(&r, "chunk extension", __LINE__);
	r = chunked("2\r\n{}\r\n0\r\nno colon\r\n\r\n");
	expect_bad_chunk(&r, "the trailer line 'no colon' has no ':'", __LINE__);
	/* a valid chunked enqueue: lower and upper case hex, a trailer */
	r = chunked("a\r\n{\"jobs\":[{\r\n1D\r\n\"type\":\"a\",\"params\":{\"i\":1}},\r\n"
		    "16\r\n{\"type\":\"a\"}]}        \r\n0\r\nX-Sum: 1\r\n\r\n");
	EXPECT(r, 200, NULL);
	ck_assert_int_eq(live("task = 'a'"), 2);
	/* over max_body (64 KB): libevent's 413, as before */
	{
		sq_buf b;
		sq_buf_init(&b);
		sq_buf_printf(&b, CHUNKED_HEAD, tok_producer);
		for (int i = 0; i < 3; i++) {
			sq_buf_puts(&b, "8000\r\n");
			for (int k = 0; k < 0x8000; k++)
				sq_buf_append(&b, "x", 1);
			sq_buf_puts(&b, "\r\n");
		}
		int fd = hc_connect(D.port);
		hc_send_bytes(fd, b.data, b.len); /* the daemon may close before the end */
		sq_buf_free(&b);
		hresp big;
		ck_assert_msg(hc_recv(fd, &big) == 0, "no reply to a chunked body over max_body");
		keep(&big);
		close(fd);
		ck_assert_int_eq(big.status, 413);
	}
	/* pipelined on one connection: an enqueue, then a malformed chunked
	 * body; the enqueue's reply comes first, then the 400, then the end */
	{
		const char *job = "{\"jobs\":[{\"type\":\"b\",\"params\":{\"n\":1}}]}";
		sq_buf b;
		sq_buf_init(&b);
		sq_buf_printf(&b,
			      "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
			      "Content-Length: %zu\r\n\r\n%s" CHUNKED_HEAD "2\r\n{}\r\nzz\r\n",
			      tok_producer, strlen(job), job, tok_producer);
		int fd = hc_connect(D.port);
		ck_assert_int_eq(hc_send_bytes(fd, b.data, b.len), 0);
		sq_buf_free(&b);
		char *all = recv_to_end(fd);
		close(fd);
		char *ok = strstr(all, "HTTP/1.1 200"), *no = strstr(all, "HTTP/1.1 400");
		ck_assert_msg(ok && no && ok < no, "not the 200, then the 400: %s", all);
		ck_assert_msg(strstr(ok, "\"results\"") != NULL && strstr(ok, "\"results\"") < no,
			      "%s", all);
		ck_assert_msg(strstr(no, "\"bad_request\"") && strstr(no, "'zz'"), "%s", all);
		free(all);
		ck_assert_int_eq(live("task = 'b'"), 1);
	}
	/* the daemon still serves */
	r = call("GET", "/healthz", NULL, NULL);
	EXPECT(r, 200, NULL);
	stop_all();
}
END_TEST

/* Connections the daemon holds on a shard, counted by the shard. The
 * maintenance pass's connection (sqd-maintain) is left out: it comes at a
 * random time, for a moment, and is not one the daemon holds. */
static long long daemon_conns(int shard)
{
	return testdb_scalar(
		&t, shard,
		"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
		"AND application_name LIKE 'sqd%' AND application_name <> 'sqd-maintain'");
}

/* Those connections, one line each, for a failure's message. */
static void daemon_conns_text(int shard, char *out, size_t len)
{
	PGconn *pc = testdb_pg(&t, shard);
	PGresult *r = PQexec(
		pc,
		"SELECT string_agg(application_name || ' ' || coalesce(state, '-') || ' since ' "
		"|| to_char(backend_start, 'HH24:MI:SS.MS') || ': ' || left(query, 60), E'\\n')"
		" FROM pg_stat_activity WHERE datname = current_database()"
		" AND application_name LIKE 'sqd%'");
	snprintf(out, len, "%s",
		 PQresultStatus(r) == PGRES_TUPLES_OK && !PQgetisnull(r, 0, 0)
			 ? PQgetvalue(r, 0, 0)
			 : PQerrorMessage(pc));
	PQclear(r);
	PQfinish(pc);
}

/* The daemon's connections per shard once their count has stopped moving
 * (the same for 5 readings 0.1 s apart): a connection that comes for a
 * moment is not one the daemon holds. */
static void stable_conns(long long out[2])
{
	double since = test_now_s();
	int same = 0;
	out[0] = daemon_conns(0), out[1] = daemon_conns(1);
	while (same < 5) {
		usleep(100000);
		long long a = daemon_conns(0), b = daemon_conns(1);
		same = a == out[0] && b == out[1] ? same + 1 : 0;
		out[0] = a, out[1] = b;
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "the daemon's connections kept changing for %.0f s (now %lld/%lld)",
			      STALL_S, a, b);
	}
}

/* The same once it has served a claim: it says it listens before every
 * connection is up (a count taken at once was one short). */
static void settled_conns(long long out[2])
{
	hresp r = call("POST", "/v1/claim", tok_worker,
		       "{\"worker\":\"warm\",\"types\":[{\"type\":\"a\",\"limit\":1}],"
		       "\"wait_ms\":0}");
	ck_assert_msg(r.status == 200, "warm-up claim: HTTP %d", r.status);
	stable_conns(out);
}

/* 200 long-polling clients: the shards see the same few connections as
 * with none; enqueued jobs reach them, each at most its limit, none
 * twice; their claims share statements. */
START_TEST(many_long_polls_few_connections)
{
	start_all("sq_http_many", "claim_wait_max = 20s\n");
	enum { N = 200 };
	long long base[2];
	settled_conns(base);
	int fds[N];
	char body[256];
	for (int i = 0; i < N; i++) {
		fds[i] = hc_connect(D.port);
		snprintf(body, sizeof(body),
			 "{\"worker\":\"lp%d\",\"types\":[{\"type\":\"a\",\"limit\":%d}],"
			 "\"wait_ms\":15000}",
			 i, 1 + i % 3);
		ck_assert_int_eq(hc_send(fds[i], "POST", "/v1/claim", tok_worker, body), 0);
	}
	/* all 200 are waiting */
	double since = test_now_s();
	long long waiting;
	while ((waiting = metric("shardqd_claims_waiting")) < N) {
		ck_assert_msg(test_now_s() - since < STALL_S, "only %lld of %d claims waiting",
			      waiting, N);
		usleep(50000);
	}
	long long during[2];
	stable_conns(during);
	printf("daemon connections per shard: %lld/%lld idle, %lld/%lld with %d clients waiting\n",
	       base[0], base[1], during[0], during[1], N);
	for (int s = 0; s < 2; s++) {
		char conns[4096] = "";
		if (during[s] > base[s])
			daemon_conns_text(s, conns, sizeof(conns));
		ck_assert_msg(during[s] <= base[s],
			      "shard %d: %lld connections with %d clients, %lld "
			      "without; now:\n%s",
			      s, during[s], N, base[s], conns);
		/* threads (2) + the claimer + the enqueue lanes (4, [daemon]
		 * enqueue_in_flight's default), each a shard connection (and, on
		 * the meta shard, a meta one and its map listener), plus one
		 * LISTEN, and on the meta shard the meta watch's */
		ck_assert_msg(during[s] <= (2 + 1 + 4) * 3 + 1 + (s == 0),
			      "shard %d: %lld connections", s, during[s]);
	}
	long long stmts0 = metric("shardqd_claim_statements_total");
	/* as many jobs as the clients asked for in all: 67 x 1 + 67 x 2 + 66 x 3 */
	enum { NJ = 399 };
	int64_t ids[NJ];
	enqueue("a", NJ, NULL, ids);
	int got_total = 0;
	char *seen = calloc(NJ, 1);
	for (int i = 0; i < N; i++) {
		hresp r;
		ck_assert_msg(hc_recv(fds[i], &r) == 0, "client %d: no reply", i);
		close(fds[i]);
		EXPECT(r, 200, NULL);
		json_t *j = js(&r);
		json_t *jobs = json_object_get(j, "jobs");
		int got = (int)json_array_size(jobs);
		ck_assert_msg(got <= 1 + i % 3, "client %d asked for %d and got %d", i, 1 + i % 3,
			      got);
		for (int k = 0; k < got; k++) {
			int64_t id = json_integer_value(
				json_object_get(json_array_get(jobs, (size_t)k), "id"));
			int idx = -1;
			for (int q = 0; q < NJ; q++)
				if (ids[q] == id)
					idx = q;
			ck_assert_msg(idx >= 0, "client %d got job %lld, never enqueued", i,
				      (long long)id);
			ck_assert_msg(!seen[idx], "job %lld handed to two clients", (long long)id);
			seen[idx] = 1;
		}
		got_total += got;
		json_decref(j);
		free(r.body);
	}
	free(seen);
	long long stmts = metric("shardqd_claim_statements_total") - stmts0;
	printf("%d clients got %d jobs; %lld claim statements after the enqueue\n", N, got_total,
	       stmts);
	/* every job reached a client; none is left behind or held twice */
	ck_assert_int_eq(got_total, NJ);
	ck_assert_int_eq(live("status = 'running'"), NJ);
	/* one tick serves every waiting claim: a handful of statements, not one
	 * per client (a tick can run while the enqueue's two shards commit) */
	ck_assert_msg(stmts < N / 10, "%lld claim statements for %d waiting clients", stmts, N);
	stop_all();
}
END_TEST

/* Clients claim and complete until all is done: nothing handed out twice
 * while held, no client above its limit, every job completed once. */
typedef struct loop_arg {
	int port, limit, idx;
	long long got, completed, over_limit;
	int64_t *seen; /* ids this client got */
	size_t nseen, cap;
} loop_arg;

static atomic_int loop_stop;

static void *claim_loop(void *p)
{
	loop_arg *a = p;
	int fd = hc_connect(a->port);
	char body[256];
	snprintf(body, sizeof(body),
		 "{\"worker\":\"c%d\",\"types\":[{\"type\":\"a\",\"limit\":%d},{\"type\":\"b\","
		 "\"limit\":%d}],\"wait_ms\":200}",
		 a->idx, a->limit, a->limit);
	while (!atomic_load(&loop_stop)) {
		hresp r;
		if (hc_send(fd, "POST", "/v1/claim", tok_worker, body) || hc_recv(fd, &r)) {
			close(fd);
			fd = hc_connect(a->port);
			continue;
		}
		json_t *j = json_loads(r.body, 0, NULL);
		free(r.body);
		json_t *jobs = json_object_get(j, "jobs");
		size_t n = json_array_size(jobs);
		int na = 0, nb = 0;
		for (size_t i = 0; i < n; i++) {
			json_t *x = json_array_get(jobs, i);
			const char *ty = json_string_value(json_object_get(x, "type"));
			na += !strcmp(ty, "a");
			nb += !strcmp(ty, "b");
			if (a->nseen == a->cap) {
				a->cap = a->cap ? a->cap * 2 : 256;
				a->seen = realloc(a->seen, a->cap * sizeof(int64_t));
			}
			a->seen[a->nseen++] = json_integer_value(json_object_get(x, "id"));
		}
		if (na > a->limit || nb > a->limit)
			a->over_limit++;
		a->got += (long long)n;
		if (n) {
			char *fb = fence_body(jobs, NULL);
			if (hc_send(fd, "POST", "/v1/jobs/complete", tok_worker, fb) == 0 &&
			    hc_recv(fd, &r) == 0) {
				if (r.status == 200)
					a->completed += (long long)n;
				free(r.body);
			}
			free(fb);
		}
		json_decref(j);
	}
	close(fd);
	return NULL;
}

static long long remaining_live(void *arg)
{
	return live("true");
}

START_TEST(no_double_handout_and_limits)
{
	start_all("sq_http_loop", NULL);
	enum { NC = 16, NJ = 2000 };
	int64_t ids_a[NJ / 2], ids_b[NJ / 2];
	enqueue("a", NJ / 2, NULL, ids_a);
	enqueue("b", NJ / 2, "kb", ids_b);
	loop_arg args[NC];
	pthread_t th[NC];
	atomic_store(&loop_stop, 0);
	for (int i = 0; i < NC; i++) {
		memset(&args[i], 0, sizeof(args[i]));
		args[i].port = D.port;
		args[i].limit = 1 + i % 7;
		args[i].idx = i;
		pthread_create(&th[i], NULL, claim_loop, &args[i]);
	}
	long long left;
	int done = wait_progress(remaining_live, NULL, &left);
	atomic_store(&loop_stop, 1);
	for (int i = 0; i < NC; i++)
		pthread_join(th[i], NULL);
	char rep[2048];
	ck_assert_msg(done, "%lld jobs left after a stall of %.0fs:\n%s", left, STALL_S,
		      testdb_live_report(&t, rep, sizeof(rep)));
	long long got = 0, completed = 0;
	size_t total = 0;
	for (int i = 0; i < NC; i++) {
		ck_assert_msg(args[i].over_limit == 0, "client %d got more than its limit %d", i,
			      args[i].limit);
		got += args[i].got;
		completed += args[i].completed;
		total += args[i].nseen;
	}
	int64_t *all = malloc(total * sizeof(int64_t));
	size_t k = 0;
	for (int i = 0; i < NC; i++) {
		memcpy(all + k, args[i].seen, args[i].nseen * sizeof(int64_t));
		k += args[i].nseen;
		free(args[i].seen);
	}
	/* no lease ran out (5 min), so no job may come twice */
	for (size_t i = 0; i < total; i++)
		for (size_t q = i + 1; q < total; q++)
			ck_assert_msg(all[i] != all[q], "job %lld handed out twice",
				      (long long)all[i]);
	free(all);
	ck_assert_int_eq(got, NJ);
	ck_assert_int_eq(completed, NJ);
	long long stm = metric("shardqd_claim_statements_total"),
		  req = metric("shardqd_claim_requests_total");
	printf("%d clients: %lld jobs, %lld claim requests in %lld statements (%.2f per "
	       "statement)\n",
	       NC, got, req, stm, stm ? (double)req / (double)stm : 0.0);
	stop_all();
}
END_TEST

/* A client that hangs up while its claim waits loses nothing: a job
 * enqueued after that stays ready for others. */
START_TEST(disconnect_mid_claim_loses_nothing)
{
	start_all("sq_http_gone", "claim_wait_max = 20s\n");
	int fd = hc_connect(D.port);
	ck_assert_int_eq(hc_send(fd, "POST", "/v1/claim", tok_worker,
				 "{\"worker\":\"gone\",\"types\":[{\"type\":\"a\",\"limit\":5}],"
				 "\"wait_ms\":15000}"),
			 0);
	double since = test_now_s();
	while (metric("shardqd_claims_waiting") < 1) {
		ck_assert_msg(test_now_s() - since < STALL_S, "the claim never waited");
		usleep(20000);
	}
	close(fd);
	since = test_now_s();
	while (metric("shardqd_claims_waiting") > 0) {
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "the claim of a client that hung up still waits after %.0fs",
			      STALL_S);
		usleep(20000);
	}
	int64_t ids[3];
	enqueue("a", 3, NULL, ids);
	/* give a NOTIFY its chance to wake anything still listening */
	usleep(300000);
	ck_assert_int_eq(live("status = 'ready'"), 3);
	hresp r = call("POST", "/v1/claim", tok_worker,
		       "{\"worker\":\"other\",\"types\":[{\"type\":\"a\",\"limit\":5}]}");
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	ck_assert_int_eq((int)json_array_size(json_object_get(j, "jobs")), 3);
	json_decref(j);

	stop_all();
}
END_TEST

/* A client that half-closes its end after sending its claim can still
 * read the answer. The daemon takes it for gone and gives back what it
 * was dealt; the answer must then not list those jobs, or the client would
 * run them while another worker does. The failpoint holds the claimer
 * after it has dealt the jobs, while the client half-closes. */
START_TEST(half_closed_client_gets_only_its_own)
{
	setenv("SHARDQ_FAILPOINT_SLEEP", "sqd_dealt:1000", 1);
	start_all("sq_http_half", NULL);
	unsetenv("SHARDQ_FAILPOINT_SLEEP");
	int64_t ids[4];
	enqueue("a", 4, NULL, ids);
	int fd = hc_connect(D.port);
	ck_assert_int_eq(hc_send(fd, "POST", "/v1/claim", tok_worker,
				 "{\"worker\":\"half\",\"types\":[{\"type\":\"a\",\"limit\":2}]}"),
			 0);
	/* the claim has taken its jobs: they are dealt, and the claimer is
	 * held for a second */
	double since = test_now_s();
	while (metric("shardqd_jobs_claimed_total") < 2) {
		ck_assert_msg(test_now_s() - since < STALL_S, "the claim took no job in %.0fs",
			      STALL_S);
		usleep(5000);
	}
	shutdown(fd, SHUT_WR);
	hresp r;
	ck_assert_msg(hc_recv(fd, &r) == 0, "no answer to a half-closed claim");
	keep(&r);
	close(fd);
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	json_t *got = json_object_get(j, "jobs");
	for (size_t i = 0; i < json_array_size(got); i++) {
		char where[128];
		long long id = (long long)json_integer_value(
			json_object_get(json_array_get(got, i), "id"));
		snprintf(where, sizeof(where), "id = %lld AND status IN ('starting', 'running')",
			 id);
		ck_assert_msg(live(where) == 1,
			      "job %lld was handed to a half-closed client but was given back "
			      "(%lld ready): %s",
			      id, live("status = 'ready'"), r.body);
	}
	json_decref(j);
	/* and what it was dealt is back at once, not after a lease */
	since = test_now_s();
	while (live("status = 'ready'") != 4) {
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "%lld of 4 jobs ready %.0fs after the client left: %s",
			      live("status = 'ready'"), STALL_S, r.body);
		usleep(20000);
	}
	stop_all();
}
END_TEST

/* kill -9 of shardqd: every job it had claimed comes back after its lease
 * (type q: 2 s), and a new daemon hands them out again. */
START_TEST(kill9_jobs_come_back)
{
	start_all("sq_http_kill9", NULL);
	int64_t ids[20];
	enqueue("q", 20, NULL, ids);
	hresp r = call("POST", "/v1/claim", tok_worker,
		       "{\"worker\":\"k\",\"types\":[{\"type\":\"q\",\"limit\":20}]}");
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	ck_assert_int_eq((int)json_array_size(json_object_get(j, "jobs")), 20);
	json_decref(j);
	ck_assert_int_eq(test_daemon_stop(&D, SIGKILL), 128 + SIGKILL);
	ck_assert_int_eq(live("status = 'running'"), 20);
	test_daemon_start(&D, ini_path, "shardqd2.out");
	int back = 0;
	char *seen = calloc(20, 1);
	double moved = test_now_s();
	while (back < 20) {
		r = call("POST", "/v1/claim", tok_worker,
			 "{\"worker\":\"k2\",\"types\":[{\"type\":\"q\",\"limit\":20}],\"wait_ms\":"
			 "500}");
		EXPECT(r, 200, NULL);
		j = js(&r);
		json_t *jobs = json_object_get(j, "jobs");
		for (size_t i = 0; i < json_array_size(jobs); i++) {
			json_t *x = json_array_get(jobs, i);
			int64_t id = json_integer_value(json_object_get(x, "id"));
			int idx = -1;
			for (int q = 0; q < 20; q++)
				if (ids[q] == id)
					idx = q;
			ck_assert(idx >= 0 && !seen[idx]);
			seen[idx] = 1;
			ck_assert_int_eq(json_integer_value(json_object_get(x, "attempt")), 2);
			back++;
			moved = test_now_s();
		}
		json_decref(j);
		ck_assert_msg(test_now_s() - moved < STALL_S + 2,
			      "%d of 20 jobs came back after the kill; the rest:\n%s", back,
			      test_file_text(D.out));
	}
	free(seen);
	stop_all();
}
END_TEST

/* Two daemons in front of the same shards, a partition move in the middle:
 * every job enqueued through either is completed once, through either. */
typedef struct prod_arg {
	int port, n, idx;
	int64_t *ids;
} prod_arg;

static void *produce(void *p)
{
	prod_arg *a = p;
	int fd = hc_connect(a->port);
	for (int i = 0; i < a->n; i += 50) {
		sq_buf b;
		sq_buf_init(&b);
		sq_buf_puts(&b, "{\"jobs\":[");
		for (int k = 0; k < 50; k++)
			sq_buf_printf(&b, "%s{\"type\":\"a\",\"key\":\"p%d-%d\"}", k ? "," : "",
				      a->idx, i + k);
		sq_buf_puts(&b, "]}");
		for (;;) { /* a moving partition answers 503: send again */
			hresp r;
			if (hc_send(fd, "POST", "/v1/jobs", tok_producer, b.data) ||
			    hc_recv(fd, &r)) {
				close(fd);
				fd = hc_connect(a->port);
				continue;
			}
			int st = r.status;
			if (st == 200) {
				json_t *j = json_loads(r.body, 0, NULL);
				json_t *res = json_object_get(j, "results");
				for (int k = 0; k < 50; k++)
					a->ids[i + k] = json_integer_value(json_object_get(
						json_array_get(res, (size_t)k), "id"));
				json_decref(j);
			}
			free(r.body);
			if (st == 200)
				break;
			usleep(100000);
		}
		sq_buf_free(&b);
	}
	close(fd);
	return NULL;
}

static long long remaining_enqueued(void *arg)
{
	return live("true");
}

START_TEST(two_daemons_and_a_move)
{
	start_all("sq_http_two", NULL);
	test_daemon D2 = {0};
	test_daemon_start(&D2, ini_path, "shardqd-b.out");
	enum { NP = 2, PER = 1000, NC = 6 };
	int64_t *ids = calloc(NP * PER, sizeof(int64_t));
	prod_arg pa[NP];
	pthread_t pt[NP], ct[NC];
	loop_arg ca[NC];
	atomic_store(&loop_stop, 0);
	for (int i = 0; i < NP; i++) {
		pa[i] = (prod_arg){i ? D2.port : D.port, PER, i, ids + i * PER};
		pthread_create(&pt[i], NULL, produce, &pa[i]);
	}
	for (int i = 0; i < NC; i++) {
		memset(&ca[i], 0, sizeof(ca[i]));
		ca[i].port = i % 2 ? D2.port : D.port;
		ca[i].limit = 10;
		ca[i].idx = i;
		pthread_create(&ct[i], NULL, claim_loop, &ca[i]);
	}
	/* move a quarter of the partitions of shard 0 to shard 1 meanwhile */
	uint32_t parts[64];
	size_t np = 0;
	for (uint32_t p = 0; p < 64 && np < 8; p++)
		if (sq_client_shard_of_partition(t.client, p) == 0)
			parts[np++] = p;
	sq_move_opts mo;
	sq_move_opts_init(&mo);
	sq_move_info info;
	sq_error err;
	usleep(200000);
	OKE(sq_move(t.client, parts, np, "s2", &mo, &info, &err));
	printf("moved %zu partitions under load: %lld rows, writes stalled %.1f ms\n", np,
	       (long long)info.rows, info.stall_ms);
	for (int i = 0; i < NP; i++)
		pthread_join(pt[i], NULL);
	long long left;
	int done = wait_progress(remaining_enqueued, NULL, &left);
	atomic_store(&loop_stop, 1);
	for (int i = 0; i < NC; i++)
		pthread_join(ct[i], NULL);
	char rep[2048];
	ck_assert_msg(done, "%lld jobs left after a stall of %.0fs:\n%s", left, STALL_S,
		      testdb_live_report(&t, rep, sizeof(rep)));
	long long completed = 0, got = 0, via2 = 0;
	for (int i = 0; i < NC; i++) {
		completed += ca[i].completed;
		got += ca[i].got;
		via2 += i % 2 ? ca[i].completed : 0;
		free(ca[i].seen);
	}
	for (int i = 0; i < NP * PER; i++)
		ck_assert_msg(ids[i] > 0, "job %d was not acknowledged", i);
	ck_assert_int_eq(got, NP * PER);
	ck_assert_int_eq(completed, NP * PER);
	ck_assert_msg(via2 > 0 && via2 < completed, "daemon 2 completed %lld of %lld", via2,
		      completed);
	free(ids);
	test_daemon_stop(&D2, SIGKILL);
	stop_all();
}
END_TEST

/* SIGTERM: a waiting claim is answered, the daemon exits 0. */
START_TEST(sigterm_is_graceful)
{
	start_all("sq_http_term", "claim_wait_max = 20s\n");
	int fd = hc_connect(D.port);
	ck_assert_int_eq(hc_send(fd, "POST", "/v1/claim", tok_worker,
				 "{\"worker\":\"t\",\"types\":[{\"type\":\"a\",\"limit\":5}],"
				 "\"wait_ms\":15000}"),
			 0);
	double since = test_now_s();
	while (metric("shardqd_claims_waiting") < 1) {
		ck_assert_msg(test_now_s() - since < STALL_S, "the claim never waited");
		usleep(20000);
	}
	kill(D.pid, SIGTERM);
	hresp r;
	ck_assert_msg(hc_recv(fd, &r) == 0, "the waiting claim got no answer at SIGTERM");
	keep(&r);
	close(fd);
	EXPECT(r, 200, NULL);
	ck_assert_str_eq(r.body, "{\"jobs\":[]}");
	ck_assert_int_eq(test_daemon_stop(&D, 0), 0);
	stop_all();
}
END_TEST

/* ---- the admin page, rendered by headless Chromium ------------------------- */

static const char *chromium_bin(void)
{
	static const char *c[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser",
				  "/usr/bin/google-chrome", NULL};
	for (int i = 0; c[i]; i++)
		if (access(c[i], X_OK) == 0)
			return c[i];
	return NULL;
}

/* Loads the page with the admin token (in the URL's fragment, which the
 * browser never sends) and returns the DOM after its script ran; with
 * `shot`, also a screenshot there. */
static char *render_page(const char *shot)
{
	const char *bin = chromium_bin();
	ck_assert_msg(bin != NULL,
		      "no chromium: scripts/deps --browser installs Debian's chromium");
	char profile[512], out[512], cmd[4096], shot_opt[1024] = "";
	testdb_path(profile, sizeof(profile), "chromium-profile");
	testdb_path(out, sizeof(out), "page.html");
	/* --virtual-time-budget lets the page's fetch and rendering finish
	 * before the DOM is written, however slow the machine; the screenshot
	 * is taken by the same launch (a launch is seconds on a loaded
	 * machine) */
	const char *common = "--headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
			     "--no-first-run --hide-scrollbars --virtual-time-budget=10000";
	if (shot)
		snprintf(shot_opt, sizeof(shot_opt), "--window-size=1100,1000 --screenshot=%s",
			 shot);
	snprintf(cmd, sizeof(cmd),
		 "HOME=%s %s %s %s --user-data-dir=%s --dump-dom 'http://127.0.0.1:%d/#token=%s' > "
		 "%s 2>/dev/null",
		 testdb_tmpdir(), bin, common, shot_opt, profile, D.port, tok_admin, out);
	int rc = system(cmd);
	ck_assert_msg(rc == 0, "chromium --dump-dom%s failed (%d)", shot ? " --screenshot" : "",
		      rc);
	char *dom = strdup(test_file_text(out));
	ck_assert_msg(strstr(dom, "data-rendered=") != NULL,
		      "the page did not render its data; the DOM:\n%.3000s", dom);
	return dom;
}

/* The text of the element with data-k="key", or NULL. */
static const char *dom_value(const char *dom, const char *key, char *out, size_t len)
{
	char want[256];
	snprintf(want, sizeof(want), "data-k=\"%s\"", key);
	const char *p = strstr(dom, want);
	if (!p || !(p = strchr(p, '>')))
		return NULL;
	p++;
	size_t n = strcspn(p, "<");
	snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), p);
	return out;
}

/* Whether the element with data-k="key" is marked as an estimate. */
static int dom_is_estimate(const char *dom, const char *key)
{
	char want[256];
	snprintf(want, sizeof(want), "data-k=\"%s\"", key);
	const char *p = strstr(dom, want);
	const char *end = p ? strchr(p, '>') : NULL;
	const char *est = p ? strstr(p, "class=\"est\"") : NULL;
	return est && est < end;
}

/* A rendered count ("1,234" or "≈ 1,234") as a number. */
static long long dom_count(const char *dom, const char *key)
{
	char v[128], digits[128];
	ck_assert_msg(dom_value(dom, key, v, sizeof(v)) != NULL, "the page shows no %s", key);
	size_t k = 0;
	for (const char *p = v; *p && k + 1 < sizeof(digits); p++)
		if (*p >= '0' && *p <= '9')
			digits[k++] = *p;
	digits[k] = '\0';
	ck_assert_msg(k > 0, "%s shows '%s', not a number", key, v);
	return atoll(digits);
}

static long long shard_count(int shard, const char *type, const char *status)
{
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs WHERE task = '%s' AND status = '%s'", type,
		 status);
	return testdb_scalar(&t, shard, sql);
}

/* Every count the page shows for shard s equals the shard's own. */
static void page_agrees(const char *dom, int s, const char *when)
{
	static const char *types[] = {"a", "b", "q"};
	static const char *sts[] = {"ready", "starting", "running"};
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 3; k++) {
			char key[64];
			snprintf(key, sizeof(key), "s%d/%s/%s", s + 1, types[i], sts[k]);
			long long shown = dom_count(dom, key),
				  real = shard_count(s, types[i], sts[k]);
			if (dom_is_estimate(dom, key))
				ck_assert_msg(
					shown > real * 9 / 10 && shown < real * 11 / 10,
					"%s: the page estimates %s = %lld, the shard has %lld",
					when, key, shown, real);
			else
				ck_assert_msg(shown == real,
					      "%s: the page shows %s = %lld, the shard has %lld",
					      when, key, shown, real);
		}
}

START_TEST(admin_page_matches_shards)
{
	start_all("sq_http_page", NULL);
	/* no token: 401, and the page asks for one */
	hresp r = call("GET", "/", NULL, NULL);
	EXPECT(r, 401, NULL);
	ck_assert_msg(strstr(r.head, "text/html") && strstr(r.body, "admin token"), "%s", r.head);
	r = call("GET", "/v1/admin/overview", NULL, NULL);
	EXPECT(r, 401, "unauthorized");
	r = call("GET", "/v1/admin/overview", tok_worker, NULL);
	EXPECT(r, 403, "forbidden");

	/* 0 jobs */
	char *dom = render_page(NULL);
	page_agrees(dom, 0, "empty");
	page_agrees(dom, 1, "empty");
	free(dom);

	/* some of each: ready, starting, running, and a failed job's error */
	enqueue("a", 40, NULL, NULL);
	enqueue("b", 25, "pb", NULL);
	r = call("POST", "/v1/claim", tok_worker,
		 "{\"worker\":\"p\",\"types\":[{\"type\":\"a\",\"limit\":7}],\"start\":false}");
	EXPECT(r, 200, NULL);
	r = call("POST", "/v1/claim", tok_worker,
		 "{\"worker\":\"p\",\"types\":[{\"type\":\"b\",\"limit\":5}]}");
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	json_t *one = json_array();
	json_array_append(one, json_array_get(json_object_get(j, "jobs"), 0));
	char *fb = fence_body(
		one, ",\"error\":\"page-test: the printer is on fire\",\"permanent\":true");
	r = call("POST", "/v1/jobs/fail", tok_worker, fb);
	EXPECT(r, 200, NULL);
	free(fb);
	json_decref(one);
	json_decref(j);
	char shot[512];
	/* to keep the screenshot, a path in the build directory (build/admin-page.png) */
	const char *keep_shot = getenv("SHARDQ_PAGE_SCREENSHOT");
	testdb_path(shot, sizeof(shot), "admin-page.png");
	dom = render_page(keep_shot ? keep_shot : shot);
	page_agrees(dom, 0, "with jobs");
	page_agrees(dom, 1, "with jobs");
	ck_assert_msg(strstr(dom, "page-test: the printer is on fire") != NULL,
		      "the failed job's error is not on the page");
	struct stat sb;
	ck_assert_msg(stat(keep_shot ? keep_shot : shot, &sb) == 0 && sb.st_size > 10000,
		      "no screenshot");
	free(dom);

	/* 2 x 10^5 jobs (written straight into the shards, in partition 0: an
	 * id's low 16 bits), 20 times what the page counts (sq_stats_fast's
	 * cap, 10^4): it shows the estimate, within 10 % of the truth */
	for (int s = 0; s < 2; s++) {
		char sql[512];
		snprintf(sql, sizeof(sql),
			 "WITH i AS (INSERT INTO shardq.jobs (id, partition, task, params)"
			 " SELECT ((%d::bigint << 40) + g) << 16, 0, 'q', '{}' FROM "
			 "generate_series(1, "
			 "100000) g"
			 " RETURNING 1) SELECT count(*) FROM i",
			 s + 1);
		ck_assert_int_eq(testdb_scalar(&t, s, sql), 100000);
		PGconn *pc = testdb_pg(&t, s);
		PQclear(PQexec(pc, "ANALYZE shardq.jobs"));
		PQfinish(pc);
	}
	dom = render_page(NULL);
	for (int s = 0; s < 2; s++) {
		char key[64];
		snprintf(key, sizeof(key), "s%d/q/ready", s + 1);
		long long shown = dom_count(dom, key), real = shard_count(s, "q", "ready");
		ck_assert_int_eq(real, 100000);
		ck_assert_msg(shown > real * 9 / 10 && shown < real * 11 / 10,
			      "%s: the page shows %lld for %lld ready jobs", key, shown, real);
		printf("2 x 10^5 jobs: %s shows %lld (true %lld)\n", key, shown, real);
	}
	ck_assert_msg(strstr(dom, "class=\"est\"") != NULL, "the estimate is not marked");
	free(dom);

	/* a shard down (its database refuses connections): the page names it
	 * and still shows the other's numbers */
	char sql[256];
	snprintf(sql, sizeof(sql), "host=127.0.0.1 port=%d dbname=postgres user=postgres",
		 t.ports[1]);
	PGconn *adm = PQconnectdb(sql);
	ck_assert_msg(PQstatus(adm) == CONNECTION_OK, "%s", PQerrorMessage(adm));
	snprintf(sql, sizeof(sql), "ALTER DATABASE %s ALLOW_CONNECTIONS false", t.db);
	PGresult *res = PQexec(adm, sql);
	ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "%s", PQerrorMessage(adm));
	PQclear(res);
	snprintf(sql, sizeof(sql),
		 "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = "
		 "'%s' "
		 "AND pid <> pg_backend_pid()",
		 t.db);
	PQclear(PQexec(adm, sql));
	dom = render_page(NULL);
	char v[256];
	ck_assert_msg(dom_value(dom, "s2/down", v, sizeof(v)) != NULL,
		      "shard s2 is down and the page does not say so; the DOM:\n%.6000s", dom);
	printf("shard down: the page says \"%s\"\n", v);
	page_agrees(dom, 0, "with s2 down");
	free(dom);
	/* a daemon started while the shard is down starts, serves the other */
	test_daemon_stop(&D, SIGKILL);
	test_daemon_start(&D, ini_path, "shardqd-down.out");
	ck_assert_msg(strstr(test_file_text(D.out), "starting without the shards") != NULL,
		      "the log does not say a shard was down at start:\n%s", test_file_text(D.out));
	dom = render_page(NULL);
	ck_assert_msg(dom_value(dom, "s2/down", v, sizeof(v)) != NULL,
		      "started with s2 down, the page does not say so");
	page_agrees(dom, 0, "started with s2 down");
	free(dom);
	snprintf(sql, sizeof(sql), "ALTER DATABASE %s ALLOW_CONNECTIONS true", t.db);
	PQclear(PQexec(adm, sql));
	PQfinish(adm);
	stop_all();
}
END_TEST

/* A listen address the daemon cannot have is named, with the reason: a
 * host that does not resolve, and a port in use (by a running daemon). */
START_TEST(listen_errors_name_the_address)
{
	start_all("sq_http_listen", NULL);
	const char *ini = test_file_text(ini_path);
	char *text = strdup(ini);
	const char *from = "listen = 127.0.0.1:0";
	char *at = strstr(text, from);
	ck_assert_ptr_nonnull(at);
	struct {
		const char *listen, *want;
		char port_in_use;
	} cases[] = {{"no-such-host.invalid:8080",
		      "the host 'no-such-host.invalid' does not resolve", 0},
		     {NULL, "Address already in use", 1}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char listen[128], path[600], cmd[1400], out[4096];
		if (cases[i].port_in_use)
			snprintf(listen, sizeof(listen), "127.0.0.1:%d", D.port);
		else
			snprintf(listen, sizeof(listen), "%s", cases[i].listen);
		testdb_path(path, sizeof(path), "bad-listen.ini");
		FILE *f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		fprintf(f, "%.*slisten = %s%s", (int)(at - text), text, listen, at + strlen(from));
		fclose(f);
		snprintf(cmd, sizeof(cmd), "%s -c %s 2>&1", getenv("SHARDQ_DAEMON"), path);
		FILE *p = popen(cmd, "r");
		ck_assert_ptr_nonnull(p);
		size_t n = fread(out, 1, sizeof(out) - 1, p);
		out[n] = '\0';
		int st = pclose(p);
		char named[160];
		snprintf(named, sizeof(named), "cannot listen on %s: ", listen);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1 && strstr(out, named) &&
				      strstr(out, cases[i].want) && !strstr(out, "Success"),
			      "listen = %s: exit %d, wanted '%s%s':\n%s", listen,
			      WIFEXITED(st) ? WEXITSTATUS(st) : -1, named, cases[i].want, out);
	}
	free(text);
	/* and its version */
	char cmd[700], out[256];
	snprintf(cmd, sizeof(cmd), "%s --version", getenv("SHARDQ_DAEMON"));
	FILE *p = popen(cmd, "r");
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	ck_assert_int_eq(pclose(p), 0);
	ck_assert_msg(!strncmp(out, "shardqd ", 8) && out[8] >= '0' && out[8] <= '9', "%s", out);
	stop_all();
}
END_TEST

/* The daemon's connections are cut by the shards while idle (as a shard's
 * restart cuts them): the next requests are answered, not 503, since each
 * thread replaces a closed connection before it sends on it. */
START_TEST(cut_connections_are_replaced_before_a_request)
{
	enum { N = 8 };
	start_all("sq_http_cut", NULL);
	int64_t ids[N];
	enqueue("a", N, NULL, ids);
	for (int i = 0; i < N; i++) {
		char path[64];
		snprintf(path, sizeof(path), "/v1/jobs/%lld", (long long)ids[i]);
		hresp r = call("GET", path, tok_worker, NULL);
		EXPECT(r, 200, NULL);
	}
	/* the sessions open now (the claimer polls the meta database every
	 * map_poll, and opens a new one at once after the cut) */
	char daemons[256], sql[512];
	PGconn *pg = testdb_pg(&t, 0);
	PGresult *now = PQexec(pg, "SELECT clock_timestamp()::text");
	snprintf(daemons, sizeof(daemons),
		 "datname = current_database() AND application_name LIKE 'sqd%%' "
		 "AND pid <> pg_backend_pid() AND backend_start <= '%s'",
		 PQgetvalue(now, 0, 0));
	PQclear(now);
	PQfinish(pg);
	snprintf(sql, sizeof(sql),
		 "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE %s", daemons);
	ck_assert_int_gt(testdb_sum(&t, sql), 0);
	/* wait until they are gone (their sockets closed) */
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM pg_stat_activity WHERE %s", daemons);
	double since = test_now_s();
	long long left, was = -1;
	while ((left = testdb_sum(&t, sql)) > 0) {
		if (left != was)
			was = left, since = test_now_s();
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "%lld of the daemon's sessions still there %.0fs after they were "
			      "terminated",
			      left, STALL_S);
		usleep(20000);
	}
	for (int i = 0; i < N; i++) {
		char path[64];
		snprintf(path, sizeof(path), "/v1/jobs/%lld", (long long)ids[i]);
		hresp r = call("GET", path, tok_worker, NULL);
		ck_assert_msg(r.status == 200, "GET %d of %d after the cut: %d %s", i + 1, N,
			      r.status, r.body);
		r = call("POST", "/v1/jobs", tok_producer, "{\"jobs\":[{\"type\":\"b\"}]}");
		ck_assert_msg(r.status == 200, "enqueue %d of %d after the cut: %d %s", i + 1, N,
			      r.status, r.body);
	}
	ck_assert_int_eq(live("task = 'b'"), N);
	stop_all();
}
END_TEST

/* A body of n jobs of `type` with keys PREFIX0..: a key goes to the same
 * partition every time, and sending a live key again adds no job. */
static char *keyed_body(const char *type, const char *prefix, int n)
{
	sq_buf b;
	sq_buf_init(&b);
	sq_buf_puts(&b, "{\"jobs\":[");
	for (int i = 0; i < n; i++)
		sq_buf_printf(&b, "%s{\"type\":\"%s\",\"key\":\"%s%d\"}", i ? "," : "", type,
			      prefix, i);
	sq_buf_puts(&b, "]}");
	return b.data;
}

/* How many results of a reply have `field` equal to `value`; the id of
 * the last of them in *id (if id). */
static int results_with(const hresp *r, const char *field, const char *value, long long *id)
{
	json_t *j = js(r);
	json_t *res = json_object_get(j, "results");
	int n = 0;
	for (size_t i = 0; i < json_array_size(res); i++) {
		json_t *x = json_array_get(res, i);
		if (strcmp(json_string_value(json_object_get(x, field)) ?: "", value))
			continue;
		n++;
		if (id)
			*id = (long long)json_integer_value(json_object_get(x, "id"));
	}
	json_decref(j);
	return n;
}

static int outcomes(const hresp *r, const char *outcome)
{
	return results_with(r, "outcome", outcome, NULL);
}

/*
 * Shard 2's host vanishes while the daemon runs. With freeze 0, a proxy
 * in front of it cuts the daemon's connections, then takes new ones and
 * never answers. With freeze 1, the proxy keeps the connections open and
 * passes nothing (a host cut off without a reset, or stuck): what the
 * daemon sends on them is never answered; its request threads give up
 * after answer_timeout (2 s), its claimer after an eighth of the shortest
 * lease (type q's 2 s: at least 1 s). connect_timeout is
 * 10 minutes, above the test's stall limit, so a request thread that
 * waited for the connect or the answer fails the test (call_timeout_s).
 * Instead, a request that needs shard 2 gets 503 `still connecting` in a
 * bounded time; the other shard's jobs are written, read, claimed and
 * completed meanwhile; and nothing answered not_written is on shard 2.
 * When the host is back, the batch is sent again until no job is
 * not_written, and every key is there once.
 */
static void shard_gone_holds_no_request_up(const char *db, int freeze)
{
	enum { N = 40 };
	testdb_proxy px;
	testdb_open(&t, db, 2, 64, types_ini);
	testdb_proxy_start(&px, t.ports[1]);
	/* frozen: the request threads give up on an answer after 2 s, the
	 * claimer after an eighth of type q's 2 s lease (at least 1 s) */
	write_ini_via(NULL, NULL,
		      freeze ? "connect_timeout = 10m\nanswer_timeout = 2s\n"
			     : "connect_timeout = 10m\n",
		      px.port);
	test_daemon_start(&D, ini_path, "shardqd.out");
	call_timeout_s = STALL_S;

	/* both shards answer through the proxy; the b jobs are claimed later */
	char *body = keyed_body("b", "w", N);
	hresp r = call("POST", "/v1/jobs", tok_producer, body);
	free(body);
	EXPECT(r, 200, NULL);
	long long b_on_s1 =
		testdb_scalar(&t, 0, "SELECT count(*) FROM shardq.jobs WHERE task = 'b'");
	ck_assert_msg(b_on_s1 > 0 && b_on_s1 < N, "the %d keys went to one shard (s1 has %lld)", N,
		      b_on_s1);

	if (freeze)
		testdb_proxy_freeze(&px, 1);
	else
		testdb_proxy_hole(&px, 1);
	/* the first requests find their connection to s2 cut (or get no
	 * answer on it); the next ones connect again, and must not wait for
	 * it */
	body = keyed_body("a", "h", N);
	int still = 0, tries = 0, inserted = 0;
	long long s1_job = 0;
	char last[512] = "";
	while (!still) {
		ck_assert_msg(++tries <= 50,
			      "50 enqueues with s2 unreachable, and none answered `still "
			      "connecting`; the last: %s",
			      last);
		r = call("POST", "/v1/jobs", tok_producer, body);
		snprintf(last, sizeof(last), "%d %s", r.status, r.body);
		EXPECT(r, 503, "unavailable");
		/* s2's part: not_written, or unknown when its connection was
		 * found cut after the part was sent (then not asked) */
		ck_assert_msg(outcomes(&r, "inserted") + outcomes(&r, "duplicate") +
					      outcomes(&r, "not_written") +
					      outcomes(&r, "unknown") ==
				      N,
			      "a reply without a result for each of the %d jobs: %s", N, r.body);
		results_with(&r, "outcome", "inserted", &s1_job);
		inserted += outcomes(&r, "inserted");
		still = strstr(r.body, "still connecting") != NULL;
	}
	ck_assert_msg(strstr(r.body, "shard s2") != NULL, "the reply does not name s2: %s", r.body);
	printf("s2 gone: %d enqueues until one answered `still connecting`: %.300s\n", tries,
	       r.body);
	/* what was answered not_written is not there; s1's part is, once */
	ck_assert_int_eq(testdb_scalar(&t, 1, "SELECT count(*) FROM shardq.jobs WHERE task = 'a'"),
			 0);
	long long a_on_s1 =
		testdb_scalar(&t, 0, "SELECT count(*) FROM shardq.jobs WHERE task = 'a'");
	ck_assert_int_eq(a_on_s1, inserted);
	ck_assert_int_eq(outcomes(&r, "not_written"), N - a_on_s1);

	/* the other shard is served meanwhile, by every request thread */
	ck_assert_int_gt(s1_job, 0);
	for (int i = 0; i < 8; i++) {
		char path[64];
		snprintf(path, sizeof(path), "/v1/jobs/%lld", s1_job);
		r = call("GET", path, tok_worker, NULL);
		EXPECT(r, 200, NULL);
	}
	r = call("POST", "/v1/claim", tok_worker,
		 "{\"worker\":\"w1\",\"types\":[{\"type\":\"b\",\"limit\":100}],\"wait_ms\":0}");
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	json_t *jobs = json_object_get(j, "jobs");
	long long claimed = (long long)json_array_size(jobs);
	ck_assert_msg(claimed > 0 && claimed <= b_on_s1,
		      "claimed %lld b jobs with s2 unreachable; s1 holds %lld", claimed, b_on_s1);
	char *fb = fence_body(jobs, NULL);
	json_decref(j);
	r = call("POST", "/v1/jobs/complete", tok_worker, fb);
	free(fb);
	EXPECT(r, 200, NULL);
	ck_assert_int_eq(results_with(&r, "result", "ok", NULL), claimed);
	ck_assert_int_eq(testdb_scalar(&t, 0, "SELECT count(*) FROM shardq.jobs WHERE task = 'b'"),
			 b_on_s1 - claimed);

	/* the host is back: the same batch again until every key is written */
	if (freeze)
		testdb_proxy_freeze(&px, 0);
	else
		testdb_proxy_hole(&px, 0);
	double since = test_now_s();
	int best = -1;
	for (;;) {
		r = call("POST", "/v1/jobs", tok_producer, body);
		int nw = outcomes(&r, "not_written") + outcomes(&r, "unknown");
		if (r.status == 200 && nw == 0)
			break;
		EXPECT(r, 503, NULL);
		if (best < 0 || nw < best)
			best = nw, since = test_now_s();
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "%d of %d jobs still not written %.0fs after s2 came back: %s", nw, N,
			      STALL_S, r.body);
		usleep(100000);
	}
	free(body);
	ck_assert_int_eq(live("task = 'a'"), N);
	ck_assert_int_eq(live("task = 'a' AND active_uid LIKE 'h%'"), N);
	/* the claimer's claims reach both shards again (once its connection to
	 * s2 is made again: 503 until then), and the log says the outage it
	 * reported is over */
	since = test_now_s();
	for (;;) {
		r = call("POST", "/v1/claim", tok_worker,
			 "{\"worker\":\"w1\",\"types\":[{\"type\":\"b\",\"limit\":1}],"
			 "\"wait_ms\":0}");
		if (r.status == 200)
			break;
		EXPECT(r, 503, NULL);
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "claims still answer 503 %.0fs after s2 came back: %s", STALL_S,
			      r.body);
		usleep(100000);
	}
	ck_assert_msg(strstr(test_file_text(D.out), "claim: every shard answers again"),
		      "shardqd did not log the end of the outage:\n%s", slurp_tail(D.out));
	call_timeout_s = 0;
	testdb_proxy_stop(&px);
	stop_all();
}

/*
 * The workers' heartbeats through shardqd beside a shard that stops
 * answering on open connections (a proxy in front of s2 freezes), with
 * answer_timeout left to its default (statement_timeout + connect_timeout:
 * 30 s + 10 minutes here, so a request thread that waited for it fails the
 * test, call_timeout_s). Starts, heartbeats and results wait an eighth of
 * the shortest lease (type q's 2 s: at least 1 s). Asserted: a heartbeat
 * of jobs on both shards is answered, s1's jobs ok and s2's unavailable,
 * and s1's jobs are then completed.
 */
START_TEST(a_heartbeat_beside_a_shard_that_stops_answering_is_answered)
{
	enum { N = 40 };
	testdb_proxy px;
	testdb_open(&t, "sq_http_freeze_hb", 2, 64, types_ini);
	testdb_proxy_start(&px, t.ports[1]);
	write_ini_via(NULL, NULL, "connect_timeout = 10m\n", px.port);
	test_daemon_start(&D, ini_path, "shardqd.out");
	call_timeout_s = STALL_S;
	char *body = keyed_body("b", "hb", N);
	hresp r = call("POST", "/v1/jobs", tok_producer, body);
	free(body);
	EXPECT(r, 200, NULL);
	r = call("POST", "/v1/claim", tok_worker,
		 "{\"worker\":\"w1\",\"types\":[{\"type\":\"b\",\"limit\":100}],\"wait_ms\":0}");
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	json_t *jobs = json_object_get(j, "jobs");
	long long claimed = (long long)json_array_size(jobs);
	char *fb = fence_body(jobs, NULL);
	json_decref(j);
	const char *held =
		"SELECT count(*) FROM shardq.jobs WHERE task = 'b' AND status <> 'ready'";
	long long on_s1 = testdb_scalar(&t, 0, held), on_s2 = testdb_scalar(&t, 1, held);
	ck_assert_msg(on_s1 > 0 && on_s2 > 0 && on_s1 + on_s2 == claimed,
		      "claimed %lld jobs: %lld held on s1, %lld on s2 (both shards needed)",
		      claimed, on_s1, on_s2);

	testdb_proxy_freeze(&px, 1);
	r = call("POST", "/v1/jobs/heartbeat", tok_worker, fb);
	EXPECT(r, 503, "unavailable");
	ck_assert_msg(results_with(&r, "result", "ok", NULL) == on_s1 &&
			      results_with(&r, "result", "unavailable", NULL) == on_s2,
		      "a heartbeat of %lld jobs on s1 and %lld on s2 (frozen): %.400s", on_s1,
		      on_s2, r.body);
	printf("a heartbeat beside a frozen s2: %.300s\n", r.body);
	/* s1's jobs go on */
	j = json_loads(fb, 0, NULL);
	ck_assert_ptr_nonnull(j);
	json_t *only = json_array();
	json_t *all = json_object_get(j, "jobs");
	for (size_t i = 0; i < json_array_size(all); i++) {
		json_t *x = json_array_get(all, i);
		char sql[128];
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs WHERE id = %lld",
			 (long long)json_integer_value(json_object_get(x, "id")));
		if (testdb_scalar(&t, 0, sql) == 1)
			json_array_append(only, x);
	}
	json_t *s1_jobs = json_pack("{s:o}", "jobs", only);
	char *s1_body = json_dumps(s1_jobs, 0);
	r = call("POST", "/v1/jobs/complete", tok_worker, s1_body);
	EXPECT(r, 200, NULL);
	ck_assert_int_eq(results_with(&r, "result", "ok", NULL), on_s1);
	free(s1_body);
	json_decref(s1_jobs);
	json_decref(j);
	free(fb);
	testdb_proxy_freeze(&px, 0);
	call_timeout_s = 0;
	testdb_proxy_stop(&px);
	stop_all();
}
END_TEST

START_TEST(a_shard_that_does_not_answer_holds_no_request_up)
{
	shard_gone_holds_no_request_up("sq_http_hole", 0);
}
END_TEST

START_TEST(a_shard_that_stops_answering_holds_no_request_up)
{
	shard_gone_holds_no_request_up("sq_http_freeze", 1);
}
END_TEST

/* A shard whose host is gone without a trace when shardqd starts: the
 * request threads' clients and the claimer's connect to it at once, so the
 * start waits for it once (connect_timeout), not once per client; the
 * start does not wait for its LISTEN connection; the daemon then serves
 * the other shard. */
START_TEST(a_shard_that_does_not_answer_holds_the_start_up_once)
{
	enum { N = 40, CLIENTS = 7 }; /* 2 request threads, the claimer and 4 enqueue lanes */
	testdb_open(&t, "sq_http_start_hole", 2, 64, types_ini);
	testdb_hole h;
	testdb_hole_start(&h, 64);
	write_ini_via(NULL, NULL, "connect_timeout = 10m\n", h.port);
	test_daemon_spawn(&D, ini_path, "shardqd-hole.out");
	double since = test_now_s();
	while (atomic_load(&h.n) < CLIENTS) {
		int st;
		ck_assert_msg(waitpid(D.pid, &st, WNOHANG) != D.pid,
			      "shardqd exited while starting; its output:\n%s",
			      test_file_text(D.out));
		ck_assert_msg(
			test_now_s() - since < STALL_S,
			"after %.0fs, s2's host holds %d of shardqd's connects unanswered, "
			"%d wanted at once (2 request threads, the claimer, 4 enqueue lanes): "
			"its clients "
			"are opened one after another, each waiting connect_timeout (10 "
			"min). Its output:\n%s",
			STALL_S, atomic_load(&h.n), CLIENTS, test_file_text(D.out));
		usleep(20000);
	}
	printf("start with s2 gone: %d connects to it held at once\n", atomic_load(&h.n));
	/* those connects fail; what connects later is held (a LISTEN connect
	 * to s2 would hold the start up for 10 minutes) */
	atomic_store(&h.cut, 1);
	test_daemon_wait(&D);
	const char *out = test_file_text(D.out);
	ck_assert_msg(strstr(out, "starting without the shards") && strstr(out, "shard s2 ("),
		      "the log does not name s2 as down at the start:\n%s", out);

	/* s1 is served: its part of a batch is written, s2's is not */
	char *body = keyed_body("a", "h", N);
	hresp r = call("POST", "/v1/jobs", tok_producer, body);
	free(body);
	EXPECT(r, 503, "unavailable");
	long long on_s1 = testdb_scalar(&t, 0, "SELECT count(*) FROM shardq.jobs WHERE task = 'a'");
	ck_assert_msg(on_s1 > 0 && on_s1 < N, "the %d keys went to one shard (s1 has %lld)", N,
		      on_s1);
	ck_assert_int_eq(outcomes(&r, "inserted"), on_s1);
	ck_assert_int_eq(outcomes(&r, "not_written"), N - on_s1);
	ck_assert_msg(strstr(r.body, "shard s2") != NULL, "the reply does not name s2: %s", r.body);
	r = call("POST", "/v1/claim", tok_worker,
		 "{\"worker\":\"w1\",\"types\":[{\"type\":\"a\",\"limit\":100}],\"wait_ms\":0}");
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	ck_assert_int_eq((long long)json_array_size(json_object_get(j, "jobs")), on_s1);
	json_decref(j);

	/* what is still connecting to the hole fails at once, so the daemon
	 * stops without waiting on it */
	testdb_hole_stop(&h);
	ck_assert_int_eq(test_daemon_stop(&D, SIGTERM), 0);
	stop_all();
}
END_TEST

/* The schedule named prefix-N (the first N) whose key for the slot
 * "{name}:slot" lives on shard s, into name. */
static void schedule_on_shard(int s, const char *prefix, const char *slot, char *name, size_t len)
{
	for (int i = 0;; i++) {
		char key[96];
		snprintf(name, len, "%s-%d", prefix, i);
		snprintf(key, sizeof(key), "%s:%s", name, slot);
		uint32_t p = sq_partition_of_key(key, strlen(key), t.partitions);
		if (sq_client_shard_of_partition(t.client, p) == s)
			return;
	}
}

static long long schedule_field(const char *name, const char *field)
{
	char sql[192];
	snprintf(sql, sizeof(sql),
		 "SELECT coalesce(sum(%s), -1) FROM shardq_meta.schedules WHERE name = '%s'", field,
		 name);
	return testdb_scalar(&t, 0, sql);
}

/* Waits until schedule `name`'s `field` (enqueues, retries) reaches want. */
static void wait_schedule(const char *name, const char *field, long long want, const char *why)
{
	double since = test_now_s();
	long long got, best = -2;
	while ((got = schedule_field(name, field)) < want) {
		if (got > best)
			best = got, since = test_now_s();
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "schedule %s: %s %lld of %lld, no more for %.0fs: %s. shardqd's "
			      "output:\n%s",
			      name, field, got, want, STALL_S, why, slurp_tail(D.out));
		usleep(50000);
	}
}

/* Schedule `name`'s slot of this year, claimed by a scheduler that is
 * gone, with its lease running out in `lease` (an interval): the next pass
 * after that takes it over and enqueues it. */
static void schedule_orphan(const char *name, const char *slot, const char *lease)
{
	char sql[512];
	snprintf(sql, sizeof(sql),
		 "WITH u AS (INSERT INTO shardq_meta.schedules AS s (name, last_slot, claimed_by, "
		 "lease_until) VALUES ('%s', '%s', 'gone', now() + interval '%s') ON CONFLICT "
		 "(name) DO UPDATE SET last_slot = EXCLUDED.last_slot, claimed_by = 'gone', "
		 "lease_until = EXCLUDED.lease_until RETURNING 1) SELECT count(*) FROM u",
		 name, slot, lease);
	ck_assert_int_eq(testdb_scalar(&t, 0, sql), 1);
}

/* shardqd runs the [schedule]s on a thread of its own. A shard that stops
 * answering holds only the schedules whose slot goes there: the next
 * schedules in the pass are enqueued, the held slot is enqueued once the
 * shard is back (nothing lost), and a stop does not wait for the shard's
 * connect (connect_timeout is 10 minutes here). Each schedule's slot is
 * this year's (a yearly cron), left claimed by a scheduler that died, so
 * its key, and shard, is known, and the test says when it is due. */
START_TEST(the_schedules_go_on_beside_a_shard_that_does_not_answer)
{
	testdb_proxy px;
	char slot[32], on2[32], on1a[32], on1b[32], late[32], extra[1024];
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	snprintf(slot, sizeof(slot), "%04d-01-01T00:00:00Z", tm.tm_year + 1900);
	testdb_open(&t, "sq_http_sched_hole", 2, 64, types_ini);
	schedule_on_shard(1, "s2", slot, on2, sizeof(on2));
	schedule_on_shard(0, "s1a", slot, on1a, sizeof(on1a));
	schedule_on_shard(0, "s1b", slot, on1b, sizeof(on1b));
	schedule_on_shard(1, "late", slot, late, sizeof(late));
	/* on2 first: a pass meets it before the two on s1 */
	snprintf(extra, sizeof(extra),
		 "%s[scheduler]\ninterval = 100ms\nclaim_lease = 1s\n\n"
		 "[schedule %s]\ntype = b\ncron = 0 0 1 1 *\n\n"
		 "[schedule %s]\ntype = a\ncron = 0 0 1 1 *\n\n"
		 "[schedule %s]\ntype = a\ncron = 0 0 1 1 *\n\n"
		 "[schedule %s]\ntype = b\ncron = 0 0 1 1 *\n",
		 types_ini, on2, on1a, on1b, late);
	free(t.extra);
	t.extra = strdup(extra);
	const char *names[] = {on2, on1a, on1b, late};
	for (int i = 0; i < 4; i++)
		schedule_orphan(names[i], slot, "1 hour");
	testdb_proxy_start(&px, t.ports[1]);
	write_ini_via(NULL, NULL, "connect_timeout = 10m\n", px.port);
	test_daemon_start(&D, ini_path, "shardqd-sched.out");

	testdb_proxy_hole(&px, 1);
	for (int i = 0; i < 3; i++)
		schedule_orphan(names[i], slot, "-1 second");
	wait_schedule(on1a, "enqueues", 1,
		      "with s2 gone, the scheduler's pass waits on s2's connect (connect_timeout "
		      "10 min) instead of going on to the schedules on s1");
	wait_schedule(on1b, "enqueues", 1, "the second schedule on s1 is not enqueued");
	/* on2's slot is taken over again, pass after pass, and not lost */
	wait_schedule(on2, "retries", 3, "on2's slot is not tried again");
	ck_assert_int_eq(schedule_field(on2, "enqueues"), 0);
	ck_assert_int_eq(testdb_scalar(&t, 0, "SELECT count(*) FROM shardq.jobs WHERE task = 'a'"),
			 2);
	printf("schedules with s2 gone: the two on s1 enqueued; %s's slot tried %lld times\n", on2,
	       schedule_field(on2, "retries"));
	/* and their jobs are claimed: the claimer's LISTEN connect to s2 (its
	 * LISTEN connection was cut more than a second ago) holds it up no
	 * more than the scheduler */
	call_timeout_s = STALL_S;
	hresp r = call("POST", "/v1/claim", tok_worker,
		       "{\"worker\":\"w1\",\"types\":[{\"type\":\"a\",\"limit\":10}],"
		       "\"wait_ms\":0}");
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	ck_assert_int_eq((long long)json_array_size(json_object_get(j, "jobs")), 2);
	json_decref(j);

	/* s2 is back: on2's held slot is enqueued there */
	testdb_proxy_hole(&px, 0);
	wait_schedule(on2, "enqueues", 1, "s2 is back, but on2's held slot is not enqueued");
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs WHERE task = 'b' AND active_uid = '%s:%s'", on2,
		 slot);
	ck_assert_int_eq(testdb_scalar(&t, 1, sql), 1);

	/* gone again, with a slot on s2 due: a stop waits for the pass, and the
	 * pass waits for s2's connect for at most SQ_SCHED_CONNECT_WAIT_S, not
	 * connect_timeout (the stop would fail on the stall limit) */
	testdb_proxy_hole(&px, 1);
	schedule_orphan(late, slot, "-1 second");
	wait_schedule(late, "retries", 2, "the slot on s2 is not tried with s2 gone again");
	ck_assert_int_eq(test_daemon_stop(&D, SIGTERM), 0);
	ck_assert_int_eq(schedule_field(late, "enqueues"), 0);
	call_timeout_s = 0;
	testdb_proxy_hole(&px, 0);
	testdb_proxy_stop(&px);
	stop_all();
}
END_TEST

/*
 * The claimer's LISTEN connection to s2 dies unseen: the proxy in front of
 * s2 drops the shard side of the connections it holds, while the daemon's
 * side stays open and silent (a NAT that forgot them; no reset reaches
 * the daemon). With claim_poll at 10 s (its longest), s2's NOTIFYs are then all
 * that would bring its next job to a waiting long poll sooner, and they go
 * nowhere. The claimer probes a LISTEN connection silent for 5 s, takes
 * one whose probe gets no answer (answer_timeout 3 s here) as dead, and
 * listens again. Asserted: s2 has the daemon's LISTEN backend again, the
 * daemon's output says why, and a job enqueued on s2 after that reaches a
 * long poll, once.
 */
START_TEST(a_listen_connection_that_died_unseen_is_made_again)
{
	testdb_proxy px;
	testdb_open(&t, "sq_http_zombie", 2, 64, types_ini);
	testdb_proxy_start(&px, t.ports[1]);
	write_ini_via("claim_poll = 10s\n", NULL, "answer_timeout = 3s\n", px.port);
	test_daemon_start(&D, ini_path, "shardqd.out");
	const char *listening = "SELECT count(*) FROM pg_stat_activity WHERE datname = "
				"current_database() AND application_name = 'sqd-listen'";
	/* s2's LISTEN backend: there, gone with the cut, there again */
	const long long want[3] = {1, 0, 1};
	const char *what[3] = {"after the start", "after the cut", "again after the cut"};
	for (int k = 0; k < 3; k++) {
		if (k == 1)
			testdb_proxy_zombie(&px);
		double since = test_now_s();
		long long n;
		while ((n = testdb_scalar(&t, 1, listening)) != want[k]) {
			ck_assert_msg(
				test_now_s() - since < STALL_S,
				"s2 has %lld LISTEN backends of the daemon, not %lld, %.0fs %s; "
				"its output:\n%s",
				n, want[k], STALL_S, what[k], slurp_tail(D.out));
			usleep(50000);
		}
	}
	ck_assert_msg(strstr(test_file_text(D.out), "shard s2") &&
			      strstr(test_file_text(D.out), "the LISTEN connection got no answer"),
		      "the daemon did not say why it listened again:\n%s", slurp_tail(D.out));
	/* a job on s2 reaches a long poll (its claim on s2 may first fail on
	 * the claim connection, which died unseen too) */
	char key[32];
	for (int i = 0;; i++) {
		snprintf(key, sizeof(key), "zombie-%d", i);
		if (sq_client_shard_of_partition(
			    t.client, sq_partition_of_key(key, strlen(key), t.partitions)) == 1)
			break;
	}
	int64_t id = enqueue_one(t.client, "a", key, NULL, NULL);
	ck_assert_int_gt(id, 0);
	/* Long polls until the job comes, failing only when none has brought it
	 * for STALL_S: on a loaded machine the claim connection to s2 may still
	 * be connecting when a poll's wait ends (that poll answers empty). */
	call_timeout_s = STALL_S + 70;
	size_t got = 0;
	int64_t got_id = 0;
	char last[301] = "";
	for (double since = test_now_s(); got == 0 && test_now_s() - since < STALL_S;) {
		hresp r = call("POST", "/v1/claim", tok_worker,
			       "{\"worker\":\"w1\",\"types\":[{\"type\":\"a\",\"limit\":10}],"
			       "\"wait_ms\":60000}");
		EXPECT(r, 200, NULL);
		json_t *j = js(&r);
		json_t *jobs = json_object_get(j, "jobs");
		got = json_array_size(jobs);
		if (got > 0)
			got_id = json_integer_value(json_object_get(json_array_get(jobs, 0), "id"));
		snprintf(last, sizeof(last), "%s", r.body);
		json_decref(j);
	}
	ck_assert_msg(got == 1 && got_id == id,
		      "long polls for %.0f s got %zu jobs, not the one enqueued on s2 (%lld): %s; "
		      "the daemon's output:\n%s",
		      STALL_S, got, (long long)id, last, slurp_tail(D.out));
	call_timeout_s = 0;
	testdb_proxy_stop(&px);
	stop_all();
}
END_TEST

/*
 * A long poll is answered when its job is enqueued, by the NOTIFY, within
 * the window and a claim's round trip, not at the next poll: with
 * claim_poll at 10 s (its longest), a claim waits (the tick its arrival
 * asked for has found nothing), then one job is enqueued. Asserted: the
 * claim gets it, and sooner than half of claim_poll after the enqueue
 * (the poll could bring it no sooner than claim_poll after that tick).
 */
START_TEST(a_long_poll_is_answered_when_its_job_is_enqueued)
{
	start_all("sq_http_window", "claim_poll = 10s\nclaim_window = 20ms\n");
	long long ticks0 = metric("shardqd_claim_statements_total");
	int fd = hc_connect(D.port);
	struct timeval tv = {(time_t)(STALL_S + 30), 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ck_assert_int_eq(hc_send(fd, "POST", "/v1/claim", tok_worker,
				 "{\"worker\":\"w1\",\"types\":[{\"type\":\"a\",\"limit\":10}],"
				 "\"wait_ms\":20000}"),
			 0);
	/* waiting, after a tick that found nothing */
	double since = test_now_s();
	while (metric("shardqd_claims_waiting") != 1 ||
	       metric("shardqd_claim_statements_total") == ticks0) {
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "the claim did not wait after a tick in %.0fs (waiting %lld, ticks "
			      "%lld); the daemon's output:\n%s",
			      STALL_S, metric("shardqd_claims_waiting"),
			      metric("shardqd_claim_statements_total") - ticks0, slurp_tail(D.out));
		usleep(20000);
	}
	long long ticks1 = metric("shardqd_claim_statements_total");
	double enq = test_now_s();
	int64_t id = enqueue_one(t.client, "a", "window-1", NULL, NULL);
	hresp r;
	ck_assert_msg(hc_recv(fd, &r) == 0, "no answer to the long poll in %.0fs: %s", STALL_S + 30,
		      slurp_tail(D.out));
	double took = test_now_s() - enq;
	close(fd);
	EXPECT(r, 200, NULL);
	json_t *j = js(&r);
	json_t *jobs = json_object_get(j, "jobs");
	ck_assert_msg(json_array_size(jobs) == 1 && json_integer_value(json_object_get(
							    json_array_get(jobs, 0), "id")) == id,
		      "the long poll got %s, not job %lld", r.body, (long long)id);
	json_decref(j);
	free(r.body);
	printf("a long poll answered %.1f ms after its job's enqueue (%lld tick(s))\n", took * 1000,
	       metric("shardqd_claim_statements_total") - ticks1);
	ck_assert_msg(took < 5.0,
		      "the long poll was answered %.1f s after the enqueue: not by its NOTIFY "
		      "(claim_poll is 10 s); the daemon's output:\n%s",
		      took, slurp_tail(D.out));
	stop_all();
}
END_TEST

/* A metric of one shard's series, as a double; -1 when it is absent. */
static double shard_metric(const char *name, const char *shard)
{
	hresp r = call("GET", "/metrics", tok_admin, NULL);
	ck_assert_int_eq(r.status, 200);
	char want[160];
	snprintf(want, sizeof(want), "\n%s{shard=\"%s\"} ", name, shard);
	const char *p = strstr(r.body, want);
	return p ? atof(p + strlen(want)) : -1;
}

static long long dead_rows_left(void *arg)
{
	(void)arg;
	double v = shard_metric("shardq_jobs_dead_rows", "s1");
	return v < 0 ? 1000000 : (long long)v;
}

/* Waits until shardqd's log has a line with `text` (a stall fails). */
static void wait_log(const char *text)
{
	double t0 = test_now_s();
	while (!strstr(test_file_text(D.out), text)) {
		ck_assert_msg(test_now_s() - t0 < STALL_S,
			      "no '%s' in shardqd's log after %.0fs:\n%s", text, STALL_S,
			      slurp_tail(D.out));
		usleep(50000);
	}
}

/* A transaction left open on a shard (an idle session in REPEATABLE READ
 * holding the xmin horizon, as seed 002 warns, with the server's idle
 * timeout turned off for it): 20,000 jobs still flow through claims and
 * completions; VACUUM cannot remove the dead rows they leave, and
 * /metrics shows the transaction's age, the horizon's and the dead rows
 * on that shard. Once it ends, a VACUUM removes them. The meta database
 * away (its schema renamed for a moment): shardq_meta_up is 0, and the log
 * says when it stopped answering and when it answered again. */
START_TEST(a_transaction_left_open_is_seen_and_claims_go_on)
{
	enum { N = 20000, BATCH = 1000 };
	start_all("sq_http_open_xact", NULL);
	PGconn *idle = testdb_pg(&t, 0), *vac = testdb_pg(&t, 0);
	PQclear(PQexec(idle, "SET idle_in_transaction_session_timeout = 0"));
	PGresult *r = PQexec(idle, "BEGIN ISOLATION LEVEL REPEATABLE READ; "
				   "SELECT count(*) FROM shardq.jobs");
	ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	double held = test_now_s();
	long long done = 0;
	double last = test_now_s();
	while (done < N) {
		test_enqueue_n(t.client, "a", BATCH, NULL);
		sq_job *jobs = NULL;
		size_t n;
		while ((n = claim_type(t.client, "w1", "a", BATCH, &jobs)) > 0) {
			sq_job_ref refs[BATCH];
			sq_status out[BATCH];
			sq_error err;
			for (size_t i = 0; i < n; i++)
				refs[i].id = jobs[i].id, refs[i].attempt = jobs[i].attempt;
			OKE(sq_complete(t.client, "w1", refs, n, out, &err));
			for (size_t i = 0; i < n; i++)
				ck_assert_int_eq(out[i], SQ_OK);
			done += (long long)n;
			sq_jobs_free(jobs, n);
			jobs = NULL;
			last = test_now_s();
		}
		ck_assert_msg(test_now_s() - last < testdb_stall_s(),
			      "no job claimed for %.0fs beside the open transaction (%lld done)",
			      testdb_stall_s(), done);
	}
	ck_assert_int_eq(done, N);
	ck_assert_int_eq(test_live_jobs(&t), 0);
	/* vacuum cannot take what the open transaction may still see */
	PQclear(PQexec(vac, "VACUUM shardq.jobs"));
	long long left;
	double dead = -1, since = test_now_s();
	while ((dead = shard_metric("shardq_jobs_dead_rows", "s1")) < N / 4) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "s1 shows %.0f dead rows after a VACUUM beside the open transaction, "
			      "not the %d or so its %lld completed jobs left",
			      dead, N / 2, done);
		usleep(200000);
	}
	/* held for 3 s at least, so that its age says something */
	while (test_now_s() - held < 3)
		usleep(100000);
	double age = shard_metric("shardq_oldest_transaction_seconds", "s1");
	ck_assert_msg(age >= 2.5 && age <= test_now_s() - held + 5,
		      "the oldest transaction on s1 is %.1fs old, but one was held for %.1fs", age,
		      test_now_s() - held);
	ck_assert_msg(shard_metric("shardq_xmin_horizon_age", "s1") >= 10,
		      "the xmin horizon's age on s1 is %.0f transactions",
		      shard_metric("shardq_xmin_horizon_age", "s1"));
	ck_assert_msg(shard_metric("shardq_jobs_autovacuum_runs_total", "s1") >= 0,
		      "no autovacuum count for s1");
	printf("open transaction: %lld jobs flowed beside it; s1 kept %.0f dead rows; oldest "
	       "transaction %.1fs\n",
	       done, dead, age);
	/* it ends: the next vacuum removes the dead rows */
	PQclear(PQexec(idle, "ROLLBACK"));
	PQclear(PQexec(vac, "VACUUM shardq.jobs"));
	ck_assert_msg(wait_progress(dead_rows_left, NULL, &left),
		      "s1's dead rows stayed at %lld after the transaction ended and a VACUUM",
		      left);
	/* the meta database's answer is a series too: 1, and 0 while its
	 * schema cannot be read (renamed away for a moment) */
	ck_assert_int_eq(metric("shardq_meta_up"), 1);
	PQclear(PQexec(vac, "ALTER SCHEMA shardq_meta RENAME TO shardq_meta_away"));
	long long down = metric("shardq_meta_up");
	/* and the log says when the outage began and when it ended */
	wait_log("meta database: not answering (");
	PQclear(PQexec(vac, "ALTER SCHEMA shardq_meta_away RENAME TO shardq_meta"));
	ck_assert_int_eq(down, 0);
	ck_assert_int_eq(metric("shardq_meta_up"), 1);
	wait_log("meta database: answering again after ");
	PQfinish(idle);
	PQfinish(vac);
	stop_all();
}
END_TEST

/* A tick that claims fewer jobs than its waiting claims asked for deals
 * them in turn: four long polls of up to 10 jobs each, then 4 jobs
 * enqueued at once, and every poll is answered with one of them. Dealt to
 * the first to arrive, one poll would get all four (or two, if two ticks
 * took them) and the others would wait on. */
START_TEST(a_tick_with_fewer_jobs_than_asked_answers_every_waiting_claim)
{
	enum { N = 4 };
	start_all("sq_http_turns", "claim_poll = 10s\nclaim_window = 20ms\n");
	long long ticks0 = metric("shardqd_claim_statements_total");
	int fd[N];
	struct timeval tv = {(time_t)(STALL_S + 30), 0};
	for (int i = 0; i < N; i++) {
		char body[160];
		fd[i] = hc_connect(D.port);
		setsockopt(fd[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		snprintf(body, sizeof(body),
			 "{\"worker\":\"w%d\",\"types\":[{\"type\":\"a\",\"limit\":10}],"
			 "\"wait_ms\":20000}",
			 i);
		ck_assert_int_eq(hc_send(fd[i], "POST", "/v1/claim", tok_worker, body), 0);
	}
	/* all four waiting, after a tick that found nothing */
	double since = test_now_s();
	while (metric("shardqd_claims_waiting") != N ||
	       metric("shardqd_claim_statements_total") == ticks0) {
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "the claims did not all wait after a tick in %.0fs (waiting %lld); "
			      "the daemon's output:\n%s",
			      STALL_S, metric("shardqd_claims_waiting"), slurp_tail(D.out));
		usleep(20000);
	}
	int64_t ids[N];
	enqueue("a", N, "turn", ids);
	int64_t got[N];
	for (int i = 0; i < N; i++) {
		hresp r;
		ck_assert_msg(hc_recv(fd[i], &r) == 0, "no answer to long poll %d in %.0fs: %s", i,
			      STALL_S + 30, slurp_tail(D.out));
		close(fd[i]);
		EXPECT(r, 200, NULL);
		json_t *j = js(&r);
		json_t *jobs = json_object_get(j, "jobs");
		ck_assert_msg(json_array_size(jobs) == 1,
			      "long poll %d got %zu jobs, not one of the four: %s", i,
			      json_array_size(jobs), r.body);
		got[i] = json_integer_value(json_object_get(json_array_get(jobs, 0), "id"));
		json_decref(j);
		free(r.body);
	}
	/* the four jobs enqueued, each to one poll */
	for (int i = 0; i < N; i++) {
		int n = 0;
		for (int k = 0; k < N; k++)
			n += got[k] == ids[i];
		ck_assert_msg(n == 1, "job %lld went to %d polls", (long long)ids[i], n);
	}
	stop_all();
}
END_TEST

/* An enqueue that waits on its shard (here a lock held on the jobs table)
 * is handed to the enqueue lanes: with one request thread, another
 * request is still answered meanwhile; the enqueue is answered, written,
 * once the lock goes. */
START_TEST(a_waiting_enqueue_holds_no_request_thread)
{
	start_all("sq_http_enq_lanes", "threads = 1\n");
	int64_t first;
	enqueue("a", 1, NULL, &first);
	/* INSERTs wait (SHARE against ROW EXCLUSIVE); reads go on */
	PGconn *lock[2];
	for (int s = 0; s < 2; s++) {
		lock[s] = testdb_pg(&t, s);
		PGresult *r = PQexec(lock[s], "BEGIN; LOCK TABLE shardq.jobs IN SHARE MODE");
		ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(lock[s]));
		PQclear(r);
	}
	int fd = hc_connect(D.port);
	ck_assert_int_eq(hc_send(fd, "POST", "/v1/jobs", tok_producer,
				 "{\"jobs\":[{\"type\":\"b\",\"key\":\"held\"}]}"),
			 0);
	/* the enqueue is in the shard, waiting on the lock */
	double since = test_now_s();
	while (testdb_sum(&t, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
			      "current_database() AND wait_event_type = 'Lock' "
			      "AND application_name LIKE 'sqd%'") == 0) {
		ck_assert_msg(test_now_s() - since < STALL_S,
			      "the enqueue did not reach its shard in %.0f s", STALL_S);
		usleep(20000);
	}
	/* the one request thread answers a read meanwhile */
	char path[64];
	snprintf(path, sizeof(path), "/v1/jobs/%lld", (long long)first);
	int g = hc_connect(D.port);
	ck_assert_int_eq(hc_send(g, "GET", path, tok_worker, NULL), 0);
	struct pollfd pf = {g, POLLIN, 0};
	ck_assert_msg(poll(&pf, 1, (int)(STALL_S * 1000)) == 1,
		      "GET %s not answered in %.0f s while an enqueue waits on its shard: the "
		      "enqueue holds the only request thread",
		      path, STALL_S);
	hresp r;
	ck_assert_int_eq(hc_recv(g, &r), 0);
	close(g);
	EXPECT(r, 200, NULL);
	free(r.body);
	/* the lock goes: the enqueue is answered, and written */
	for (int s = 0; s < 2; s++) {
		PQclear(PQexec(lock[s], "COMMIT"));
		PQfinish(lock[s]);
	}
	ck_assert_int_eq(hc_recv(fd, &r), 0);
	close(fd);
	EXPECT(r, 200, NULL);
	ck_assert_msg(strstr(r.body, "\"outcome\":\"inserted\"") != NULL, "%s", r.body);
	free(r.body);
	ck_assert_int_eq(live("active_uid = 'held'"), 1);
	stop_all();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("http");
	ADD_CASE(s, every_endpoint, 3600);
	ADD_CASE(s, auth_and_scopes, 3600);
	ADD_CASE(s, limits_and_slow_clients, 3600);
	ADD_CASE(s, a_malformed_chunked_body_gets_a_json_400, 3600);
	ADD_CASE(s, many_long_polls_few_connections, 3600);
	ADD_CASE(s, no_double_handout_and_limits, 3600);
	ADD_CASE(s, disconnect_mid_claim_loses_nothing, 3600);
	ADD_CASE(s, half_closed_client_gets_only_its_own, 3600);
	ADD_CASE(s, kill9_jobs_come_back, 3600);
	ADD_CASE(s, two_daemons_and_a_move, 3600);
	ADD_CASE(s, sigterm_is_graceful, 3600);
	ADD_CASE(s, admin_page_matches_shards, 3600);
	ADD_CASE(s, listen_errors_name_the_address, 3600);
	ADD_CASE(s, cut_connections_are_replaced_before_a_request, 3600);
	ADD_CASE(s, a_shard_that_does_not_answer_holds_no_request_up, 3600);
	ADD_CASE(s, a_shard_that_stops_answering_holds_no_request_up, 3600);
	ADD_CASE(s, a_heartbeat_beside_a_shard_that_stops_answering_is_answered, 3600);
	ADD_CASE(s, a_shard_that_does_not_answer_holds_the_start_up_once, 3600);
	ADD_CASE(s, the_schedules_go_on_beside_a_shard_that_does_not_answer, 3600);
	ADD_CASE(s, a_listen_connection_that_died_unseen_is_made_again, 3600);
	ADD_CASE(s, a_long_poll_is_answered_when_its_job_is_enqueued, 3600);
	ADD_CASE(s, a_tick_with_fewer_jobs_than_asked_answers_every_waiting_claim, 3600);
	ADD_CASE(s, a_transaction_left_open_is_seen_and_claims_go_on, 3600);
	ADD_CASE(s, a_waiting_enqueue_holds_no_request_thread, 3600);
	return run_suite(s);
}
